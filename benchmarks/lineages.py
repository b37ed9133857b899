"""Semantic flags on versioned documentation, without and with a lineage rule.

    python -m benchmarks.lineages [--sources N]

The sample of ``benchmarks.index``: ``N`` pages (default 100) that both Django releases of ``benchmarks.retrieval``
have, both copies of each, as one folder ``<release>/<page>``. ``streamdedup run`` makes the outputs once; then
``streamdedup index --from`` indexes them twice, each into an empty index with the default embedder, as a user runs
it: without lineage rules, and with ``STREAMDEDUP_LINEAGE_RULES={"django": ["{version}/{page...}"]}``. Reported:
canonical chunks, the ``semantic`` review flags each index raised and their share of the canonical chunks, the
pairs the lineage resolved instead (``audit``, action ``resolved``), and a sample of the pairs still flagged.
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
from benchmarks.index import DEFAULT_SOURCES, build_sample, command, common_pages, read_outputs, run_into
from benchmarks.retrieval import RELEASES, corpus

RULES = {"django": ["{version}/{page...}"]}
TARGET_SHARE = 0.02  # semantic flags per canonical chunk, with the rule


def _index(outputs: Path, index: Path, records: Path, rules: dict[str, Any] | None) -> dict[str, Any]:
    """Index ``outputs`` with ``streamdedup index`` (rules in the environment, if any); count what it wrote."""
    env_rules = os.environ.pop("STREAMDEDUP_LINEAGE_RULES", None)
    try:
        if rules is not None:
            os.environ["STREAMDEDUP_LINEAGE_RULES"] = json.dumps(rules)
        seconds = command(
            "index", "--into", f"lancedb://{index}", "--from", str(outputs), "--reviews", str(records)
        )
    finally:
        os.environ.pop("STREAMDEDUP_LINEAGE_RULES", None)
        if env_rules is not None:
            os.environ["STREAMDEDUP_LINEAGE_RULES"] = env_rules
    flags: dict[str, dict[str, Any]] = {}
    resolved: dict[str, dict[str, Any]] = {}
    for line in records.read_text().splitlines():
        record = json.loads(line)
        value = record["value"]
        if record["topic"] == "review" and value is not None and value.get("reason") == "semantic":
            flags[record["key"]] = value
        elif record["topic"] == "audit" and value is not None and value.get("action") == "resolved":
            resolved[record["key"]] = value
    return {"seconds": seconds, "flags": flags, "resolved": resolved}


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
        outputs = scratch / "outputs.jsonl"
        run_into(sample, scratch, outputs)
        engine = read_outputs(outputs)
        canonical = engine["canonical_chunks"]
        print(f"{len(pages)} pages, both releases: {canonical:,} canonical chunks", flush=True)
        runs: dict[str, dict[str, Any]] = {}
        holders = _holders(outputs)
        for name, rules in (("without", None), ("with", RULES)):
            started = time.perf_counter()
            runs[name] = _index(outputs, scratch / f"index-{name}", scratch / f"records-{name}.jsonl", rules)
            runs[name]["kinds"] = _kinds(runs[name]["flags"], holders)
            print(
                f"{name} the rule: {len(runs[name]['flags']):,} semantic flags "
                f"({len(runs[name]['flags']) / canonical:.1%} of canonical chunks), "
                f"{len(runs[name]['resolved']):,} resolved by the lineage ({time.perf_counter() - started:.0f} s); "
                f"flags by kind: {runs[name]['kinds']}",
                flush=True,
            )
    kept = runs["with"]["flags"]
    save(
        "lineages",
        {
            "pages": len(pages),
            "releases": list(RELEASES),
            "canonical_chunks": canonical,
            "rules": RULES,
            "flags_without": len(runs["without"]["flags"]),
            "flags_with": len(kept),
            "resolved_with": len(runs["with"]["resolved"]),
            "share_without": len(runs["without"]["flags"]) / canonical,
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
