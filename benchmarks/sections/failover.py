"""The Failover section: seconds from a worker's SIGKILL, and from the broker's return, until the group's lag is 0."""

from __future__ import annotations

from typing import Any

from benchmarks.sections.figures import check, load_result, machine_of

_KINDS = {
    "kill": "two workers, one killed (SIGKILL) halfway through the feed: from the kill",
    "outage": "one worker, the broker stopped halfway through the feed: from the broker's return",
}


def section(lines: list[str]) -> None:
    result = load_result("failover")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.failover`.", ""]
        return
    target = result["target_seconds"]
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"A feed of {result['documents']:,} documents of five Django chunks each ({result['chunks']:,} chunks),",
        f"produced at {result['rate_chunks_per_second']:,.0f} chunks/s to {result['partitions']} partitions. Seconds",
        "until the group's lag is 0 (every input and stage partition committed at its end offset, the feed all",
        f"produced); the broker stays down {result['outage_seconds']:.0f} s, and its return is when `broker.sh start`",
        "has returned (it answers and has started). Each round checks the view against an embedded run of the same",
        "feed. `before`: the worker with the client's defaults (a 10 s session timeout, heartbeats every 3 s, the",
        "broker holding a fetch up to 500 ms, a batch retried for 40 s). A round whose worker stopped never drains:",
        "it shows as such, and leaves the worst figure open.",
        "",
    ]
    before = load_result("failover-before")
    lines += [
        "| run | median (s) | worst (s) | each round (s) | view right | target |",
        "|---|---:|---:|---|---|---|",
    ]
    for label, found in (("before", before), ("now", result)):
        if found is None:
            continue
        for kind, what in _KINDS.items():
            part = found.get(kind)
            if part:
                lines.append(_row(f"{label}: {what}", part, target))
    lines.append("")


def _row(label: str, part: dict[str, Any], target: float) -> str:
    each = ", ".join(
        "worker stopped" if r["seconds"] is None else f"{r['seconds']:.1f}" for r in part["rounds"]
    )
    right = "yes" if part["views_equal"] and part["all_mapped"] else "**no**"
    median = "—" if part["median_s"] is None else f"{part['median_s']:.1f}"
    worst = part["worst_s"]
    return (
        f"| {label} | {median} | {'—' if worst is None else f'{worst:.1f}'} | {each} | {right} | "
        f"{target:.0f} s: {check(worst is not None and worst <= target)} |"
    )
