"""The Retrieval section: what dedup does to a top-k, and the calibration's thresholds."""

from __future__ import annotations

from benchmarks.sections.figures import (
    load_result,
    machine_of,
)


def section(lines: list[str]) -> None:
    result = load_result("retrieval")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.retrieval`.", ""]
        return
    found, cal = result["eval"], result["calibration"]
    plain, dedup = found["without_dedup"], found["with_dedup"]
    releases = " and ".join(result["releases"])
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"The documentation of Django {releases} ({result['files']:,} files, each release dated to its release day,",
        f"one collection). `streamdedup eval -k {found['k']}` with {found['queries']} queries from the docs'",
        f"headings, BM25 ({found['bm25']['implementation']}) over every live chunk position against canonical",
        f"chunks only ({result['eval_seconds']:.1f} s from launch):",
        "",
        "| | without dedup | with dedup |",
        "|---|---:|---:|",
        f"| entries (embedding calls) | {plain['entries']:,} | {dedup['entries']:,} |",
        f"| redundant share of a top-{found['k']} (mean) | {plain['redundant_share']:.1%} | "
        f"{dedup['redundant_share']:.1%} |",
        f"| queries whose top-{found['k']} repeats a passage | {plain['queries_with_redundancy']:,} | "
        f"{dedup['queries_with_redundancy']:,} |",
        f"| distinct chunks per top-{found['k']} (mean) | {plain['distinct_chunks']:.2f} | "
        f"{dedup['distinct_chunks']:.2f} |",
        f"| unique sources per top-{found['k']} (mean) | {plain['unique_sources']:.2f} | "
        f"{dedup['unique_sources']:.2f} |",
        "",
        f"Embedding calls saved: {found['embedding_calls_saved']:,}. Review flags: "
        + ", ".join(f"{reason} {count:,}" for reason, count in found["review_flags"].items())
        + ".",
        "",
        f"`streamdedup calibrate` on the same folder ({result['calibrate_seconds']:.1f} s from launch): "
        f"{cal['corpus']['texts']:,} distinct texts, {cal['corpus']['candidate_pairs']:,} candidate pairs.",
        "",
        "| threshold | near pairs | merged texts | fact_conflict flags | acl_boundary flags | reduction |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in cal["thresholds"]:
        lines.append(
            f"| {row['threshold']:.2f} | {row['near_pairs']:,} | {row['merged']:,} | {row['fact_conflict']:,} | "
            f"{row['acl_boundary']:,} | {row['reduction']:.2%} |"
        )
    lines += [
        "",
        f"Suggested threshold: {cal['suggestion']['threshold']:.2f} ({cal['suggestion']['reason']}).",
        "",
        "![merges and flags against the threshold](benchmarks/retrieval-thresholds.png)",
        "",
    ]
