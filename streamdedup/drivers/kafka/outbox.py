"""What a stage worker sends to Kafka: a call's outputs and stage messages, its changelog records, dead letters.

:class:`Outbox` is the part of :class:`~streamdedup.drivers.kafka.worker.StageWorker` that queues records on its
producer, batched per topic partition (:class:`~streamdedup.drivers.kafka.delivery.Sends`), and sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamdedup.contract.codec import encode_output_value
from streamdedup.core.messages import Message, Output
from streamdedup.drivers.kafka.batches import encode_batches
from streamdedup.drivers.kafka.changelog import headers as call_headers
from streamdedup.drivers.kafka.delivery import FaultPoints, Sends, TopicPartitions

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer, TopicPartition

    from streamdedup.core.engine import Engine
    from streamdedup.drivers.kafka.metrics import Metrics
    from streamdedup.drivers.kafka.partitions import PartitionStore
    from streamdedup.drivers.kafka.topics import TopicNames
    from streamdedup.settings import Settings

__all__ = ["Outbox"]


class Outbox:
    """Queue and send a stage worker's records (a part of the worker: it uses the worker's producer and names)."""

    settings: Settings
    metrics: Metrics
    engine: Engine
    names: TopicNames
    faults: FaultPoints
    _producer: AIOKafkaProducer | None
    _partitions: TopicPartitions | None
    _output_topics: dict[str, str]
    _instance: str
    _calls: int

    def _add_produced(self, sends: Sends, produced: Sequence[Message | Output]) -> list[Output]:
        """Queue a handler's outputs and stage messages (batched per stage partition); return the outputs."""
        outputs: list[Output] = []
        groups: dict[tuple[str, int], list[Message]] = {}
        partitions = self.settings.partitions
        for item in produced:
            if isinstance(item, Output):
                outputs.append(item)
            else:
                for stage, partition, part in self.engine.destinations(item, partitions):
                    groups.setdefault((stage, partition), []).append(part)
        for (stage, partition), messages in groups.items():
            for data in encode_batches(messages, max_bytes=self.settings.max_batch_bytes):
                sends.add(self.names.stage(stage), partition, None, data)
        assert self._partitions is not None
        topics = self._output_topics
        for output in outputs:
            topic = topics[output.topic]
            key = output.key.encode("utf-8") if output.key is not None else None
            sends.add(topic, self._partitions.for_key(topic, key), key, encode_output_value(output))
        return outputs

    async def _write_changelog(
        self, store: PartitionStore, changes: dict[str, bytes | None], applied: int
    ) -> int:
        """Send a call's key writes to the changelog partition; return the offset of its last record."""
        self._calls += 1
        hdrs = call_headers(f"{self._instance}-{self._calls}", len(changes), applied)
        sends = self._sends("changelog")
        topic = self.names.changelog(store.stage)
        keys = sorted(changes)
        for key in keys[:-1]:
            sends.add(topic, store.partition, key.encode("utf-8"), changes[key])
        sends.add(
            topic, store.partition, keys[-1].encode("utf-8"), changes[keys[-1]], hdrs
        )  # closes the call
        self.metrics.changelog_records.inc(len(changes))
        last = await sends.send()
        return last[(topic, store.partition)]

    def _dead_letter(
        self,
        sends: Sends,
        tp: TopicPartition,
        record: Any,
        error: str,
        reason: str,
        value: bytes | None,
        key: bytes | None,
    ) -> None:
        """Queue a record for ``dlq`` with headers saying where it came from and why."""
        hdrs = [
            ("origin-topic", tp.topic.encode()),
            ("origin-partition", str(tp.partition).encode()),
            ("origin-offset", str(record.offset).encode()),
            ("error", error.encode("utf-8", "replace")[:4096]),
        ]
        self.metrics.dead_letters.labels(reason).inc()
        topic = self.names.output("dlq")
        assert self._partitions is not None
        sends.add(topic, self._partitions.for_key(topic, key), key, value, hdrs)

    def _sends(self, kind: str = "output") -> Sends:
        assert self._producer is not None
        return Sends(self._producer, self.metrics, self.faults, kind)
