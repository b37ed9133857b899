"""The Streaming on the broker section: the workers beside the passthrough, the embedded engine and the Quix peer."""

from __future__ import annotations

from typing import Any

from benchmarks.sections.figures import (
    PLOTS,
    bar_chart,
    check,
    goal_line,
    load_result,
    machine_of,
)


def section(lines: list[str]) -> None:
    result = load_result("streaming")
    if result is None:
        lines.append("_Not run yet: `python -m benchmarks.streaming` (starts its own broker)._\n")
        return
    if "embedded" not in result:
        lines.append(
            "_Results of an older version of the benchmark: run `python -m benchmarks.streaming`._\n"
        )
        return
    one, two, embedded, quix = result["one_worker"], result["two_workers"], result["embedded"], result["quix"]
    passthrough = result["passthrough_chunks_per_second"]
    chunks = one["chunks"]
    quix_after = quix["processing_chunks_per_s"] or quix["chunks_per_s"]

    def per_cpu(run: dict[str, Any], key: str) -> float:
        return float(run.get("best_chunks_per_cpu_second") or run[key])

    rows = [
        ("aiokafka consume-and-produce passthrough (baseline, best of "
         f"{result.get('passthrough_runs', 1)})", passthrough, None),
        (f"embedded engine in one process (RocksDB, batches of {embedded['batch']}, same events)",
         embedded["chunks_per_second"], per_cpu(embedded, "chunks_per_cpu_second")),
        ("streamdedup, 1 worker (first produce to last record written)", one["chunks_per_second"],
         per_cpu(one, "chunks_per_cpu_second")),
        ("streamdedup, 2 workers (CPU of both)", two["chunks_per_second"], per_cpu(two, "chunks_per_cpu_second")),
        ("Quix Streams peer, exact-only, from launch", quix["chunks_per_s"], quix["chunks_per_cpu_s"]),
        (f"Quix Streams peer, after its startup ({quix['startup_seconds']:.1f} s)", quix_after,
         per_cpu(quix, "processing_chunks_per_cpu_s")),
    ]  # fmt: skip
    bar_chart(PLOTS / "streaming.png", [r[0].split(" (")[0] for r in rows[1:]], [r[1] for r in rows[1:]],
         "Streaming: chunks/s on the same feed and broker", "chunks/s (same run)")  # fmt: skip
    table = [
        f"| {label} | {rate:,.0f} | {rate / passthrough:.3f} | {'' if cpu is None else f'{cpu:,.0f}'} |"
        for label, rate, cpu in rows
    ]
    targets = result.get("targets", {})
    r_embedded = result["ratio_one_worker_to_embedded"]
    r_cpu = result["ratio_two_to_one_per_cpu_second"]
    r_quix = one["chunks_per_second"] / quix_after
    busy = sum(one["cpu_seconds"]) / one["seconds"]
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`. Broker: Apache Kafka 4.4.0 (KRaft, one node,",
        f"same machine). {result['documents']:,} documents of {result['chunks_per_document']} real Django chunks "
        f"({chunks:,} chunks), {result['partitions']} partitions; every row from the same run, on the same broker",
        "and the same events (the Quix peer gets them as one message per chunk). A worker is timed once its group is",
        "stable and it is healthy (partition stores recovered; as the peer is timed after its startup), from the",
        "first produce until the last record it",
        "wrote; its CPU is user + system of its process over the same window (psutil). The embedded engine, the",
        f"workers and the peer each ran {result.get('repeats', 1)} times, interleaved; the table shows each one's "
        "best chunks/s and best chunks per CPU-s (every run below).\n",
        "| | chunks/s | ratio to passthrough | chunks per CPU-s |",
        "|---|---:|---:|---:|",
        *table,
        "",
        "![streaming](benchmarks/streaming.png)\n",
        *_all_runs(result),
        *_streaming_traffic(result),
        *_latency_line(result),
        goal_line("one worker / embedded engine (chunks/s)", r_embedded, targets.get("one_worker_to_embedded", 0.8)),
        goal_line("two workers' chunks per CPU-s / one worker's", r_cpu, targets.get("two_to_one_per_cpu_second", 0.9),
                note=f"; two workers / one in chunks/s: {result['ratio_two_workers_to_one']:.2f}x on "
                f"{result['machine']['cores']} cores shared with the broker"),
        goal_line("one worker / Quix Streams peer after its startup (chunks/s)", r_quix,
                targets.get("one_worker_to_quix", 1.0),
                note=f"; from the peer's launch: {result['ratio_one_worker_to_quix']:.2f}"),
        goal_line("one worker's chunks per CPU-s / the Quix peer's", result["ratio_one_worker_to_quix_per_cpu_second"],
                targets.get("one_worker_to_quix_per_cpu_second", 1.0)),
        "",
        f"One worker used {sum(one['cpu_seconds']):.1f} CPU-s in {one['seconds']:.1f} s: busy {busy:.0%} of the "
        "time (the rest it waited for Kafka, and for the broker, which shares the cores)"
        + _machine_share(one, result["machine"]["cores"]) + ". "
        f"The embedded engine alone, with no Kafka at all, reaches {embedded['chunks_per_second'] / quix_after:.2f} "
        "of the Quix peer's rate: the peer hashes each chunk once and keeps one state record per distinct text, "
        "where the engine also computes MinHash signatures, writes 21 LSH buckets per new text and verifies near "
        "candidates.",
        "",
        *_streaming_profile(result),
    ]  # fmt: skip


def _all_runs(result: dict[str, Any]) -> list[str]:
    names = {"embedded": "embedded engine", "one_worker": "1 worker", "two_workers": "2 workers",
             "quix": "Quix peer after startup"}  # fmt: skip
    found = [(label, result[key].get("all_runs")) for key, label in names.items()]
    if not any(runs for _, runs in found):
        return []

    def run_text(run: Any) -> str:
        return f"{run[0]:,.0f} ({run[1]:,.0f} per CPU-s)" if isinstance(run, list) else f"{run:,.0f}"

    text = "; ".join(f"{label} {', '.join(run_text(r) for r in runs)}" for label, runs in found if runs)
    return [f"Chunks/s of every run, in order: {text}.\n"]


def _machine_share(run: dict[str, Any], cores: int) -> str:
    machine = run.get("machine_cpu_seconds")
    if machine is None:
        return ""
    window = run["seconds_until_committed"]
    return (
        f"; the whole machine used {machine:.1f} of the {cores * window:.1f} CPU-s its {cores} cores had in the "
        f"window ({machine - sum(run['cpu_seconds']):.1f} CPU-s for the broker, the producer and anything else)"
    )


def _streaming_traffic(result: dict[str, Any]) -> list[str]:
    one = result["one_worker"]
    chunks = one["chunks"]
    metrics = one["metrics"]
    sends = metrics["sends"]
    written = one["records_written"]
    calls = metrics.get("calls", {})
    return [
        "Kafka traffic of the one-worker run, from its `/metrics` (before producing and once idle) and the topics'",
        "end offsets:\n",
        "| | count | per input chunk |",
        "|---|---:|---:|",
        f"| send calls (record batches, `streamdedup_kafka_sends_total`) | {sum(sends.values()):,.0f} | "
        f"{one['sends_per_chunk']:.3f} |",
        *(f"| … of kind `{kind}` | {n:,.0f} | {n / chunks:.3f} |" for kind, n in sorted(sends.items())),
        f"| changelog records (`streamdedup_changelog_records_total`) | {metrics['changelog_records']:,.0f} | "
        f"{one['changelog_records_per_chunk']:.2f} |",
        f"| changelog topics' end offsets | {written['changelog']:,} | {written['changelog'] / chunks:.2f} |",
        *(
            f"| … of changelog `{name}` | {n:,} | {n / chunks:.2f} |"
            for name, n in written.get("changelog_by_stage", {}).items()
        ),
        f"| stage topic records | {written['stage']:,} | {written['stage'] / chunks:.3f} |",
        f"| output topic records | {written['output']:,} | {written['output'] / chunks:.2f} |",
        *(
            f"| handler calls, stage `{stage}` | {n:,.0f} | {n / chunks:.3f} |"
            for stage, n in sorted(calls.items())
        ),
        "",
    ]


def _latency_line(result: dict[str, Any]) -> list[str]:
    targets = result.get("targets", {})
    latency = result.get("latency_at_half_rate")
    if not latency:
        return []
    return [
        f"Latency at half the one-worker rate ({latency['chunks_per_second']:,.0f} chunks/s, {latency['events']:,} "
        f"documents): p50 {latency['p50_s'] * 1000:,.0f} ms, p99 {latency['p99_s'] * 1000:,.0f} ms from input to its "
        "source mapping on the output topic.\n",
        *_latency_target(latency, targets),
    ]


def _latency_target(latency: dict[str, Any], targets: dict[str, Any]) -> list[str]:
    if "latency_p50_seconds" not in targets:
        return []
    p50, p99 = targets["latency_p50_seconds"], targets["latency_p99_seconds"]
    met = latency["p50_s"] < p50 and latency["p99_s"] < p99
    return [
        f"- Target: latency p50 under {p50 * 1000:.0f} ms and p99 under {p99 * 1000:.0f} ms: {check(met)}.\n"
    ]


def _streaming_profile(result: dict[str, Any]) -> list[str]:
    profiled = result.get("profiled_one_worker") or {}
    profile = profiled.get("profile")
    if not profile:
        return []
    engine = profile["parts"].get("engine handlers (Engine.handle)", 0.0)
    one, embedded = result["one_worker"], result["embedded"]
    cpu_one = one["chunks"] / one.get("best_chunks_per_cpu_second", one["chunks_per_cpu_second"])
    cpu_embedded = embedded["chunks"] / embedded.get(
        "best_chunks_per_cpu_second", embedded["chunks_per_cpu_second"]
    )
    return [
        f"Where one worker's time went, from a second one-worker run under py-spy ({profiled['chunks_per_second']:,.0f}"
        f" chunks/s under the sampler; {profile['samples']:,} samples of the active stack; a sample counts for every",
        "part on its stack, so parts that call one another overlap):",
        "",
        "| part | share of samples |",
        "|---|---:|",
        *(f"| {part} | {share:.0%} |" for part, share in profile["parts"].items()),
        "",
        "Frames where the samples were taken (own time):",
        "",
        "| frame | share |",
        "|---|---:|",
        *(f"| `{frame}` | {share:.1%} |" for frame, share in profile["top_frames"][:10]),
        "",
        f"The engine's handlers hold {engine:.0%} of the worker's samples; the rest is the Kafka driver (decoding "
        "and encoding stage batches, building record batches, the producer, a RocksDB write batch per call) and "
        f"the event loop. In CPU-seconds for the same {one['chunks']:,} chunks: the worker {cpu_one:.1f}, the embedded "
        f"engine {cpu_embedded:.1f} ({cpu_one / cpu_embedded:.2f}x).",
        "",
    ]
