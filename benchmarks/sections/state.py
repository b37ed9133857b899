"""The State section: bytes per unique chunk, restarts of the worker, and the state's families."""

from __future__ import annotations

from typing import Any

from benchmarks.sections.figures import (
    check,
    load_result,
    machine_of,
)


def section(lines: list[str]) -> None:
    result = load_result("state")
    if result is None:
        lines.append("_Not run yet: `python -m benchmarks.state` (starts its own broker)._\n")
        return
    embedded, kafka = result["embedded"], result["kafka"]
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.\n",
        "| measure | value |",
        "|---|---:|",
        f"| unique chunks in the state (Django docs, five releases) | {embedded['unique_chunks']:,} |",
        "| bytes on disk per unique chunk (RocksDB, flushed and compacted) | "
        f"{embedded['bytes_per_unique_chunk']:,.0f} |",
        f"| of which chunk text kept in the records (uncompressed) | "
        f"{embedded['text_bytes'] / embedded['unique_chunks']:,.0f} |",
        f"| bytes per unique chunk without the stored text | {embedded['bytes_per_unique_chunk_without_text']:,.0f} |",
        f"| embedded: reopen the state and process one event | {embedded['embedded_restart_seconds']:.2f} s |",
        "",
        *_state_worker(kafka),
        *_state_families(embedded),
    ]


def _state_worker(kafka: dict[str, Any]) -> list[str]:
    if "restart_kept" not in kafka:
        return [
            f"Worker: first run over {kafka['documents']:,} documents {kafka['first_run_seconds']:.1f} s; restart "
            f"with local state {kafka['restart_kept_seconds']:.1f} s; rebuilt from the changelogs "
            f"{kafka['restart_rebuilt_seconds']:.1f} s (an older version of the benchmark).",
            "",
        ]
    before, targets = kafka.get("before", {}), kafka.get("targets", {})
    kept, rebuilt = kafka["restart_kept"], kafka["restart_rebuilt"]

    def row(label: str, key: str | None, value: float) -> str:
        old = before.get(key or "")
        target = targets.get(key or "")
        verdict = "" if target is None else f"at most {target:g} s, {check(value <= target)}"
        shown = f"{value:.2f}" if value < 10 else f"{value:.1f}"
        return f"| {label} | {'' if old is None else f'{old:.1f} s'} | {shown} s | {verdict} |"

    return [
        f"**The worker** after the Django 4.2 docs ({kafka['documents']:,} documents; its changelogs then hold "
        f"{kafka['changelog_records']:,} records, its data directory {kafka['data_dir_bytes'] / 2**20:,.0f} MiB). "
        "A restart is timed from the process's launch, with one new document produced as it starts; *before* is "
        "the worker on Faust tables (47.2 s and 3.6 s were until the group had committed the new document).\n",
        "| measure | before | now | target |",
        "|---|---:|---:|---|",
        row(f"first run over {kafka['documents']:,} documents (launch to all committed)", "first_run_seconds",
            kafka["first_run_seconds"]),
        row("restart with local state: until the new document's source mapping is written",
            "restart_kept_seconds", kept["first_event_seconds"]),
        row("… until its web server answers (interpreter, imports, start)", None,
            kept.get("web_answers_seconds") or 0.0),
        row("… until healthy (group joined, stores recovered)", None, kept["healthy_seconds"]),
        row("restart with an empty data directory, stores rebuilt from the changelogs: until the new document's "
            "source mapping is written", "restart_rebuilt_seconds", rebuilt["first_event_seconds"]),
        row("… until its web server answers (interpreter, imports, start)", None,
            rebuilt.get("web_answers_seconds") or 0.0),
        row("… until healthy (group joined, stores recovered)", None, rebuilt["healthy_seconds"]),
        "",
        "The workers' own figures (`streamdedup_recovery_seconds`, `streamdedup_recovered_records_total`): "
        f"with local state, {kept['worker_recovery_seconds']:.2f} s and {kept['recovered_records']:,.0f} records "
        f"replayed; rebuilt, {rebuilt['worker_recovery_seconds']:.2f} s and {rebuilt['recovered_records']:,.0f} "
        f"records ({rebuilt['recovered_records'] / max(rebuilt['worker_recovery_seconds'], 1e-9):,.0f} records/s).",
        "",
        *_restart_runs(kafka),
        *_rebuild_records(kafka),
    ]  # fmt: skip


def _restart_runs(kafka: dict[str, Any]) -> list[str]:
    kept, rebuilt = kafka.get("restart_kept_runs"), kafka.get("restart_rebuilt_runs")
    if not kept or not rebuilt:
        return []

    def seconds(runs: list[dict[str, Any]]) -> str:
        def one(run: dict[str, Any]) -> str:
            if run.get("machine_cpu_seconds") is None:
                return f"{run['first_event_seconds']:.2f} s"
            cores = run["machine_cpu_seconds"] / run["window_seconds"]
            return f"{run['first_event_seconds']:.2f} s ({cores:.1f} cores busy)"

        return ", ".join(one(run) for run in runs)

    return [
        f"Each restart ran {len(kept)} times; the table shows the fastest (until the new document's mapping, and how "
        "busy the whole machine was meanwhile, the worker included: with "
        f"local state {seconds(kept)}; rebuilt {seconds(rebuilt)}).",
        "",
    ]


def _rebuild_records(kafka: dict[str, Any]) -> list[str]:
    by_stage = kafka.get("changelog_records_by_stage")
    if not by_stage:
        return []
    total = sum(by_stage.values())
    return [
        "What a rebuild replays, per stage changelog (records written by the first run; no key is written often "
        "enough for compaction to matter):",
        "",
        "| stage | records | share |",
        "|---|---:|---:|",
        *(
            f"| {stage} | {n:,} | {n / total:.0%} |"
            for stage, n in sorted(by_stage.items(), key=lambda kv: -kv[1])
        ),
        "",
    ]


_FAMILY_ROLES = {
    "source": "per document: its content hashes, what each content answered, its last mapping",
    "content": "per distinct text: its texts once, signature, counts, first sources, neighbours, cluster; "
    "one ref record per (text, source) holding it",
    "band": "per LSH bucket: the contents in it",
    "collection": "per collection: documents per normalized line (boilerplate)",
    "view": "per output key: the last digest sent",
}


def _state_families(embedded: dict[str, Any]) -> list[str]:
    families = embedded.get("families")
    if not families:
        return []
    unique = embedded["unique_chunks"]
    total = sum(f["bytes"] for f in families.values())
    largest = max(families, key=lambda name: families[name]["bytes"])
    return [
        "Where the bytes are: keys and records per state family, before RocksDB's block compression",
        f"({total / 2**20:,.0f} MiB in all, {embedded['disk_bytes'] / 2**20:,.0f} MiB on disk):",
        "",
        "| family | holds | records | MiB | bytes per unique chunk |",
        "|---|---|---:|---:|---:|",
        *(
            f"| {name} | {_FAMILY_ROLES.get(name, '')} | {f['records']:,} | {f['bytes'] / 2**20:,.1f} | "
            f"{f['bytes'] / unique:,.0f} |"
            for name, f in families.items()
        ),
        "",
        f"The {largest} family is the largest ({families[largest]['bytes'] / total:.0%} of the bytes).",
        *(
            [
                f"Of the content family, {families['content']['ref_records']:,} ref records take "
                f"{families['content']['ref_bytes'] / 2**20:,.1f} MiB."
            ]
            if "ref_records" in families.get("content", {})
            else []
        ),
        "",
    ]
