"""The Dense neighbourhoods section: many near copies that state different facts."""

from __future__ import annotations

from benchmarks.sections.figures import (
    check,
    load_result,
    machine_of,
)


def section(lines: list[str]) -> None:
    result = load_result("dense")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.dense`.", ""]
        return
    copies, seconds, flags = result["copies"], result["seconds"], result["fact_conflict_flags"]
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"{copies:,} copies of a support macro, each with its own customer number: every pair is above the",
        "threshold and states a different fact, so nothing merges. `streamdedup run` over a JSONL file, RocksDB",
        "state, from launch to exit. Baseline in the same run: as many unrelated texts of the same length.",
        "",
        "| feed | seconds | fact_conflict flags | canonical chunks |",
        "|---|---:|---:|---:|",
        f"| {copies:,} near copies | {seconds:.2f} | {flags:,} | {result['outputs'].get('canonical-chunks', 0):,} |",
        f"| {copies:,} unrelated texts | {result['baseline_seconds']:.2f} | 0 | |",
        "",
        f"- Near copies / unrelated texts (time): {result['ratio_to_baseline']:.2f}.",
        f"- Target: under 10 s: {seconds:.2f} s, {check(seconds < 10)}.",
        f"- Target: at most {copies:,} flags: {flags:,}, {check(flags <= copies)}.",
        "",
    ]
