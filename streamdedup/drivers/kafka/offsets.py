"""The consumer offsets a stage worker commits: where the group starts reading after a restart.

:class:`CommittedOffsets` is the part of :class:`~streamdedup.drivers.kafka.worker.StageWorker` that commits the
next offset to read of each partition it handled, recommits one whose committed offset stays behind, and reports
the consumer's lag. Correctness does not depend on these offsets (the partition stores keep what was applied).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from streamdedup.drivers.kafka.metrics import Metrics

__all__ = ["CommittedOffsets"]

logger = logging.getLogger(__name__)


class CommittedOffsets:
    """Commit, check and measure a stage worker's consumer offsets (a part of the worker: it uses its consumer)."""

    metrics: Metrics
    _consumer: AIOKafkaConsumer | None
    _lock: asyncio.Lock
    _done: dict[TopicPartition, int]
    _committed: dict[TopicPartition, int]
    _behind: dict[TopicPartition, int]
    _last_commit: float
    _settled: bool  # every partition committed since the last fetch that read anything

    async def _commit(self, *, force: bool = False) -> None:
        """Commit the next offset to read of every partition that moved since the last commit."""
        self._last_commit = time.monotonic()
        consumer = self._consumer
        if consumer is None:
            return
        assignment = consumer.assignment()
        offsets = {
            tp: offset
            for tp, offset in self._done.items()
            if tp in assignment and (force or offset > self._committed.get(tp, -1))
        }
        if offsets:
            await consumer.commit(offsets)
            self._committed.update(offsets)

    async def commit_when_due(self, interval: float, *, read: bool) -> None:
        """Commit after a fetch (``read``: it brought records): the partitions that moved, every ``interval``
        seconds; and every partition at once when a fetch comes back empty after work, so that the group's lag reads
        0 as soon as the work is done rather than at the next interval, and a commit the broker lost while its
        coordinator moved is made again. Under a trickle of input, at most four commits an interval."""
        if read:
            self._settled = False
        since = time.monotonic() - self._last_commit
        settle = not read and not self._settled and since >= interval / 4
        if settle or since >= interval:
            await self._commit(force=settle)
            self._settled = self._settled or settle

    async def check_commits(self) -> int:
        """Recommit partitions whose committed offset was behind the applied one at two checks in a row.

        Return how many were recommitted.
        """
        consumer = self._consumer
        if consumer is None:
            return 0
        repaired = 0
        for tp, done in list(self._done.items()):
            if tp not in consumer.assignment():
                continue
            committed = await consumer.committed(tp)
            if committed is not None and committed >= done:
                self._behind.pop(tp, None)
                continue
            self._behind[tp] = self._behind.get(tp, 0) + 1
            if self._behind[tp] >= 2:
                logger.warning(
                    "%s-%d: committed %s stays behind %d; committing again",
                    tp.topic,
                    tp.partition,
                    committed,
                    done,
                )
                async with self._lock:
                    await consumer.commit({tp: self._done[tp]})
                self.metrics.commit_repairs.inc()
                self._behind.pop(tp, None)
                repaired += 1
        return repaired

    def update_lag(self) -> None:
        """Refresh the consumer-lag gauges: each partition's end minus the next offset to read."""
        consumer = self._consumer
        if consumer is None:
            return
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            if highwater is None or tp not in self._done:
                continue
            lag = highwater - self._done.get(tp, 0)
            self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, lag))
