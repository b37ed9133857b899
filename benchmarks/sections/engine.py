"""The Embedded engine section: the Django docs, the run as a user runs it, and the growth runs' tables."""

from __future__ import annotations

from typing import Any

from benchmarks.sections.figures import (
    PLOTS,
    check,
    goal_line,
    line_chart,
    load_result,
    machine_of,
)
from benchmarks.sections.growth import (
    datasketch_growth,
    flat_growth,
    growth_rows,
    memory_growth,
    stage_growth,
    work_growth,
)


def section(lines: list[str]) -> None:
    result = load_result("engine")
    if result is None:
        lines.append("_Not run yet: `python -m benchmarks.engine`._\n")
        return
    django, growth = result["django"], result["growth"]
    windows = growth["windows"]
    xs = [w["chunks"] / 1000 for w in windows]
    line_chart(PLOTS / "engine-growth.png", xs, {
        "throughput / first window": [w["chunks_per_second"] / windows[0]["chunks_per_second"] for w in windows],
        "RSS / first window": [w["rss_bytes"] / windows[0]["rss_bytes"] for w in windows],
    }, "Embedded engine as the state grows", "chunk positions in the state (thousands)")  # fmt: skip
    ratio = django["ratio_to_signatures"]
    throughput = growth["throughput_ratio_end_to_start"]
    memory = growth["rss_ratio_end_to_start"]
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.\n",
        f"**Django docs** ({django['files']:,} files of five releases, {django['chunks']:,} chunks, "
        f"{django['exact']:,} exact and {django['near']:,} near copies, {django['canonical']:,} canonical chunks), "
        f"embedded runner, RocksDB state, batches of {django.get('batch', 256):,} documents:\n",
        "| | chunks/s | ratio to datasketch bulk |",
        "|---|---:|---:|",
        *(
            [
                f"| datasketch `MinHash.bulk` signatures alone, same chunks (baseline) | "
                f"{django['datasketch_bulk_chunks_per_second']:,.0f} | 1.00 |"
            ]
            if "datasketch_bulk_chunks_per_second" in django
            else []
        ),
        f"| the engine's signature kernel alone, same chunks | {django['signature_chunks_per_second']:,.0f} | "
        f"{django['signature_chunks_per_second'] / django.get('datasketch_bulk_chunks_per_second', 1):.2f} |",
        f"| engine end to end | {django['chunks_per_second']:,.0f} | {django.get('ratio_to_datasketch_bulk', 0):.2f} |",
        *(
            [
                f"| engine end to end, two worker processes (`--workers 2`) | "
                f"{django['workers_2_chunks_per_second']:,.0f} | {django['workers_2_ratio_to_datasketch_bulk']:.2f} |"
            ]
            if "workers_2_chunks_per_second" in django
            else []
        ),
        *(
            [
                f"| engine end to end on its Python kernels (no compiled ones; "
                f"{django['python_kernels_ratio_to_compiled']:.2f} of the compiled engine) | "
                f"{django['python_kernels_chunks_per_second']:,.0f} | "
                f"{django['python_kernels_ratio_to_datasketch_bulk']:.2f} |"
            ]
            if "python_kernels_chunks_per_second" in django
            else []
        ),
        "",
        *_cli_lines(result.get("cli")),
        f"**Growth** to {windows[-1]['chunks']:,} chunk positions ({growth['canonical']:,} canonical chunks, "
        f"{growth['exact']:,} exact and {growth['near']:,} near copies; {growth['disk_bytes'] / 2**20:,.0f} MiB on "
        "disk):\n",
        *growth_rows(windows),
        "![growth](benchmarks/engine-growth.png)\n",
        *stage_growth(windows),
        *work_growth(windows),
        *flat_growth(result.get("growth_flat")),
        *memory_growth(result.get("growth_memory"), growth, result.get("growth_flat")),
        *datasketch_growth(result.get("growth_datasketch"), windows),
        f"- Engine end to end / its own signature kernel alone: {ratio:.2f}.",
        *(
            [
                goal_line(
                    "engine end to end / datasketch bulk, Django", django["ratio_to_datasketch_bulk"], 1.0
                )
            ]
            if "ratio_to_datasketch_bulk" in django
            else []
        ),
        *(
            [
                goal_line(
                    "the same with `--workers 2` (two processes; the baseline uses one core)",
                    django["workers_2_ratio_to_datasketch_bulk"],
                    1.0,
                )
            ]
            if "workers_2_ratio_to_datasketch_bulk" in django
            else []
        ),
        *(
            [
                goal_line(
                    "`streamdedup run` / datasketch bulk script, from launch",
                    result["cli"]["ratio_to_datasketch_bulk"],
                    1.0,
                )
            ]
            if "cli" in result
            else []
        ),
        f"- Target: throughput at the largest state at least 0.8 of the start: {throughput:.2f}, "
        f"{check(throughput >= 0.8)}.",
        *(
            [
                f"- The same at the machine's speed of each window (the fixed work took "
                f"{windows[-1]['fixed_work_seconds'] / windows[0]['fixed_work_seconds']:.2f}x as long in the last "
                f"window as in the first): {growth['throughput_ratio_end_to_start_at_machine_speed']:.2f}."
            ]
            if "throughput_ratio_end_to_start_at_machine_speed" in growth
            else []
        ),
        f"- Target: resident memory not growing with the state: RSS x{memory:.2f} while the state grew "
        f"x{growth['state_ratio_end_to_start']:.0f}, {check(memory < 0.5 * growth['state_ratio_end_to_start'])}.",
        "",
    ]


def _cli_lines(cli: dict[str, Any] | None) -> list[str]:
    if cli is None:
        return []
    return [
        f"**As a user runs it**: a pre-chunked JSONL feed of {cli['positions']:,} positions (documents of ten Django",
        "chunks); wall time from launch to exit, best of three:\n",
        "| | seconds | ratio (datasketch time / this time) |",
        "|---|---:|---:|",
        f"| a script that reads the file and calls `MinHash.bulk` (baseline) | "
        f"{cli['datasketch_script_seconds']:.2f} | 1.00 |",
        f"| `streamdedup run` | {cli['streamdedup_run_seconds']:.2f} | {cli['ratio_to_datasketch_bulk']:.2f} |",
        "",
    ]
