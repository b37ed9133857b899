"""How a stage worker ingests an input topic partition: the documents topic, or a feed's connector topic.

:class:`Ingest` is the part of :class:`~streamdedup.drivers.kafka.worker.StageWorker` that validates each record
(a feed's change event mapped, :mod:`streamdedup.contract.cdc`), converts the upserts that carry a document's
bytes to text (:mod:`streamdedup.convert`, in the converter's processes, while the event loop keeps running),
and sends the events to the source stage partition of their source_id, one batch message per partition; what
fails goes to ``dlq`` with the record's coordinates and the reason. The source stage's topic so holds the text:
a call replayed after a crash reads exactly the same text again, whatever a new conversion would give.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamdedup.contract.cdc import FeedDecoder
from streamdedup.contract.codec import EventLimits, decode_event
from streamdedup.convert import ConversionError
from streamdedup.convert.events import carries_data, converted_all
from streamdedup.convert.pool import Converter
from streamdedup.core.messages import Message
from streamdedup.core.model import InputEvent
from streamdedup.core.partitioning import partition_for
from streamdedup.drivers.kafka.batches import encode_batches
from streamdedup.drivers.kafka.outbox import Outbox
from streamdedup.errors import InvalidEventError

if TYPE_CHECKING:
    from aiokafka import TopicPartition

__all__ = ["Ingest"]


class Ingest(Outbox):
    """Validate, convert and route input records (a part of the worker, beside its :class:`Outbox`)."""

    limits: EventLimits
    converter: Converter

    async def ingest(self, tp: TopicPartition, records: Sequence[Any], feed: FeedDecoder | None) -> None:
        """Validate input events (a feed's change events: map them) and pass the valid ones to the source stage,
        one batch per partition; a feed's tombstones map to nothing (:mod:`streamdedup.contract.cdc`)."""
        started = time.monotonic()
        now = time.time()
        sends = self._sends()
        events: list[tuple[Any, InputEvent]] = []
        for record in records:
            self.metrics.event_age_seconds.observe(max(0.0, now - record.timestamp / 1000))
            try:
                parsed = (
                    decode_event(record.value if record.value is not None else b"", self.limits)
                    if feed is None
                    else feed.decode(record.value, record.key)
                )
            except InvalidEventError as exc:
                self._dead_letter(sends, tp, record, str(exc), "invalid", record.value, record.key)
                continue
            if parsed is not None:
                events.append((record, parsed))
        routed: dict[int, list[Message]] = {}
        for record, event in await self._converted(events):
            if isinstance(event, ConversionError):
                self._dead_letter(sends, tp, record, str(event), "conversion", record.value, record.key)
                continue
            routed.setdefault(partition_for(event.source_id, self.settings.partitions), []).append(event)
        topic = self.names.stage("source")
        for partition, batch in routed.items():
            for data in encode_batches(batch, max_bytes=self.settings.max_batch_bytes):
                sends.add(topic, partition, None, data)
        await sends.send()
        self.metrics.events_in.inc(len(records))
        self.metrics.batch_seconds.labels("ingest").observe(time.monotonic() - started)

    async def _converted(
        self, events: list[tuple[Any, InputEvent]]
    ) -> list[tuple[Any, InputEvent | ConversionError]]:
        """The events, each upsert of a document's bytes converted to text (or the error why it cannot be)."""
        if not any(carries_data(event) for _, event in events):
            return list(events)
        started = time.monotonic()
        converted = await converted_all(self.converter, events, self.limits.bytes)
        self.metrics.batch_seconds.labels("convert").observe(time.monotonic() - started)
        return converted
