"""Semantic flags on versioned documentation, without and with a lineage rule.

    python -m benchmarks.lineages [--sources N]

The sample of ``benchmarks.index``: ``N`` pages (default 100) that both Django releases of ``benchmarks.retrieval``
have, both copies of each, as one folder ``<release>/<page>``. ``streamdedup run`` and ``streamdedup index --from``
(into an empty index, the default embedder) run twice, as a user runs them: without lineage rules, and with
``STREAMDEDUP_LINEAGE_RULES={"django": ["{version}/{page...}"]}``. Reported: canonical chunks, the outdated ones,
the ``semantic`` review flags each index raised and their share of the canonical chunks, the engine's
``fact_conflict`` flags left open, the pairs the lineage resolved instead (``audit``, action ``resolved``), and a
sample of the pairs still flagged.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import save
from benchmarks.index import DEFAULT_SOURCES, build_sample, command, common_pages, run_into
from benchmarks.retrieval import RELEASES, corpus

RULES = {"django": ["{version}/{page...}"]}
TARGET_SHARE = 0.02  # semantic flags per canonical chunk, with the rule


def _run(sample: Path, scratch: Path, rules: dict[str, Any] | None) -> dict[str, Any]:
    """Run and index ``sample`` (rules in the environment, if any); count what the outputs and the index hold."""
    env_rules = os.environ.pop("STREAMDEDUP_LINEAGE_RULES", None)
    outputs, records = scratch / "outputs.jsonl", scratch / "records.jsonl"
    try:
        if rules is not None:
            os.environ["STREAMDEDUP_LINEAGE_RULES"] = json.dumps(rules)
        run_into(sample, scratch, outputs)
        seconds = command(
            "index",
            "--into",
            f"lancedb://{scratch / 'index'}",
            "--from",
            str(outputs),
            "--reviews",
            str(records),
        )
    finally:
        os.environ.pop("STREAMDEDUP_LINEAGE_RULES", None)
        if env_rules is not None:
            os.environ["STREAMDEDUP_LINEAGE_RULES"] = env_rules
    chunks: dict[str, Any] = {}
    queue: dict[str, Any] = {}
    resolved: dict[str, dict[str, Any]] = {}
    for line in [*outputs.read_text().splitlines(), *records.read_text().splitlines()]:
        record = json.loads(line)
        topic, value = record["topic"], record["value"]
        if topic == "canonical-chunks":
            chunks[record["key"]] = value
        elif topic == "review":
            queue[record["key"]] = value
        elif topic == "audit" and value is not None and value.get("action") == "resolved":
            resolved[record["key"]] = value
    return {
        "seconds": seconds,
        "canonical": sum(v is not None for v in chunks.values()),
        "outdated": sum(v is not None and v.get("current") is False for v in chunks.values()),
        "flags": {k: v for k, v in queue.items() if v is not None and v["reason"] == "semantic"},
        "facts_open": sum(v is not None and v["reason"] == "fact_conflict" for v in queue.values()),
        "resolved": resolved,
        "holders": _holders(outputs),
    }


def _holders(outputs: Path) -> dict[str, set[str]]:
    """Return the sources that hold each content hash, from the last mapping of each source in ``outputs``."""
    mappings: dict[str, list[dict[str, Any]]] = {}
    for line in outputs.read_text().splitlines():
        record = json.loads(line)
        if record["topic"] == "source-mappings":
            mappings[record["key"]] = [] if record["value"] is None else record["value"]["chunks"]
    holders: dict[str, set[str]] = {}
    for source_id, positions in mappings.items():
        for position in positions:
            holders.setdefault(position["content_hash"], set()).add(source_id)
    return holders


def _kinds(flags: dict[str, dict[str, Any]], holders: dict[str, set[str]]) -> dict[str, int]:
    """Sort flagged pairs by where their texts are: one source holds both (two passages of one document), the
    same page in different releases, or different pages."""
    kinds = {"one document holds both": 0, "one page, other releases": 0, "different pages": 0}
    for value in flags.values():
        a, b = holders.get(value["a"]["content_hash"], set()), holders.get(value["b"]["content_hash"], set())
        pages_a, pages_b = ({s.split("/", 1)[-1] for s in side} for side in (a, b))
        if a & b:
            kinds["one document holds both"] += 1
        elif pages_a & pages_b:
            kinds["one page, other releases"] += 1
        else:
            kinds["different pages"] += 1
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sources", type=int, default=DEFAULT_SOURCES, help="pages (default %(default)s)")
    args = parser.parse_args()
    folder = corpus()
    pages = common_pages(folder)[: args.sources]
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        sample = scratch / "sample"
        build_sample(folder, pages, sample)
        runs: dict[str, dict[str, Any]] = {}
        for name, rules in (("without", None), ("with", RULES)):
            started = time.perf_counter()
            (scratch / name).mkdir()
            run = runs[name] = _run(sample, scratch / name, rules)
            run["kinds"] = _kinds(run["flags"], run.pop("holders"))
            print(
                f"{name} the rule: {run['canonical']:,} canonical chunks, {run['outdated']:,} outdated; "
                f"{len(run['flags']):,} semantic flags ({len(run['flags']) / run['canonical']:.1%}), "
                f"{run['facts_open']:,} fact flags open, {len(run['resolved']):,} pairs resolved by the lineage "
                f"({time.perf_counter() - started:.0f} s); flags by kind: {run['kinds']}",
                flush=True,
            )
    kept = runs["with"]["flags"]
    canonical = runs["with"]["canonical"]
    save(
        "lineages",
        {
            "pages": len(pages),
            "releases": list(RELEASES),
            "canonical_chunks": canonical,
            "rules": RULES,
            "canonical_without": runs["without"]["canonical"],
            "outdated_with": runs["with"]["outdated"],
            "facts_open_without": runs["without"]["facts_open"],
            "facts_open_with": runs["with"]["facts_open"],
            "flags_without": len(runs["without"]["flags"]),
            "flags_with": len(kept),
            "resolved_with": len(runs["with"]["resolved"]),
            "share_without": len(runs["without"]["flags"]) / runs["without"]["canonical"],
            "share_with": len(kept) / canonical,
            "kinds_without": runs["without"]["kinds"],
            "kinds_with": runs["with"]["kinds"],
            "target_share": TARGET_SHARE,
            "kept_sample": [
                {"detail": v["detail"], "a": v["a"]["text"][:160], "b": v["b"]["text"][:160]}
                for _, v in sorted(kept.items())[:5]
            ],
        },
    )


if __name__ == "__main__":
    main()
