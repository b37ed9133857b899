"""Streaming on a real broker: chunks/s from produce to materialized output, and latency, beside a passthrough.

    python -m benchmarks.streaming

Starts the project's broker on 127.0.0.1:29092 (unless one answers there), then:

1. baseline: a plain aiokafka loop consumes the input messages and produces each one to another topic;
2. streamdedup with one worker, then with two: the same messages produced to the documents topic, timed from the
   first produce until the worker group has processed and committed everything (all stages);
3. latency: input produced at half the one-worker rate for a while; each input's latency is the timestamp of its
   source mapping on the output topic minus the input's timestamp (p50 and p99).

Input: documents of five real Django chunks each (pre-chunked upserts).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from benchmarks.common import django_chunks, save
from streamdedup.codec import encode_event
from streamdedup.core.messages import STAGES
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.drivers.kafka.admin import consumer_lag, ensure_topics
from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES, TopicNames
from streamdedup.settings import Settings

REPO = Path(__file__).resolve().parents[1]
PASSTHROUGH_RUNS = 3
PASSTHROUGH_COPIES = 10
PORT = int(os.environ.get("STREAMDEDUP_BENCH_KAFKA_PORT", "29092"))
BROKER = f"kafka://127.0.0.1:{PORT}"
DOCUMENTS = 6000
CHUNKS_PER_DOCUMENT = 5
PARTITIONS = 4


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _events(prefix: str) -> list[bytes]:
    rng = random.Random(3)
    pool = [c for c in django_chunks() if len(c.split()) >= 8]
    out = []
    for i in range(DOCUMENTS):
        chunks = tuple(rng.choice(pool) for _ in range(CHUNKS_PER_DOCUMENT))
        attrs = SourceAttrs(acl=("*",), modified_at=1_700_000_000_000_000 + i)
        out.append(
            encode_event(UpsertEvent(source_id=f"{prefix}doc-{i:06d}", version=1, attrs=attrs, chunks=chunks))
        )
    return out


async def _produce(settings: Settings, topic: str, values: list[bytes], rate: float | None = None) -> float:
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, max_request_size=MAX_MESSAGE_BYTES, linger_ms=5
    )
    await producer.start()
    start = time.perf_counter()
    try:
        pending = []
        for i, value in enumerate(values):
            if rate is not None:
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            key = json.loads(value)["source_id"].encode()
            pending.append(await producer.send(topic, value, key=key))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return start


async def _passthrough(settings: Settings, values: list[bytes]) -> float:
    source, sink = f"bench-pass-{uuid.uuid4().hex[:8]}-in", f"bench-pass-{uuid.uuid4().hex[:8]}-out"
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    await admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (source, sink)])
    await admin.close()
    await _produce(settings, source, values)
    consumer = AIOKafkaConsumer(
        source, bootstrap_servers=settings.bootstrap_servers, group_id=f"pass-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest", enable_auto_commit=False, max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
    )  # fmt: skip
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, max_request_size=MAX_MESSAGE_BYTES
    )
    await consumer.start()
    await producer.start()
    done = 0
    start = None
    try:
        while done < len(values):
            batches = await consumer.getmany(timeout_ms=1000, max_records=1000)
            if start is None and batches:
                start = time.perf_counter()
            pending = []
            for records in batches.values():
                for record in records:
                    pending.append(await producer.send(sink, record.value, key=record.key))
            await asyncio.gather(*pending)
            await consumer.commit()
            done += len(pending)
        return time.perf_counter() - (start or time.perf_counter())
    finally:
        await consumer.stop()
        await producer.stop()


class _Workers:
    def __init__(self, settings: Settings, count: int, root: Path) -> None:
        self.processes = []
        self.ports = []
        env = {**os.environ, "STREAMDEDUP_BROKER": BROKER, "STREAMDEDUP_TOPIC_PREFIX": settings.topic_prefix,
               "STREAMDEDUP_PARTITIONS": str(PARTITIONS), "PYTHONUNBUFFERED": "1"}  # fmt: skip
        root.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            port = _free_port()
            self.ports.append(port)
            log = (root / f"worker{i}.log").open("ab")
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "streamdedup.cli", "worker", "--data-dir", str(root / f"w{i}"),
                     "--loglevel", "warning"],
                    env={**env, "STREAMDEDUP_WEB_PORT": str(port)}, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                )
            )  # fmt: skip

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        for port in self.ports:
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.3)

    def wait_stable(self, settings: Settings, timeout: float = 120) -> None:
        """Wait until the consumer group is stable with every worker in it, so no rebalance falls in a timed run."""
        from aiokafka.admin import AIOKafkaAdminClient

        async def state() -> tuple[str, int]:
            admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
            await admin.start()
            try:
                (response,) = await admin.describe_consumer_groups([TopicNames(settings.topic_prefix).group])
                group = response.to_object()["groups"][0]
                return group["state"], len(group["members"])
            finally:
                await admin.close()

        deadline = time.monotonic() + timeout
        while asyncio.run(state()) != ("Stable", len(self.processes)):
            if time.monotonic() > deadline:
                raise TimeoutError("the worker group did not settle")
            time.sleep(0.5)
        time.sleep(2)  # table recovery after the last assignment

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def _wait_idle(settings: Settings, timeout: float = 900) -> float:
    names = TopicNames(settings.topic_prefix)
    topics = [names.documents, *(names.stage(s) for s in STAGES)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if asyncio.run(consumer_lag(settings, topics)) == 0:
            return time.perf_counter()
        time.sleep(0.25)
    raise TimeoutError("the workers did not catch up")


def _messages_written(settings: Settings) -> dict[str, int]:
    """Return how many messages the workers wrote: to changelogs, stage topics and output topics."""
    from streamdedup.drivers.kafka.admin import partitions_of

    async def count() -> dict[str, int]:
        prefix = settings.topic_prefix
        consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers)
        await consumer.start()
        try:
            topics = [t for t in await consumer.topics() if t.startswith(prefix)]
            found = await partitions_of(settings, topics)
            kinds = {"changelog": 0, "stage": 0, "output": 0}
            for topic in topics:
                ends = await consumer.end_offsets([TopicPartition(topic, p) for p in found[topic]])
                name = topic[len(prefix) :]
                if name.endswith("-changelog"):
                    kinds["changelog"] += sum(ends.values())
                elif name.startswith("stage-"):
                    kinds["stage"] += sum(ends.values())
                elif name not in ("documents", "engine-params", "dlq"):
                    kinds["output"] += sum(ends.values())
            return kinds
        finally:
            await consumer.stop()

    return asyncio.run(count())


# Where a worker's time goes, from py-spy samples: the share of samples whose stack holds one of these frames.
PROFILE_PARTS = {
    "engine stage handlers": ("Engine.handle ",),
    "table writes (RocksDB put and changelog message)": ("TableState.write_back ",),
    "producer: faust buffer and aiokafka send path": (
        "ProducerBuffer._handle_pending ",
        "Sender._sender_routine ",
    ),
    "consumer: fetching and dispatching input": ("Fetcher.", "Consumer.getmany ", "Conductor."),
    "waiting for the network (select)": ("EpollSelector.select ",),
}


def _py_spy() -> str | None:
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.exists() else shutil.which("py-spy")


def _profile_shares(raw: Path) -> dict[str, float]:
    """Aggregate py-spy's raw (collapsed stack) output into the shares of :data:`PROFILE_PARTS`."""
    total = 0
    hits = dict.fromkeys(PROFILE_PARTS, 0)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        for part, markers in PROFILE_PARTS.items():
            if any(marker in stack for marker in markers):
                hits[part] += int(count)
    return {part: hit / total for part, hit in hits.items()} if total else {}


