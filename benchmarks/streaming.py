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

from benchmarks.common import django_chunks, save
from streamdedup.codec import encode_event
from streamdedup.core.messages import STAGES
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.kafka.admin import consumer_lag, ensure_topics
from streamdedup.kafka.topics import MAX_MESSAGE_BYTES, TopicNames
from streamdedup.settings import Settings

REPO = Path(__file__).resolve().parents[1]
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


def _service_run(workers: int, values_for: Any, root: Path) -> dict[str, Any]:
    prefix = f"bench-{workers}w-{uuid.uuid4().hex[:6]}."
    settings = Settings(broker=BROKER, topic_prefix=prefix, partitions=PARTITIONS)
    asyncio.run(ensure_topics(settings))
    group = _Workers(settings, workers, root / prefix)
    try:
        group.wait_ready()
        values = values_for(prefix)
        start = asyncio.run(_produce(settings, TopicNames(prefix).documents, values))
        end = _wait_idle(settings)
    finally:
        group.stop()
    seconds = end - start
    rate = len(values) * CHUNKS_PER_DOCUMENT / seconds
    print(f"streamdedup, {workers} worker(s): {rate:,.0f} chunks/s ({seconds:.1f}s)")
    return {"workers": workers, "seconds": seconds, "chunks_per_second": rate, "prefix": prefix}


def _latency(rate_docs: float, root: Path, seconds: float = 30.0) -> dict[str, Any]:
    prefix = f"bench-lat-{uuid.uuid4().hex[:6]}."
    settings = Settings(broker=BROKER, topic_prefix=prefix, partitions=PARTITIONS)
    asyncio.run(ensure_topics(settings))
    group = _Workers(settings, 1, root / prefix)
    values = _events(prefix)[: int(rate_docs * seconds)]
    try:
        group.wait_ready()
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
        values = _events("pass-")
        passthrough_seconds = asyncio.run(_passthrough(settings, values))
        passthrough = len(values) * CHUNKS_PER_DOCUMENT / passthrough_seconds
        print(
            f"aiokafka passthrough: {passthrough:,.0f} chunks/s ({len(values) / passthrough_seconds:,.0f} msg/s)"
        )
        one = _service_run(1, _events, root)
        two = _service_run(2, _events, root)
        latency = _latency(one["chunks_per_second"] / 2 / CHUNKS_PER_DOCUMENT, root)
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
            "one_worker": one,
            "two_workers": two,
            "ratio_one_worker_to_passthrough": one["chunks_per_second"] / passthrough,
            "ratio_two_workers_to_one": two["chunks_per_second"] / one["chunks_per_second"],
            "latency_at_half_rate": latency,
        },
    )


if __name__ == "__main__":
    main()
