"""Sending what a handler call produced: one record batch per topic partition, awaited together.

A :class:`Sends` collects records by topic partition and sends each partition's records as record batches built
with the producer's public batch API, so a call costs one send per destination partition, however many records
it holds. Keyed records go to the partition Kafka's default partitioner would choose (murmur2 of the key), so
that any other producer of the same key agrees.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError

from streamdedup.core.partitioning import positive_murmur2
from streamdedup.drivers.kafka.metrics import Metrics

__all__ = ["FaultPoints", "Queued", "Sends", "TopicPartitions", "acknowledged"]

logger = logging.getLogger(__name__)


_NO_HEADERS: list[tuple[str, bytes]] = []  # the producer's record builder takes a list, and only reads it


class FaultPoints:
    """Where a test asked the worker to kill itself (``STREAMDEDUP_FAULT_KILL_AT``: ``point:n[,point:n]``).

    The worker sends itself SIGKILL the n-th time it passes the point: ``outputs-sent`` (after a stage call that
    produced output records delivered everything it produced, before its changelog records are sent),
    ``changelog-sent`` (after a call's changelog records were acknowledged, before its write batch),
    ``state-committed`` (after the write batch, before the input offset is committed) and ``outputs-partial``
    (after the first of a call's output batches was delivered, before the others were sent). ``streamdedup index``
    passes ``index-sink-written`` (after a batch's rows were written and its flags delivered, before its position
    is committed). Tests only; unset, nothing happens.
    """

    POINTS = ("outputs-sent", "changelog-sent", "state-committed", "outputs-partial", "index-sink-written")

    def __init__(self, spec: str | None) -> None:
        self._left: dict[str, int] = {}
        for part in (spec or "").split(","):
            if not part.strip():
                continue
            point, _, count = part.strip().partition(":")
            if point not in self.POINTS:
                raise ValueError(f"unknown fault point {point!r}; one of {', '.join(self.POINTS)}")
            self._left[point] = int(count or "1")

    def armed(self, point: str) -> bool:
        """Whether a test asked for a kill at ``point``."""
        return point in self._left

    def passed(self, point: str) -> None:
        """Kill the process if this is the n-th pass of ``point``."""
        if point in self._left:
            self._left[point] -= 1
            if self._left[point] <= 0:
                os.kill(os.getpid(), signal.SIGKILL)


class TopicPartitions:
    """The partition numbers of the topics a worker writes to, looked up once."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer
        self._known: dict[str, list[int]] = {}

    async def load(self, topics: Sequence[str]) -> None:
        """Look up the partitions of ``topics``."""
        for topic in topics:
            self._known[topic] = sorted(await self._producer.partitions_for(topic))

    def for_key(self, topic: str, key: bytes | None) -> int:
        """Return the partition of ``key`` in ``topic`` as Kafka's default partitioner does (random for no key)."""
        parts = self._known[topic]
        if key is None:
            return random.choice(parts)
        return parts[positive_murmur2(key) % len(parts)]


@dataclass
class _Batches:
    builders: list[Any] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    current: Any = None


#: Request timeouts in a row (``STREAMDEDUP_DELIVERY_TIMEOUT`` each, 120 s by default) that queueing one batch
#: may take before the worker gives up.
SEND_ATTEMPTS = 3


class Sends:
    """The records of one handler call, by topic partition, sent as record batches."""

    def __init__(
        self, producer: AIOKafkaProducer, metrics: Metrics, faults: FaultPoints, kind: str = "output"
    ) -> None:
        self._producer = producer
        self._metrics = metrics
        self._faults = faults
        self._kind = kind
        self._by_tp: dict[tuple[str, int], _Batches] = {}

    def add(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Queue one record for ``topic``/``partition`` (one ``headers`` list may serve many records)."""
        headers = _NO_HEADERS if headers is None else headers
        batches = self._by_tp.get((topic, partition))
        if batches is None:
            batches = self._by_tp[(topic, partition)] = _Batches()
        if batches.current is None or (
            batches.current.append(timestamp=None, key=key, value=value, headers=headers) is None
        ):
            batches.current = self._producer.create_batch()
            batches.current.append(timestamp=None, key=key, value=value, headers=headers)
            batches.builders.append(batches.current)
            batches.counts.append(0)
        batches.counts[-1] += 1

    def __bool__(self) -> bool:
        return bool(self._by_tp)

    async def _queue(self, builder: Any, topic: str, partition: int) -> asyncio.Future[Any]:
        """Hand one batch to the producer, waiting out a broker that is restarting or slow.

        The producer holds one batch per partition in flight and gives up queueing the next after its request
        timeout; the batch was then not queued, so queueing it again is safe. After ``SEND_ATTEMPTS`` such
        timeouts in a row the error stands (the worker stops, and what it did not apply is read again).
        """
        for attempt in range(1, SEND_ATTEMPTS + 1):
            try:
                queued: asyncio.Future[Any] = await self._producer.send_batch(
                    builder, topic, partition=partition
                )
                return queued
            except KafkaTimeoutError:
                if attempt == SEND_ATTEMPTS:
                    raise
                logger.warning(
                    "Kafka has not taken a batch for %s[%d] within the request timeout (attempt %d of %d); waiting",
                    topic, partition, attempt, SEND_ATTEMPTS,
                )  # fmt: skip
        raise AssertionError("unreachable")  # pragma: no cover

    async def queue(self) -> list[Queued]:
        """Hand every batch to the producer without waiting for Kafka; return what each batch will be acknowledged
        by (:func:`acknowledged` waits for them)."""
        pending: list[Queued] = []
        # Only a test that arms the fault point makes the first batch wait for Kafka before the others are sent.
        cut = self._faults.armed("outputs-partial") and self._kind == "output"
        cut = cut and sum(len(b.builders) for b in self._by_tp.values()) > 1
        for (topic, partition), batches in self._by_tp.items():
            for builder, count in zip(batches.builders, batches.counts, strict=True):
                future = await self._queue(builder, topic, partition)
                self._metrics.sends.labels(self._kind).inc()
                pending.append(((topic, partition), count, future))
                if cut:
                    await future  # the first batch is in Kafka, the others not yet sent
                    self._faults.passed("outputs-partial")
                    cut = False
        self._by_tp = {}
        return pending

    async def send(self) -> dict[tuple[str, int], int]:
        """Send every batch and wait until Kafka has all of them; return the last offset per topic partition."""
        return await acknowledged(await self.queue())


#: A batch handed to the producer: its topic partition, its records, and the future of Kafka's acknowledgement.
Queued = tuple[tuple[str, int], int, "asyncio.Future[Any]"]


async def acknowledged(pending: Sequence[Queued]) -> dict[tuple[str, int], int]:
    """Wait until Kafka has every batch of ``pending``; return the last offset per topic partition."""
    last: dict[tuple[str, int], int] = {}
    if pending:
        results = await asyncio.gather(*(future for _, _, future in pending))
        for (tp, count, _), metadata in zip(pending, results, strict=True):
            last[tp] = max(last.get(tp, -1), int(metadata.offset) + count - 1)
    return last
