"""The Lineages section: semantic flags on versioned documentation, without and with a lineage rule."""

from __future__ import annotations

import json

from benchmarks.sections.figures import check, load_result, machine_of


def section(lines: list[str]) -> None:
    result = load_result("lineages")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.lineages`.", ""]
        return
    canonical = result["canonical_chunks"]
    share, target = result["share_with"], result["target_share"]
    rules = json.dumps(result["rules"])
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"{result['pages']} pages that both Django releases ({', '.join(result['releases'])}) have, both copies of "
        "each, one folder `<release>/<page>`, run with `streamdedup run` and indexed with `streamdedup index "
        "--from` into an empty index with the default embedder: without lineage rules, and with "
        f"`STREAMDEDUP_LINEAGE_RULES={rules}`.",
        "",
        "| run | canonical chunks | outdated | semantic flags | share of canonical chunks | fact flags open | "
        "resolved by the lineage (`audit`) |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| without lineage rules | {result['canonical_without']:,} | 0 | {result['flags_without']:,} | "
        f"{result['share_without']:.1%} | {result['facts_open_without']:,} | 0 |",
        f"| with the rule | {canonical:,} | {result['outdated_with']:,} | {result['flags_with']:,} | {share:.1%} | "
        f"{result['facts_open_with']:,} | {result['resolved_with']:,} |",
        "",
        f"- Target: semantic flags at most {target:.0%} of canonical chunks with the rule: {share:.1%}, "
        f"{check(share <= target)}.",
        "",
        "Where the texts of each flagged pair are (from the run's source mappings):",
        "",
        "| run | one document holds both | one page, other releases | different pages |",
        "|---|---:|---:|---:|",
    ]
    for name, kinds in (
        ("without lineage rules", result["kinds_without"]),
        ("with the rule", result["kinds_with"]),
    ):
        lines.append(f"| {name} | " + " | ".join(f"{n:,}" for n in kinds.values()) + " |")
    lines += [
        "",
        "The writer flags neither two passages that one document holds both of nor texts too short for the",
        "engine's near-copy test (`streamdedup.index.semantic`); a rule resolves the pairs of one page in other",
        "releases, semantic and the engine's fact flags alike. Passages of different pages stay flagged.",
        "",
    ]
    if result["kept_sample"]:
        lines += ["Pairs still flagged with the rule (the first by key):", ""]
        lines += [f"- {k['detail']}: “{_flat(k['a'])}…” / “{_flat(k['b'])}…”" for k in result["kept_sample"]]
        lines += [""]


def _flat(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
