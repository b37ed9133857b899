"""What a streaming run measures besides time: CPU seconds, the workers' /metrics and records, py-spy profiles."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES
from streamdedup.settings import Settings


def machine_busy() -> float:
    """Return the CPU seconds every process on the machine has used so far (all cores, idle and iowait excluded)."""
    import psutil

    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def _cpu_seconds(pid: int) -> float:
    """Return the user plus system CPU seconds of process ``pid`` so far."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def scrape(port: int) -> dict[str, Any]:
    """Return the worker's counters of interest from its ``/metrics`` (Prometheus text format)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, Any] = {"sends": {}, "calls": {}, "changelog_records": 0.0, "events_processed": 0.0,
                             "recovery_seconds": 0.0, "recoveries": 0.0, "recovered_records": 0.0}  # fmt: skip
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "streamdedup_kafka_sends_total":
                found["sends"][labels["kind"]] = value
            elif name == "streamdedup_batch_seconds_count":
                found["calls"][labels["stage"]] = value
            elif name == "streamdedup_changelog_records_total":
                found["changelog_records"] = value
            elif name == "streamdedup_events_processed_total":
                found["events_processed"] = value
            elif name == "streamdedup_recovery_seconds_sum":
                found["recovery_seconds"] = value
            elif name == "streamdedup_recovery_seconds_count":
                found["recoveries"] = value
            elif name == "streamdedup_recovered_records_total":
                found["recovered_records"] = value
    return found


def _difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, dict):
            out[key] = {k: v - before.get(key, {}).get(k, 0) for k, v in value.items()}
        else:
            out[key] = value - before.get(key, 0)
    return out


def _sum_metrics(items: list[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for item in items:
        for key, value in item.items():
            if isinstance(value, dict):
                into = total.setdefault(key, {})
                for k, v in value.items():
                    into[k] = into.get(k, 0) + v
            else:
                total[key] = total.get(key, 0) + value
    return total


def _written(settings: Settings) -> tuple[dict[str, Any], float]:
    """Return how many records the workers wrote per kind of topic (changelog, stage, output) and per stage's
    changelog (``changelog_by_stage``), and the wall time (``time.time``) of the last one: the largest timestamp
    among the last records of those topics."""
    from streamdedup.drivers.kafka.admin import partitions_of

    async def count() -> tuple[dict[str, Any], float]:
        prefix = settings.topic_prefix
        consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False,
            max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
        )  # fmt: skip
        await consumer.start()
        try:
            topics = [t for t in await consumer.topics() if t.startswith(prefix)]
            found = await partitions_of(settings, topics)
            kinds: dict[str, Any] = {"changelog": 0, "stage": 0, "output": 0}
            by_stage: dict[str, int] = {}
            lasts: list[TopicPartition] = []
            ends_all: dict[TopicPartition, int] = {}
            for topic in topics:
                ends = await consumer.end_offsets([TopicPartition(topic, p) for p in found[topic]])
                name = topic[len(prefix) :]
                if name.endswith("-changelog"):
                    kinds["changelog"] += sum(ends.values())
                    stage = name.removesuffix("-changelog")
                    by_stage[stage] = by_stage.get(stage, 0) + sum(ends.values())
                elif name.startswith("stage-"):
                    kinds["stage"] += sum(ends.values())
                elif name not in ("documents", "engine-params", "dlq"):
                    kinds["output"] += sum(ends.values())
                else:
                    continue
                lasts += [tp for tp, end in ends.items() if end > 0]
                ends_all.update(ends)
            kinds["changelog_by_stage"] = dict(sorted(by_stage.items()))
            last = 0.0
            if lasts:
                consumer.assign(lasts)
                for tp in lasts:
                    consumer.seek(tp, ends_all[tp] - 1)
                left = set(lasts)
                deadline = time.monotonic() + 60
                while left and time.monotonic() < deadline:
                    for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                        for record in records:
                            last = max(last, record.timestamp / 1000)
                        left.discard(tp)
            return kinds, last
        finally:
            await consumer.stop()

    return asyncio.run(count())


# Where a worker's time goes, from py-spy samples: the share of samples whose stack holds one of these frames.
PROFILE_PARTS = {
    "stage calls, all of it (StageWorker._stage_call)": ("StageWorker._stage_call ",),
    "engine handlers (Engine.handle)": ("Engine.handle ",),
    "decoding stage batch messages": ("decode_batch ",),
    "encoding what handlers produced (_add_produced)": ("StageWorker._add_produced ",),
    "changelog calls (_write_changelog, Sends included)": ("StageWorker._write_changelog ",),
    "queueing records in batches (Sends.add)": ("Sends.add ",),
    "sending batches (Sends.send)": ("Sends.send ",),
    "state commits (PartitionStore.commit)": ("PartitionStore.commit ",),
    "ingest: input validation and routing (_ingest)": ("StageWorker._ingest ",),
    "recovery (recover)": ("recover ",),
    "aiokafka producer's sender task": ("Sender.",),
    "aiokafka consumer: fetching and getmany": ("Fetcher.", "AIOKafkaConsumer.getmany "),
    "event loop waiting (select)": ("EpollSelector.select ", "select.epoll"),
}


def _py_spy() -> str | None:
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.exists() else shutil.which("py-spy")


def profile_shares(raw: Path, parts: dict[str, tuple[str, ...]] = PROFILE_PARTS) -> dict[str, Any]:
    """Aggregate py-spy's raw (collapsed stack) output into the shares of ``parts``, and the heaviest frames."""
    total = 0
    hits = dict.fromkeys(parts, 0)
    own: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        for part, markers in parts.items():
            if any(marker in stack for marker in markers):
                hits[part] += count
        leaf = stack.rsplit(";", 1)[-1]
        own[leaf] = own.get(leaf, 0) + count
    if not total:
        return {}
    top = sorted(own.items(), key=lambda kv: -kv[1])[:15]
    return {
        "samples": total,
        "parts": {part: hit / total for part, hit in hits.items()},
        "top_frames": [[frame, count / total] for frame, count in top],
    }