def _service_run(workers: int, values_for: Any, root: Path, *, profile: bool = False) -> dict[str, Any]:
    prefix = f"bench-{workers}w-{uuid.uuid4().hex[:6]}."
    settings = Settings(broker=BROKER, topic_prefix=prefix, partitions=PARTITIONS)
    asyncio.run(ensure_topics(settings))
    group = _Workers(settings, workers, root / prefix)
    spy = None
    try:
        group.wait_ready()
        group.wait_stable(settings)
        values = values_for(prefix)
        spy_path = _py_spy()
        if profile and spy_path:  # sample the worker (py-spy, 50 Hz; each sample pauses it briefly)
            command = [spy_path, "record", "--pid", str(group.processes[0].pid), "--rate", "50", "--format", "raw",
                       "--output", str(root / "worker.raw")]  # fmt: skip
            spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = asyncio.run(_produce(settings, TopicNames(prefix).documents, values))
        end = _wait_idle(settings)
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        group.stop()
    seconds = end - start
    rate = len(values) * CHUNKS_PER_DOCUMENT / seconds
    written = _messages_written(settings)
    label = " under py-spy" if profile else ""
    print(
        f"streamdedup, {workers} worker(s){label}: {rate:,.0f} chunks/s ({seconds:.1f}s); messages written {written}"
    )
    result = {"workers": workers, "seconds": seconds, "chunks_per_second": rate, "prefix": prefix,
              "messages_written": written}  # fmt: skip
    if spy is not None and (root / "worker.raw").exists():
        result["profile"] = _profile_shares(root / "worker.raw")
        print("  where the worker's time goes:", {k: f"{v:.0%}" for k, v in result["profile"].items()})
    return result


