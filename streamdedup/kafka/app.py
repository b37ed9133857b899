"""The Faust application: one agent per stage over Kafka topics, state in Faust tables in RocksDB.

:func:`build_app` makes the application from the settings (there is no module-level app). Its agents:

- ``ingest`` reads the documents topic a batch at a time, dead-letters what fails validation (with headers naming
  the original topic, partition, offset and error) and sends the valid events to the ``source`` stage topic, one
  Kafka message per partition;
- ``stage-source``, ``stage-content`` and ``stage-band`` each read their stage topic, one batch message at a time,
  run the core handler on the batch against the table partition of that message, and deliver what it produced.

At-least-once without loss: a handler's outputs are delivered (awaited) before its state is written to the
table (and so to the changelog), and the input message is acknowledged only after both, so Faust commits its
offset only after everything it caused is in Kafka. Every agent runs with ``concurrency=1``: with more, faust can
commit an offset past a message that is still being processed (faust-streaming issue #606).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import faust
import faust.streams as faust_streams
import msgspec

from streamdedup.codec import decode_event
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGES, Message, Output
from streamdedup.core.partitioning import partition_for
from streamdedup.errors import InvalidEventError
from streamdedup.kafka.batches import decode_batch, encode_batches
from streamdedup.kafka.metrics import Metrics
from streamdedup.kafka.state import TableState
from streamdedup.kafka.topics import MAX_MESSAGE_BYTES, TopicNames
from streamdedup.settings import Settings

__all__ = ["Pipeline", "build_app"]

logger = logging.getLogger(__name__)
_json = msgspec.json.Encoder()


class Pipeline:
    """What the agents share: the engine, the topics, the metrics, and how outputs are delivered."""

    def __init__(self, app: faust.App, settings: Settings, metrics: Metrics) -> None:
        self.app = app
        self.settings = settings
        self.engine = Engine(settings.engine_params())
        self.metrics = metrics
        self.names = TopicNames(settings.topic_prefix)
        raw: dict[str, Any] = {"key_serializer": "raw", "value_serializer": "raw"}
        self.documents = app.topic(self.names.documents, **raw)
        self.stage_topics = {
            stage: app.topic(self.names.stage(stage), partitions=settings.partitions, **raw)
            for stage in STAGES
        }
        self.outputs = {
            name: app.topic(self.names.output(name), **raw)
            for name in ("canonical-chunks", "source-mappings", "review", "audit", "dlq")
        }
        self.tables = {stage: _raw_table(app, f"state-{stage}", settings.partitions) for stage in STAGES}

    async def deliver(self, produced: Sequence[Message | Output]) -> None:
        """Send everything a handler produced, batched per stage partition, and wait until Kafka has it."""
        pending: list[Any] = []
        groups: dict[tuple[str, int], list[Message]] = {}
        outputs = [item for item in produced if isinstance(item, Output)]
        for item in produced:
            if not isinstance(item, Output):
                for address in self.engine.destinations(item, self.settings.partitions):
                    groups.setdefault(address, []).append(item)
        for (stage, partition), messages in groups.items():
            for data in encode_batches(messages, max_bytes=self.settings.max_batch_bytes):
                pending.append(await self.stage_topics[stage].send(value=data, partition=partition))
        for output in outputs:
            key = output.key.encode("utf-8") if output.key is not None else None
            value = None if output.value is None else _json.encode(output.value)
            pending.append(await self.outputs[output.topic].send(key=key, value=value))
        if pending:
            await asyncio.gather(*pending)
        self.metrics.observe_outputs(outputs)

    async def dead_letter(self, message: Any, error: str, reason: str) -> Any:
        """Send an input's original bytes to ``dlq`` with headers saying where it came from and why."""
        headers = {
            "origin-topic": message.topic.encode(),
            "origin-partition": str(message.partition).encode(),
            "origin-offset": str(message.offset).encode(),
            "error": error.encode("utf-8", "replace")[:4096],
        }
        self.metrics.dead_letters.labels(reason).inc()
        return await self.outputs["dlq"].send(key=message.key, value=message.value, headers=headers)

    async def ingest(self, events: Sequence[Any]) -> None:
        """Validate a batch of input events and pass the valid ones to the source stage."""
        started = time.monotonic()
        now = time.time()
        pending: list[Any] = []
        routed: dict[int, list[Message]] = {}
        for event in events:
            message = event.message
            self.metrics.event_age_seconds.observe(max(0.0, now - message.timestamp))
            try:
                value = message.value if message.value is not None else b""
                parsed = decode_event(value, max_bytes=self.settings.max_event_bytes)
            except InvalidEventError as exc:
                pending.append(await self.dead_letter(message, str(exc), "invalid"))
                continue
            routed.setdefault(partition_for(parsed.source_id, self.settings.partitions), []).append(parsed)
        for partition, batch in routed.items():
            for data in encode_batches(batch, max_bytes=self.settings.max_batch_bytes):
                pending.append(await self.stage_topics["source"].send(value=data, partition=partition))
        if pending:
            await asyncio.gather(*pending)
        self.metrics.events_in.inc(len(events))
        self.metrics.events_processed.inc(sum(len(b) for b in routed.values()))
        self.metrics.batch_seconds.labels("ingest").observe(time.monotonic() - started)

    async def run_stage(self, stage: str, events: Sequence[Any]) -> None:
        """Handle batch messages of a stage, one handler call per partition: run, deliver, then write state.

        Several Kafka messages of one partition become one handler call and one wait for delivery, which is
        what keeps a worker's throughput from being one broker round trip per message.
        """
        by_partition: dict[int, list[Any]] = {}
        for event in events:
            by_partition.setdefault(event.message.partition, []).append(event)
        for group in by_partition.values():
            started = time.monotonic()
            messages: list[Message] = []
            for event in group:
                try:
                    messages.extend(decode_batch(event.value))
                except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as exc:
                    await asyncio.gather(
                        await self.dead_letter(event.message, f"undecodable batch: {exc}", "batch")
                    )
            if not messages:
                continue
            with _current_event(group[-1]):  # the table writes go to this partition (and its changelog)
                state = TableState(self.tables[stage])
                produced = self.engine.handle(stage, messages, state)
                await self.deliver(produced)
                state.write_back()
            self.metrics.batch_seconds.labels(stage).observe(time.monotonic() - started)

    def update_lag(self) -> None:
        """Refresh the consumer-lag gauges from the consumer's positions and highwaters."""
        consumer = self.app.consumer
        processed = {self.names.documents, *(self.names.stage(stage) for stage in STAGES)}
        for tp in consumer.assignment():
            if tp.topic not in processed:
                continue  # the tables' changelogs are read only while recovering
            try:
                highwater = consumer.highwater(tp)
                # The last offset read; faust keeps no public accessor for it.
                read = consumer._read_offset.get(tp)  # type: ignore[attr-defined]
            except Exception:  # lag is best effort, never a reason to stop
                continue
            if highwater is None:
                continue
            lag = highwater - (read + 1 if read is not None else 0)
            self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, lag))


