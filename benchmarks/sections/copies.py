"""The section on a feed where most chunks are copies: ``streamdedup run`` beside the seeds' loop, and its output."""

from __future__ import annotations

from typing import Any

from benchmarks.sections.figures import check, goal_line, load_result, machine_of

MB = 1_000_000
#: The parts of the in-process run that write what the run keeps: its output file and its state.
_KEPT = ("output file (encode, write, fsync)", "state commits", "closing the state (flush)")


def section(lines: list[str]) -> None:
    result = load_result("copies")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.copies`.", ""]
        return
    seconds, cpu, runs = result["seconds"], result["cpu_seconds"], result["runs"]
    loop = result["loop"]
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"The folder of the docs of five Django releases ({result['files']:,} files, {result['input_bytes']:,} "
        "bytes), where most chunk positions repeat a text of an earlier release. Each round runs both, each in a new",
        "process timed from launch to exit, in alternating order; medians of "
        f"{result['rounds']} rounds. The seeds' loop (`benchmarks/seeds_loop.py`) cuts files at blank lines "
        f"({loop['positions']:,} positions, {loop['distinct']:,} distinct texts), normalizes as the articles do,",
        "hashes with SHA-256, skips texts seen before, signs the distinct ones with `MinHash.bulk` and queries and",
        "inserts each in a `MinHashLSH`; it keeps no mapping, ACL, version or output. Every round's output file is",
        "the first round's, byte for byte.",
        "",
        "| run | command | seconds (median) | CPU seconds (median) | each round (s) |",
        "|---|---|---:|---:|---|",
    ]
    commands = {
        "streamdedup run": "`streamdedup run FOLDER --state NEW --out FILE`",
        "seeds' datasketch loop": "`python benchmarks/seeds_loop.py FOLDER`",
    }
    for name, command in commands.items():
        each = ", ".join(f"{s:.2f}" for s in runs["wall"][name])
        lines.append(f"| {name} | {command} | {seconds[name]:.2f} | {cpu[name]:.2f} | {each} |")
    lines += [
        "",
        goal_line(
            "the loop's seconds over the run's",
            result["ratio"],
            result["target"],
            note=f"; in CPU seconds {result['cpu_ratio']:.2f}",
        ),
    ]
    _volume(lines, result["output"], result["input_bytes"])
    parts = result.get("parts_seconds")
    if parts:
        total = parts["total"]
        lines += [
            "Where the run's time goes: the same run once more in the benchmark's process, each part timed (one run,",
            "not a median; its output file is the command's).",
            "",
            "| part | seconds | share |",
            "|---|---:|---:|",
        ]
        lines += [
            f"| {name} | {value:.2f} | {value / total:.0%} |"
            for name, value in parts.items()
            if name != "total"
        ]
        lines += [f"| total | {total:.2f} | |", ""]
        io = sum(parts.get(name, 0.0) for name in _KEPT)
        lines += [
            f"Why the target is missed: the loop keeps nothing and writes nothing, while the run writes "
            f"{result['output']['bytes'] / MB:,.0f} MB of output records and commits its state: "
            f"{io:.2f} s ({io / total:.0%}) of the run above go to the output file, the state's commits and its "
            f"close. The stages take {sum(v for k, v in parts.items() if k.startswith('stage ')) / total:.0%}; "
            "the content stage, the largest, keeps a reference per source position of a text (what deletions, "
            "ACLs and citations need), answers each source with the position's status, and builds each chunk "
            "record (up to 100 sources) it sends. Every copy costs a reference, a status, a mapping position "
            "and, for an exact copy, an audit record.",
            "",
        ]


def _volume(lines: list[str], output: dict[str, Any], input_bytes: int) -> None:
    total = output["bytes"]
    lines += [
        f"- Target: output bytes at most input bytes: {total / MB:,.1f} MB for {input_bytes / MB:,.1f} MB "
        f"({total / input_bytes:.2f} times), {check(total <= input_bytes)}.",
        "",
        "| topic | records | keys | MB | MB of the last value per key |",
        "|---|---:|---:|---:|---:|",
    ]
    for topic, found in output["topics"].items():
        lines.append(
            f"| {topic} | {found['records']:,} | {found['keys']:,} | {found['bytes'] / MB:,.1f} | "
            f"{found['last_per_key_bytes'] / MB:,.1f} |"
        )
    chunks = output["canonical_chunks"]
    lines += [
        "",
        "`canonical-chunks` records by what changed since the key's previous record (the folder's files of each "
        "release are newer than the previous release's, so a later release's copy of a text becomes its canonical, by "
        "the default policy's newer `modified_at`):",
        "",
    ]
    lines += ["| records | count | MB |", "|---|---:|---:|"]
    lines.append(
        f"| first writes | {chunks.get('first_writes', 0):,} | {chunks.get('first_write_bytes', 0) / MB:,.1f} |"
    )
    lines.append(
        f"| rewrites of the source list alone (`sources`, `source_count`, `revision`) | "
        f"{chunks.get('sources_only_rewrites', 0):,} | {chunks.get('sources_only_rewrite_bytes', 0) / MB:,.1f} |"
    )
    for name, count in sorted(chunks.items()):
        if name.startswith("rewrites changing "):
            changed = name.removeprefix("rewrites changing ")
            lines.append(
                f"| rewrites changing {changed} | {count:,} | {chunks[f'rewrite bytes changing {changed}'] / MB:,.1f} |"
            )
    lines.append(
        f"| tombstones | {chunks.get('tombstones', 0):,} | {chunks.get('tombstone_bytes', 0) / MB:,.1f} |"
    )
    mappings = output["source_mappings"]
    lines += [
        "",
        f"Of these records' bytes, the `sources` lists hold {chunks['sources_field_bytes'] / MB:,.1f} MB and the "
        f"`members` lists {chunks['members_field_bytes'] / MB:,.1f} MB. `source-mappings`: "
        f"{mappings.get('positions', 0):,} positions sent; {mappings.get('rewrites', 0):,} rewrites of a source "
        f"({mappings.get('rewrite_bytes', 0) / MB:,.1f} MB), in which "
        f"{mappings.get('rewrite_unchanged_positions', 0):,} "
        f"positions ({mappings.get('rewrite_unchanged_position_bytes', 0) / MB:,.1f} MB) are as the source's previous "
        f"record had them; {mappings.get('chunk_ids_equal_to_content_hash', 0):,} positions name a `chunk_id` equal to "
        f"their `content_hash` ({mappings.get('chunk_id_bytes_equal_to_content_hash', 0) / MB:,.1f} MB).",
        "",
        "| audit action/reason | records | MB |",
        "|---|---:|---:|",
    ]
    audit = output["audit"]
    for kind, found in audit.items():
        lines.append(f"| {kind} | {found['records']:,} | {found['bytes'] / MB:,.2f} |")
    canonical_moves = chunks.get("rewrite bytes changing canonical", 0)
    savings = {
        "no `audit` record unless asked for": sum(found["bytes"] for found in audit.values()),
        "chunk records without their `sources` list (`source-mappings` is the complete map)": (
            output["topics"]["canonical-chunks"]["bytes"]
            - chunks.get("tombstone_bytes", 0)
            - chunks.get("bytes_without_sources", 0)
        ),
        "a chunk record not sent again when only its canonical position and sources moved": canonical_moves,
        "a mapping position without `chunk_id` where it is the `content_hash`": mappings.get(
            "chunk_id_bytes_equal_to_content_hash", 0
        ),
        "a rewritten mapping without the positions it had already": mappings.get(
            "rewrite_unchanged_position_bytes", 0
        ),
    }
    lines += ["", "What a change of the event contract could save on this feed, each alone:", ""]
    lines += [f"- {name}: {saved / MB:,.1f} MB" for name, saved in savings.items()]
    lines.append("")
