"""The Popularity section: sources/s while one shared chunk's canonical source keeps moving."""

from __future__ import annotations

from benchmarks.sections.figures import (
    check,
    goal_line,
    load_result,
    machine_of,
)


def section(lines: list[str]) -> None:
    result = load_result("popularity")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.popularity`.", ""]
        return
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"{result['sources']:,} sources, each one document of two chunks: a passage every source shares and a text",
        "of its own. Each source is newer than the last, so the shared chunk's canonical source moves with every",
        f"batch. Embedded runner, RocksDB state, batches of {result.get('batch', 256):,} documents; windows of "
        f"{result['window']:,} sources.",
        "",
        "| sources so far | sources/s | ratio to first window |",
        "|---:|---:|---:|",
    ]
    first = result["windows"][0]["per_second"]
    for window in result["windows"]:
        lines.append(
            f"| {window['sources']:,} | {window['per_second']:,.0f} | {window['per_second'] / first:.2f} |"
        )
    size = result["largest_chunk_record_bytes"]
    lines += [
        "",
        goal_line("last window / first window (sources/s)", result["ratio_last_to_first"], 0.8),
        f"- Target: largest `canonical-chunks` record under 64 KiB: {size:,} bytes, {check(size < 65536)}.",
        "",
    ]
