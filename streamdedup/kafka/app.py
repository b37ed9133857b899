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

Agents take their batches with ``noack_take`` and acknowledge each message themselves once it was applied or
dead-lettered: faust's ``take`` acknowledges its buffer in a ``finally``, so an exception would acknowledge
messages that were never applied. A handler that raises does not take its batch with it: the batch is applied
again one message at a time and the message that fails goes to ``dlq`` with the error and where it came from.
Any other error (Kafka gone, a delivery timed out, a table failing) is no fault of the input: the worker stops
without acknowledging, so the batch is read again after a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import faust
import faust.streams as faust_streams
import msgspec
from aiokafka.errors import MessageSizeTooLargeError, RecordTooLargeError

from streamdedup.codec import decode_event, encode_for_dead_letter
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGES, Message, Output
from streamdedup.core.model import InputEvent
from streamdedup.core.partitioning import partition_for
from streamdedup.errors import InvalidEventError, StateError
from streamdedup.kafka.batches import decode_batch, encode_batches
from streamdedup.kafka.metrics import Metrics
from streamdedup.kafka.state import TableState
from streamdedup.kafka.topics import MAX_MESSAGE_BYTES, TopicNames
from streamdedup.settings import Settings

__all__ = ["Pipeline", "build_app"]

logger = logging.getLogger(__name__)
_json = msgspec.json.Encoder()


class _InputFailure(Exception):
    """A handler call failed because of what it was given (dead-letter it), not because Kafka failed."""

    def __init__(self, error: Exception) -> None:
        super().__init__(repr(error))
        self.error = error


class Pipeline:
    """What the agents share: the engine, the topics, the metrics, and how outputs are delivered."""

    def __init__(self, app: faust.App, settings: Settings, metrics: Metrics) -> None:
        self.app = app
        self.settings = settings
        self.engine = Engine(settings.engine_params(), fault_source_id=settings.fault_source_id)
        self.limits = settings.event_limits()
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
        self.tables = {
            stage: _raw_table(app, self.names.table(stage), settings.partitions) for stage in STAGES
        }

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

    async def dead_letter(
        self, message: Any, error: str, reason: str, *, value: bytes | None = None, key: bytes | None = None
    ) -> Any:
        """Send an input to ``dlq`` with headers saying where it came from and why.

        ``value`` and ``key`` default to the Kafka message's own bytes; a stage message that failed is sent as
        its own JSON instead (an input event as contract JSON, so it can be sent to the documents topic again).
        """
        headers = {
            "origin-topic": message.topic.encode(),
            "origin-partition": str(message.partition).encode(),
            "origin-offset": str(message.offset).encode(),
            "error": error.encode("utf-8", "replace")[:4096],
        }
        self.metrics.dead_letters.labels(reason).inc()
        if value is None:
            value, key = message.value, message.key
        return await self.outputs["dlq"].send(key=key, value=value, headers=headers)

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
                parsed = decode_event(value, self.limits)
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
        self.metrics.batch_seconds.labels("ingest").observe(time.monotonic() - started)

    async def run_stage(self, stage: str, events: Sequence[Any]) -> None:
        """Handle batch messages of a stage, one handler call per partition: run, deliver, then write state.

        Several Kafka messages of one partition become one handler call and one wait for delivery, which is
        what keeps a worker's throughput from being one broker round trip per message. If the call fails for a
        reason of the input, its messages are applied one at a time and the one that fails is dead-lettered.
        """
        by_partition: dict[int, list[Any]] = {}
        for event in events:
            by_partition.setdefault(event.message.partition, []).append(event)
        for group in by_partition.values():
            started = time.monotonic()
            carried: list[tuple[Any, Message]] = []
            for event in group:
                try:
                    carried.extend((event, m) for m in decode_batch(event.value))
                except Exception as exc:  # a batch this worker cannot read: keep its bytes, go on
                    await asyncio.gather(
                        await self.dead_letter(event.message, f"undecodable batch: {exc!r}", "batch")
                    )
            if not carried:
                continue
            try:
                await self._apply(stage, [m for _, m in carried], group[-1])
            except _InputFailure as failure:
                logger.warning(
                    "stage %s: a batch of %d failed (%r); one at a time", stage, len(carried), failure.error
                )
                await self._apply_one_at_a_time(stage, carried)
            self.metrics.batch_seconds.labels(stage).observe(time.monotonic() - started)

    async def _apply(self, stage: str, messages: list[Message], event: Any) -> None:
        """Run the handler on messages of ``event``'s partition, deliver what it caused, then write its state.

        Raise :class:`_InputFailure` for what the input causes: the handler raising, or a record too large for
        Kafka. Anything else (Kafka or the table failing, a :class:`StateError`) propagates as it is.
        """
        with _current_event(event):  # the table writes go to this partition (and its changelog)
            state = TableState(self.tables[stage])
            try:
                produced = self.engine.handle(stage, messages, state)
            except StateError:
                raise  # the table failed, not the input
            except Exception as exc:
                raise _InputFailure(exc) from exc
            try:
                await self.deliver(produced)
            except (MessageSizeTooLargeError, RecordTooLargeError) as exc:
                raise _InputFailure(exc) from exc
            state.write_back()
        if stage == "source":
            self.metrics.events_processed.inc(sum(1 for m in messages if isinstance(m, InputEvent)))

    async def _apply_one_at_a_time(self, stage: str, carried: list[tuple[Any, Message]]) -> None:
        """Apply each message on its own; dead-letter the ones that fail, with the error and their origin."""
        self.metrics.isolated.labels(stage).inc(len(carried))
        for event, message in carried:
            try:
                await self._apply(stage, [message], event)
            except _InputFailure as failure:
                exc = failure.error
                error = f"processing failed in stage {stage} ({type(exc).__name__}: {exc})"
                logger.warning("dead-lettering a %s message: %s", stage, error)
                if isinstance(message, InputEvent):
                    value, key, reason = (
                        encode_for_dead_letter(message),
                        message.source_id.encode("utf-8"),
                        "failed",
                    )
                else:
                    value, key, reason = (
                        next(encode_batches([message], max_bytes=MAX_MESSAGE_BYTES)),
                        None,
                        "stage",
                    )
                await asyncio.gather(
                    await self.dead_letter(event.message, error, reason, value=value, key=key)
                )

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
        await _consume(app, stream, settings.ingest_batch, settings.ingest_wait, pipeline.ingest)

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


async def _consume(
    app: faust.App,
    stream: Any,
    size: int,
    within: float,
    handle: Callable[[Sequence[Any]], Awaitable[None]],
) -> None:
    """Take batches of events and acknowledge each batch only after ``handle`` has applied or dead-lettered it.

    ``handle`` dead-letters what is the input's fault and raises only for Kafka's own failures; then nothing of
    the batch is acknowledged and the worker stops, so that a restart reads the batch again.
    """
    async for events in stream.noack_take(size, within=within):
        try:
            await handle(events)
        except Exception as exc:
            logger.critical("stopping the worker: %r; the batch will be read again after a restart", exc)
            await app.crash(exc)
            return
        for event in events:
            await stream.ack(event)


def _stage_agent(pipeline: Pipeline, stage: str) -> Any:
    settings = pipeline.settings

    async def handle(events: Sequence[Any]) -> None:
        await pipeline.run_stage(stage, events)

    async def agent(stream: faust.StreamT[Any]) -> None:
        await _consume(pipeline.app, stream, settings.stage_batch, settings.stage_wait, handle)

    agent.__name__ = f"stage_{stage}"
    return agent
