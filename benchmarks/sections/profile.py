"""The section on where the embedded engine's time goes, stage by stage."""

from __future__ import annotations

from benchmarks.sections.figures import (
    load_result,
    machine_of,
)


def section(lines: list[str]) -> None:
    result = load_result("profile")
    if result is None:
        lines.append("_Not run yet: `python -m benchmarks.profile`._\n")
        return
    total = result["total_seconds"]
    per_chunk = total / result["chunks"] * 1e6
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.\n",
        f"Django 4.2 docs, {result['files']:,} files, {result['chunks']:,} chunks ({result['canonical']:,} "
        f"canonical), embedded runner with RocksDB state: {total:.1f} s, {per_chunk:.0f} µs per chunk.\n",
        "| part | seconds | share | messages handled |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | {value:.2f} | {value / total:.0%} | {result['messages'].get(name, 0):,} |"
            for name, value in sorted(result["seconds"].items(), key=lambda kv: -kv[1])
        ),
        "",
        "Messages by kind: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(result["message_kinds"].items(), key=lambda kv: -kv[1]))
        + ".\n",
        "What limits the engine: not signatures (one compiled pass, under a microsecond per chunk) but the work",
        "per copy and per state record around them. The content stage (compiled) reads, settles and rewrites a",
        "content's record for every reference update and writes its chunk record again; a batch's records are",
        "then written to RocksDB in one commit, a Python call per key into rocksdict; the source stage chunks,",
        "normalizes and hashes documents and writes what a version tells its contents in compiled calls, and keeps",
        "its records in Python. Each new distinct text also costs a handful of messages between",
        "stages and one LSH bucket read-modify-write per band (21 with the default banding). The floors below say",
        "how much of that the job needs.",
        "",
    ]
