"""What the deletion-propagation benchmark watches: records on topics, rows of the LanceDB index."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.cdc_stack import FEED_TOPIC


class TopicWatch:
    """Reads the connector's topic and the two compacted outputs from their ends, in a thread; keeps every record
    with its timestamp and the time it arrived here."""

    def __init__(self, settings: Any) -> None:
        from streamdedup.drivers.kafka.topics import TopicNames

        names = TopicNames(settings.topic_prefix)
        self.settings = settings
        self.topics = {FEED_TOPIC: "feed", names.output("source-mappings"): "mapping",
                       names.output("canonical-chunks"): "chunk"}  # fmt: skip
        self.records: list[
            tuple[str, Any, Any, float, float]
        ] = []  # kind, key, value, timestamp s, received s
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="topic-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(120):
            raise TimeoutError("the topic reader did not start")
        if self.error is not None:
            raise self.error

    def _main(self) -> None:
        try:
            asyncio.run(self._read())
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    async def _read(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        from streamdedup.drivers.kafka.admin import partitions_of

        found = await partitions_of(self.settings, list(self.topics))
        partitions = [TopicPartition(t, p) for t, ps in found.items() for p in ps]
        consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.bootstrap_servers, enable_auto_commit=False,
                                    fetch_max_wait_ms=100)  # fmt: skip
        await consumer.start()
        try:
            consumer.assign(partitions)
            await consumer.seek_to_end(*partitions)
            for tp in partitions:
                await consumer.position(tp)
            self.ready.set()
            while not self.stop.is_set():
                batches = await consumer.getmany(timeout_ms=20)
                received = time.time()
                found_records = []
                for tp, records in batches.items():
                    kind = self.topics[tp.topic]
                    for r in records:
                        key = r.key.decode() if r.key is not None else None
                        value = json.loads(r.value) if r.value is not None else None
                        if kind == "feed" and key is not None:
                            key = json.loads(key).get("id")
                        found_records.append((kind, key, value, r.timestamp / 1000, received))
                if found_records:
                    with self.lock:
                        self.records.extend(found_records)
        finally:
            await consumer.stop()

    def snapshot(self) -> list[tuple[str, Any, Any, float, float]]:
        with self.lock:
            return list(self.records)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


class IndexWatch:
    """Reads the LanceDB table every ``interval`` seconds in a thread, for the chunk ids still pending: when each
    row is first seen gone, or first seen with a wanted ACL."""

    def __init__(self, directory: Path, interval: float) -> None:
        self.directory = directory
        self.interval = interval
        self.lock = threading.Lock()
        self.gone: dict[str, float] = {}  # chunk_id -> when first seen gone
        self.acl: dict[str, float] = {}  # chunk_id -> when first seen with the wanted ACL
        self._want_gone: set[str] = set()
        self._want_acl: dict[str, list[str]] = {}
        self.stop = threading.Event()
        self.reads = 0
        self.read_seconds = 0.0
        self.cpu_seconds = 0.0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="index-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def expect_gone(self, chunk_id: str) -> None:
        with self.lock:
            self._want_gone.add(chunk_id)

    def expect_acl(self, chunk_id: str, acl: list[str]) -> None:
        with self.lock:
            self._want_acl[chunk_id] = sorted(acl)

    def pending(self) -> int:
        with self.lock:
            return len(self._want_gone) + len(self._want_acl)

    def _main(self) -> None:
        import lancedb

        try:
            table = lancedb.connect(self.directory, read_consistency_interval=timedelta(0)).open_table(
                "chunks"
            )
            cpu_started = time.thread_time()
            next_at = time.monotonic()
            while not self.stop.is_set():
                next_at += self.interval
                with self.lock:
                    ids = sorted(self._want_gone | set(self._want_acl))
                if ids:
                    started = time.time()
                    table.checkout_latest()
                    quoted = ", ".join("'" + i.replace("'", "''") + "'" for i in ids)
                    found = table.search().where(f"chunk_id IN ({quoted})").select(["chunk_id", "acl"])
                    rows = {r["chunk_id"]: sorted(r["acl"]) for r in found.limit(None).to_arrow().to_pylist()}
                    self.reads += 1
                    self.read_seconds += time.time() - started
                    with self.lock:
                        asked = set(ids)  # an id added during the read is judged by the next one
                        for chunk_id in list(self._want_gone & asked):
                            if chunk_id not in rows:
                                self.gone[chunk_id] = started
                                self._want_gone.discard(chunk_id)
                        for chunk_id, acl in list(self._want_acl.items()):
                            if chunk_id in asked and rows.get(chunk_id) == acl:
                                self.acl[chunk_id] = started
                                del self._want_acl[chunk_id]
                self.cpu_seconds = time.thread_time() - cpu_started
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    next_at = time.monotonic()
        except BaseException as exc:
            self.error = exc

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


# -- Statistics ---------------------------------------------------------------------------------------------------


def stats(values: list[float]) -> dict[str, float] | None:
    import numpy as np

    if not values:
        return None
    data = np.asarray(values, dtype=float)
    return {
        "n": int(data.size),
        "p50": float(np.percentile(data, 50)),
        "p90": float(np.percentile(data, 90)),
        "p99": float(np.percentile(data, 99)),
        "max": float(data.max()),
        "mean": float(data.mean()),
    }


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- The benchmark ------------------------------------------------------------------------------------------------