def _latency(rate_docs: float, root: Path, seconds: float = 30.0) -> dict[str, Any]:
    prefix = f"bench-lat-{uuid.uuid4().hex[:6]}."
    settings = Settings(broker=BROKER, topic_prefix=prefix, partitions=PARTITIONS)
    asyncio.run(ensure_topics(settings))
    group = _Workers(settings, 1, root / prefix)
    values = _events(prefix)[: int(rate_docs * seconds)]
    try:
        group.wait_ready()
        group.wait_stable(settings)
        asyncio.run(_produce(settings, TopicNames(prefix).documents, values, rate=rate_docs))
        _wait_idle(settings)
    finally:
        group.stop()

    async def collect() -> list[float]:
        names = TopicNames(prefix)
        produced: dict[bytes, int] = {}
        consumer = AIOKafkaConsumer(
            names.documents, names.output("source-mappings"), bootstrap_servers=settings.bootstrap_servers,
            auto_offset_reset="earliest", enable_auto_commit=False, max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
        )  # fmt: skip
        await consumer.start()
        mapped: dict[bytes, int] = {}
        try:
            idle = 0
            while idle < 3:
                batches = await consumer.getmany(timeout_ms=1000)
                idle = 0 if batches else idle + 1
                for tp, records in batches.items():
                    for r in records:
                        target = produced if tp.topic == names.documents else mapped
                        target.setdefault(r.key, r.timestamp)
        finally:
            await consumer.stop()
        return [(mapped[k] - t) / 1000 for k, t in produced.items() if k in mapped]

    latencies = sorted(asyncio.run(collect()))
    p50 = statistics.median(latencies)
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    print(
        f"latency at {rate_docs * CHUNKS_PER_DOCUMENT:,.0f} chunks/s: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
    )
    return {
        "chunks_per_second": rate_docs * CHUNKS_PER_DOCUMENT,
        "events": len(latencies),
        "p50_s": p50,
        "p99_s": p99,
    }


def main() -> None:
    script = REPO / "deploy" / "kafka" / "broker.sh"
    env = {**os.environ, "KAFKA_PORT": str(PORT)}
    started = False
    if not _answers(PORT):
        subprocess.run([str(script), "start"], env=env, check=True)
        started = True
    root = Path(tempfile.mkdtemp(prefix="streamdedup-stream-"))
    try:
        settings = Settings(broker=BROKER)
        # The same events, repeated so that a run lasts seconds rather than a fraction of one; the baseline is the
        # best of three runs on fresh topics (the first on a new broker pays for leader elections and the group
        # coordinator, and a baseline should be what the plain client can do).
        values = _events("pass-") * PASSTHROUGH_COPIES
        passthrough_seconds = min(
            asyncio.run(_passthrough(settings, values)) for _ in range(PASSTHROUGH_RUNS)
        )
        passthrough = len(values) * CHUNKS_PER_DOCUMENT / passthrough_seconds
        passthrough_messages = len(values) / passthrough_seconds
        print(f"aiokafka passthrough: {passthrough:,.0f} chunks/s ({passthrough_messages:,.0f} msg/s)")
        one = _service_run(1, _events, root)
        two = _service_run(2, _events, root)
        latency = _latency(one["chunks_per_second"] / 2 / CHUNKS_PER_DOCUMENT, root)
        latency_quarter = _latency(one["chunks_per_second"] / 4 / CHUNKS_PER_DOCUMENT, root)
        profiled = _service_run(1, _events, root, profile=True) if _py_spy() else None
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if started:
            subprocess.run([str(script), "stop"], env=env, check=False)
    save(
        "streaming",
        {
            "documents": DOCUMENTS,
            "chunks_per_document": CHUNKS_PER_DOCUMENT,
            "partitions": PARTITIONS,
            "passthrough_chunks_per_second": passthrough,
            "passthrough_messages_per_second": passthrough_messages,
            "passthrough_runs": PASSTHROUGH_RUNS,
            "one_worker": one,
            "two_workers": two,
            "ratio_one_worker_to_passthrough": one["chunks_per_second"] / passthrough,
            "ratio_two_workers_to_one": two["chunks_per_second"] / one["chunks_per_second"],
            "latency_at_half_rate": latency,
            "latency_at_quarter_rate": latency_quarter,
            "profiled_one_worker": profiled,
        },
    )


if __name__ == "__main__":
    main()
