"""The Rebuilding section: a new state under a new threshold from the retained record, against the original build."""

from __future__ import annotations

from benchmarks.sections.figures import check, load_result, machine_of

MIB = 1024 * 1024


def section(lines: list[str]) -> None:
    result = load_result("rebuild")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.rebuild`.", ""]
        return
    seconds, cpu, others = result["seconds"], result["cpu_seconds"], result["others_cpu_seconds"]
    runs = result["runs"]["wall"]
    threshold, record = result["threshold"], result["record"]
    ratio, target = result["rebuild_to_original"], result["target"]
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"The docs of five Django releases as a JSONL feed of {result['files']:,} text upserts "
        f"({result['positions']:,} live chunk positions).",
        "Each command runs as a user runs it, timed from launch to exit, outputs appended to a file, RocksDB state.",
        "The original build runs under the default settings; the rebuild builds a new state under",
        f"`threshold={threshold}` from the original state's retained record alone; the reference runs the feed again",
        "under that threshold. Each round runs all three in a rotating order; medians of "
        f"{result['rounds']} rounds.",
        "Every round checks that the rebuild's materialized view (compacted topics, revisions left out) and",
        "counters are the reference's. The machine is shared: beside each run's own CPU seconds, the CPU seconds",
        "its other processes used while the run went on.",
        "",
        "| run | command | seconds (median) | CPU seconds | others' CPU seconds | each round (s) |",
        "|---|---|---:|---:|---:|---|",
    ]
    commands = {
        "original": "`streamdedup run FEED --state OLD`",
        "rebuild": f"`streamdedup --set threshold={threshold} run --state NEW --rebuild-from OLD`",
        "reference": f"`streamdedup --set threshold={threshold} run FEED --state REF`",
    }
    for name, command in commands.items():
        each = ", ".join(f"{s:.2f}" for s in runs[name])
        lines.append(
            f"| {name} | {command} | {seconds[name]:.2f} | {cpu[name]:.2f} | {others[name]:.2f} | {each} |"
        )
    live = record["kinds"]["live sources"]
    lines += [
        "",
        f"- Rebuild / original build (time): {ratio:.2f}; CPU seconds: {result['cpu_rebuild_to_original']:.2f}.",
        f"- Rebuild / reference, the same threshold from the feed (time): {result['rebuild_to_reference']:.2f}; "
        f"CPU seconds: {result['cpu_rebuild_to_reference']:.2f}.",
        f"- Target: rebuild at most {target} times the original build: {ratio:.2f}, {check(ratio <= target)}.",
        "",
        "The retained record of the original state (read in "
        f"{record['read_seconds']:.2f} s, keys and values uncompressed):",
        "",
        "| | entries | bytes | per live position | per live source |",
        "|---|---:|---:|---:|---:|",
        f"| retained record | {record['entries']:,} | {record['bytes']:,} | "
        f"{record['bytes_per_live_position']:,.0f} | {record['bytes_per_live_source']:,.0f} |",
    ]
    for kind, found in record["kinds"].items():
        if found["entries"]:
            lines.append(f"| {kind} | {found['entries']:,} | {found['bytes']:,} | | |")
    families = record["family_bytes"]
    lines += [
        "",
        f"- Source text in the live sources' entries: {record['text_bytes']:,} bytes "
        f"({record['text_bytes'] / live['bytes']:.1%} of them).",
        f"- Share of the source family's bytes: {record['share_of_source_family']:.1%}; of every family's "
        f"({sum(families.values()) / MIB:,.1f} MiB): {record['share_of_all_families']:.1%}.",
        f"- The state directory as the run left it: {record['state_disk_bytes'] / MIB:,.1f} MiB; compacted: "
        f"{record['state_compacted_disk_bytes'] / MIB:,.1f} MiB.",
        f"- The record alone, compacted the same way: {record['alone_disk_bytes'] / MIB:,.1f} MiB "
        f"({record['alone_share_of_compacted_state']:.1%} of the compacted state; "
        f"{record['alone_disk_bytes'] / result['positions']:,.0f} bytes per live position).",
        "",
    ]
