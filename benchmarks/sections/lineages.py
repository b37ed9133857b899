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
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"{result['pages']} pages that both Django releases ({', '.join(result['releases'])}) have, both copies of "
        f"each, one folder `<release>/<page>`: {canonical:,} canonical chunks after `streamdedup run`. Each "
        "`streamdedup index --from` below indexes them into an empty index with the default embedder.",
        "",
        "| `streamdedup index` | semantic flags | share of canonical chunks | resolved by the lineage (`audit`) |",
        "|---|---:|---:|---:|",
        f"| without lineage rules | {result['flags_without']:,} | {result['share_without']:.1%} | 0 |",
        f"| with `STREAMDEDUP_LINEAGE_RULES={json.dumps(result['rules'])}` | {result['flags_with']:,} | "
        f"{share:.1%} | {result['resolved_with']:,} |",
        "",
        f"- Target: semantic flags at most {target:.0%} of canonical chunks with the rule: {share:.1%}, "
        f"{check(share <= target)}.",
        "",
        "Where the texts of each flagged pair are (from the run's source mappings):",
        "",
        "| `streamdedup index` | one document holds both | one page, other releases | different pages |",
        "|---|---:|---:|---:|",
    ]
    for name, kinds in (
        ("without lineage rules", result["kinds_without"]),
        ("with the rule", result["kinds_with"]),
    ):
        lines.append(f"| {name} | " + " | ".join(f"{n:,}" for n in kinds.values()) + " |")
    lines += [
        "",
        "A rule resolves pairs of one page in other releases. Two passages that one document holds both of, and",
        "passages of different pages, are not versions of one another: no lineage relates them, and they stay.",
        "",
    ]
    if result["kept_sample"]:
        lines += ["Pairs still flagged with the rule (the first by key):", ""]
        lines += [f"- {k['detail']}: “{_flat(k['a'])}…” / “{_flat(k['b'])}…”" for k in result["kept_sample"]]
        lines += [""]


def _flat(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