def build_app(settings: Settings) -> tuple[faust.App, Pipeline]:
    """Build the worker's Faust application from the settings."""
    names = TopicNames(settings.topic_prefix)
    app = faust.App(
        names.group,
        broker=settings.broker,
        store="rocksdb://",
        datadir=str(settings.data_dir),
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        topic_disable_leader=True,
        table_standby_replicas=settings.standby_replicas,
        broker_commit_interval=settings.commit_interval,
        producer_max_request_size=MAX_MESSAGE_BYTES,
        consumer_max_fetch_size=MAX_MESSAGE_BYTES,
        consumer_auto_offset_reset="earliest",
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        key_serializer="raw",
        value_serializer="raw",
        autodiscover=False,
    )
    metrics = Metrics()
    pipeline = Pipeline(app, settings, metrics)

    @app.agent(pipeline.documents, name="ingest", concurrency=1)
    async def ingest(stream: faust.StreamT[Any]) -> None:
        batches = stream.take_events(settings.ingest_batch, within=settings.ingest_wait)  # type: ignore[attr-defined]
        async for events in batches:
            await pipeline.ingest(events)

    for stage in STAGES:
        app.agent(pipeline.stage_topics[stage], name=f"stage-{stage}", concurrency=1)(
            _stage_agent(pipeline, stage)
        )

    @app.timer(interval=5.0)  # type: ignore[untyped-decorator]
    async def refresh_lag() -> None:
        pipeline.update_lag()

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        pipeline.update_lag()
        return web.bytes(metrics.render(), content_type="text/plain; version=0.0.4")

    @app.page("/health")
    async def health_page(web: Any, request: Any) -> Any:
        recovering = bool(getattr(app, "in_recovery", False))
        body = {"status": "recovering" if recovering else "ok", "assigned": len(app.consumer.assignment())}
        return web.json(body, status=503 if recovering else 200)

    return app, pipeline


def _raw_table(app: faust.App, name: str, partitions: int) -> Any:
    """Return a table of bytes keys and values, stored and changelogged as they are.

    Faust derives a table's serializers from its key and value types; ``bytes`` is the one type it passes through
    untouched (the values are the core's MessagePack records, the keys UTF-8).
    """
    return app.Table(name, key_type=bytes, value_type=bytes, partitions=partitions)


@contextmanager
def _current_event(event: Any) -> Iterator[None]:
    """Make ``event`` the one faust's tables take the partition from (faust keeps it in a context variable)."""
    token = faust_streams._current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        faust_streams._current_event.reset(token)


def _stage_agent(pipeline: Pipeline, stage: str) -> Any:
    settings = pipeline.settings

    async def agent(stream: faust.StreamT[Any]) -> None:
        batches = stream.take_events(settings.stage_batch, within=settings.stage_wait)  # type: ignore[attr-defined]
        async for events in batches:
            await pipeline.run_stage(stage, events)

    agent.__name__ = f"stage_{stage}"
    return agent
