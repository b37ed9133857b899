"""The Burst section: a burst of documents to a running worker, against `streamdedup run` on the same events."""

from __future__ import annotations

from benchmarks.sections.figures import check, load_result, machine_of


def section(lines: list[str]) -> None:
    result = load_result("burst")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.burst`.", ""]
        return
    worker, run = result["worker"], result["run"]
    ratio, target = result["ratio_worker_to_run"], result["target"]
    worker_runs = ", ".join(f"{r['seconds']:.2f}" for r in result["worker_runs"])
    run_runs = ", ".join(f"{r['seconds']:.2f}" for r in result["run_runs"])
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"{result['documents']} documents of {result['chunks_per_document']} Django chunks each, produced at once to "
        "one worker already running and healthy in a stable group (four partitions), timed from the first produce",
        "to the last record the worker wrote (output, stage or changelog record), once the group had committed "
        "every message; and `streamdedup run` on the same events from a JSONL file, from launch to exit. The runs",
        "alternate; the best of each counts.",
        "",
        "| | seconds (best) | every run |",
        "|---|---:|---|",
        f"| worker, first produce to last record written | {worker['seconds']:.2f} | {worker_runs} |",
        f"| `streamdedup run`, launch to exit | {run['seconds']:.2f} | {run_runs} |",
        "",
        f"- The worker's seconds over `run`'s: {ratio:.2f}. Target at most {target:g}: {check(ratio <= target)}.",
        "",
    ]
