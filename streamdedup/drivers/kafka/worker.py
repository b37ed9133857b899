"""The stage worker: consumes the input topics (documents, and the feeds' connector topics) and the stage topics,
applies handler calls to partition stores.

One consumer in the worker group reads the documents topic and every stage topic. A round takes what the
consumer has fetched and handles each topic partition's records as one call, the calls of a round concurrently
(each partition has its own store):

- an input partition is *ingested*: each record is validated (a feed's change event mapped,
  :mod:`streamdedup.contract.cdc`), the valid events are sent to the source stage
  partition of their source_id (one batch message per partition), the invalid ones to ``dlq``;
- a stage partition's call drops the records at or below the store's applied offset (read again after a crash),
  runs the handler on the rest in one store transaction, then, in this order:

  1. if it produced anything to deliver, sends the record that *opens* the call to the stage's changelog
     partition (the input offsets the call applies) and waits; then sends the outputs and stage messages,
     batched per topic partition, and waits for Kafka;
  2. sends the keys it wrote to the stage's changelog partition as one call (:mod:`.changelog`) and waits;
  3. commits one RocksDB write batch holding the changes, the applied input offset and the changelog offset.

  A crash before 2 leaves the input unapplied. If the call had delivered, recovery finds its opening record, and
  the next call applies exactly the same input again, held until all of it is read, before anything newer, so it
  delivers the same again (repeating delivered messages is harmless, design §5 I4); applied together with newer
  input, it could leave what it delivered standing where the newer input undoes it. A crash between 2 and 3 is
  repaired by recovery, which replays the call from the changelog. After 3, the input is never applied twice,
  whatever the group's committed offset says.

The consumer's committed offsets only say where to start reading after a restart; correctness does not depend on
them. They are committed every ``commit_interval`` seconds, all of them as soon as a fetch comes back empty after
work (so the group's lag reads 0 when the work is done), and a watchdog recommits a partition whose committed
offset stays behind what was applied.

A handler that raises does not take its call with it: the call's messages are applied again one at a time, each in
a transaction nested in the call's, and the one that fails goes to ``dlq`` with the error and where it came from.
Any other failure (Kafka, the store) stops the worker without committing, so a restart reads the call again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mode
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError, RecordTooLargeError

from streamdedup.contract.cdc import FeedDecoder, load_feeds
from streamdedup.contract.codec import encode_for_dead_letter, event_key
from streamdedup.convert.pool import Converter
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGES, Message
from streamdedup.core.model import InputEvent
from streamdedup.core.output_view import OUTPUT_TOPICS
from streamdedup.drivers.collector import collector_paused
from streamdedup.drivers.kafka.batches import decode_batch, encode_batches
from streamdedup.drivers.kafka.delivery import FaultPoints, Sends, TopicPartitions
from streamdedup.drivers.kafka.ingest import Ingest
from streamdedup.drivers.kafka.metrics import Metrics
from streamdedup.drivers.kafka.offsets import CommittedOffsets
from streamdedup.drivers.kafka.partitions import PartitionStore, PartitionStores, recover
from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES
from streamdedup.errors import StateError
from streamdedup.settings import Settings
from streamdedup.store.base import Transaction

__all__ = ["StageWorker"]

logger = logging.getLogger(__name__)
_BATCH_BYTES = 1024 * 1024  # record batch size of the worker's producer
_FETCH_MAX_WAIT_MS = 100  # how long the broker holds the worker's fetch while no partition in it has data


class _InputFailure(Exception):
    """A handler call failed because of what it was given (dead-letter it), not because Kafka failed."""

    def __init__(self, error: Exception) -> None:
        super().__init__(repr(error))
        self.error = error


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: StageWorker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.worker.revoke(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.worker.assign(assigned)


class StageWorker(Ingest, CommittedOffsets, mode.Service):
    """Consume, apply and deliver, with state in one partition store per assigned stage partition."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        *,
        on_crash: Callable[[BaseException], Awaitable[None]] | None = None,
        stores: PartitionStores | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._on_crash = on_crash
        self.settings = settings
        self.metrics = metrics
        self.engine = Engine(settings.engine_params(), fault_source_id=settings.fault_source_id)
        self.limits = settings.event_limits()
        self.names = settings.topic_names()
        feeds = load_feeds(settings.feeds, self.limits) if settings.feeds is not None else None
        #: The input topics, each with its change-event decoder (None: the contract's documents topic).
        self.inputs: dict[str, FeedDecoder | None] = {
            self.names.documents: None,
            **({topic: feeds.for_topic(topic) for topic in feeds.topics} if feeds else {}),
        }
        self.converter = Converter(settings.convert_limits())
        self.faults = FaultPoints(settings.fault_kill_at)
        self._stage_of = {self.names.stage(stage): stage for stage in STAGES}
        self._output_topics = {topic: self.names.output(topic) for topic in OUTPUT_TOPICS}
        self.stores = (
            stores
            if stores is not None
            else PartitionStores.of_worker(
                settings.worker_data_dir(), settings.engine_params(), state_cache_mb=settings.state_cache_mb
            )
        )
        if self.stores.records is not None:
            metrics.watch_state_cache(self.stores.records)
        self.root = self.stores.root
        self.recovering = True
        self._lock = asyncio.Lock()
        self._instance = uuid.uuid4().hex[:12]
        self._calls = 0
        self._done: dict[TopicPartition, int] = {}  # next offset to read, per partition handled
        self._held: dict[TopicPartition, list[Any]] = {}  # input of a cut call, until all of it is read
        self._committed: dict[TopicPartition, int] = {}
        self._behind: dict[TopicPartition, int] = {}
        self._last_commit = 0.0
        self._settled = True  # every partition committed since the last round that read anything
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._restore: AIOKafkaConsumer | None = None
        self._partitions: TopicPartitions | None = None

    # Life cycle.

    async def on_start(self) -> None:
        """Connect to Kafka and join the worker group."""
        servers = self.settings.bootstrap_servers
        self.root.mkdir(parents=True, exist_ok=True)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=servers,
            acks="all",
            max_batch_size=_BATCH_BYTES,
            max_request_size=MAX_MESSAGE_BYTES + 65536,
            compression_type=self.settings.internal_compression or None,
            # How long a batch is retried while the broker is away: a broker that restarts takes longer than
            # the client's default 40 s to be back with its leaders, counting its own start.
            request_timeout_ms=int(self.settings.delivery_timeout * 1000),
        )
        await self._producer.start()
        self._partitions = TopicPartitions(self._producer)
        await self._partitions.load(list(self._output_topics.values()))
        self._restore = AIOKafkaConsumer(
            bootstrap_servers=servers,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            check_crcs=False,  # replay reads every record of a changelog once; TCP and the broker check already
            max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
            fetch_max_bytes=4 * MAX_MESSAGE_BYTES,
        )
        await self._restore.start()
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=servers,
            group_id=self.names.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
            fetch_max_bytes=4 * MAX_MESSAGE_BYTES,
            # A partition whose records a round is handling is left out of the fetch then in flight, so a message
            # sent back to it waits until that fetch returns: after the broker's wait for data (the client's 500 ms
            # default) at each such hop of the stages' protocol, which made a backlog's last messages trickle.
            fetch_max_wait_ms=_FETCH_MAX_WAIT_MS,
            # A connector creates its topics when it first starts: notice them within seconds, not minutes.
            metadata_max_age_ms=5000 if len(self.inputs) > 1 else 300_000,
            # Failover: a killed worker's partitions move after the session timeout, and the others hear of the
            # rebalance with their next heartbeat; a rebalance waits for a round in flight (docs/service.md).
            session_timeout_ms=int(self.settings.session_timeout * 1000),
            heartbeat_interval_ms=int(self.settings.heartbeat_interval * 1000),
            rebalance_timeout_ms=int(self.settings.rebalance_timeout * 1000),
        )
        self._consumer.subscribe(
            [*self.inputs, *(self.names.stage(s) for s in STAGES)], listener=_Rebalance(self)
        )
        await self._consumer.start()

    async def on_stop(self) -> None:
        """Commit what was applied, close the stores and leave the group."""
        async with self._lock:
            if self._consumer is not None:
                try:
                    await self._commit(force=True)
                except KafkaError as exc:
                    logger.warning("could not commit on the way out: %r", exc)
                await self._consumer.stop()
            self.stores.close()
        if self._restore is not None:
            await self._restore.stop()
        if self._producer is not None:
            await self._producer.stop()
        self.converter.close()

    @mode.Service.task
    async def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self.should_stop:
            try:
                fetched = await consumer.getmany(
                    timeout_ms=int(self.settings.fetch_wait * 1000), max_records=self.settings.fetch_records
                )
                if fetched:
                    async with self._lock:
                        await self._round(fetched)
                try:
                    await self.commit_when_due(self.settings.commit_interval, read=bool(fetched))
                except KafkaError as exc:  # the state holds what was applied; the next commit catches up
                    logger.warning("could not commit offsets: %r", exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.critical(
                    "stopping the worker: %r; what it did not apply is read again after a restart", exc
                )
                await self._crash_app(exc)
                return

    @mode.Service.task
    async def _watchdog(self) -> None:
        """Recommit partitions whose committed offset stays behind what was applied; refresh the lag gauges."""
        interval = max(5.0, 5 * self.settings.commit_interval)
        while not self.should_stop:
            await self.sleep(interval)
            try:
                await self.check_commits()
            except KafkaError as exc:
                logger.warning("the commit watchdog could not read the committed offsets: %r", exc)
            self.update_lag()

    async def _crash_app(self, exc: BaseException) -> None:
        await (self._on_crash or self.crash)(exc)

    # Rebalancing.

    async def revoke(self, revoked: Sequence[TopicPartition]) -> None:
        """Wait for the round in flight, then commit what was applied (the partitions may go elsewhere)."""
        async with self._lock:
            try:
                await self._commit(force=True)
            except KafkaError as exc:
                logger.warning("could not commit before a rebalance: %r", exc)

    async def assign(self, assigned: Sequence[TopicPartition]) -> None:
        """Open the stores of newly assigned stage partitions and bring every one up to its changelog's end."""
        async with self._lock:
            self.recovering = True
            started = time.monotonic()
            wanted = {
                (self._stage_of[tp.topic], tp.partition) for tp in assigned if tp.topic in self._stage_of
            }
            self.stores.keep_only(wanted)
            by_changelog = {
                TopicPartition(self.names.changelog(stage), partition): store
                for (stage, partition), store in self.stores.partitions.items()
            }
            assert self._restore is not None
            with collector_paused():  # replay makes an object per record, none in a cycle
                reports = await recover(self._restore, by_changelog)
            for tp, report in reports.items():
                store = by_changelog[tp]
                if report.trailing:
                    await self._repair(store, list(report.trailing))
                cut = max(store.cut, report.cut)
                store.cut = cut if cut > store.applied else -1
                if store.cut >= 0:
                    logger.warning(
                        "%s-%d: a call that delivered was cut short; its input (%d to %d) is applied again first",
                        store.stage, store.partition, store.applied + 1, store.cut,
                    )  # fmt: skip
            records = sum(r.records for r in reports.values())
            seconds = time.monotonic() - started
            self.metrics.recovery_seconds.observe(seconds)
            self.metrics.recovered_records.inc(records)
            self._done = {tp: o for tp, o in self._done.items() if tp in set(assigned)}
            self._committed = {tp: o for tp, o in self._committed.items() if tp in set(assigned)}
            self._held = {tp: held for tp, held in self._held.items() if tp in set(assigned)}
            logger.info(
                "assigned %d partitions; %d stage stores recovered, %d changelog records replayed in %.2f s",
                len(assigned),
                len(by_changelog),
                records,
                seconds,
            )
            self.recovering = False

    async def _repair(self, store: PartitionStore, keys: list[str]) -> None:
        """Write a call restoring ``keys`` to the store's values, after a call a crash cut short."""
        logger.warning(
            "%s-%d: the changelog ends in a call cut short (%d keys); writing a repair call",
            store.stage,
            store.partition,
            len(keys),
        )
        last = await self._write_changelog(store, store.current(keys), store.applied)
        store.commit(store.transaction(), applied=store.applied, changelog=last)

    # Rounds and calls.

    async def _round(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """Apply what one fetch brought, a call per partition, with the garbage collector paused throughout: a
        round decodes, makes and encodes a great many objects, nearly all freed by reference counting when it
        ends, and a collector left on walks every live object of the worker again and again meanwhile (decoding
        stage batches took twice as long with it on)."""
        calls = []
        for tp, records in fetched.items():
            if not records:
                continue
            if tp.topic in self.inputs:
                calls.append(self.ingest(tp, records, self.inputs[tp.topic]))
                continue
            store = self.stores.partitions.get((self._stage_of[tp.topic], tp.partition))
            if store is None:
                continue  # revoked while the round was fetched
            calls.append(self._stage_call(store, tp, records))
        with collector_paused():
            await asyncio.gather(*calls)
        for tp, records in fetched.items():
            if records and tp not in self._held:  # held input is not done: a restart must read it again
                self._done[tp] = max(self._done.get(tp, 0), records[-1].offset + 1)

    async def _stage_call(self, store: PartitionStore, tp: TopicPartition, records: Sequence[Any]) -> None:
        """Apply one partition's new records as one call; after a crash cut a call that delivered short, first
        exactly that call's input again, held until all of it is read (module docs)."""
        fresh = [r for r in records if r.offset > store.applied]
        self.metrics.skipped.inc(len(records) - len(fresh))
        if store.cut < 0:
            if fresh:
                await self._call(store, tp, fresh)
            return
        held = self._held.pop(tp, [])
        if held:
            fresh = held + [r for r in fresh if r.offset > held[-1].offset]
        if not fresh:
            return
        if fresh[-1].offset < store.cut:
            self._held[tp] = fresh
            return
        again = [r for r in fresh if r.offset <= store.cut]
        if again:
            await self._call(store, tp, again)
        store.cut = -1
        if len(again) < len(fresh):
            await self._call(store, tp, fresh[len(again) :])

    async def _call(self, store: PartitionStore, tp: TopicPartition, fresh: Sequence[Any]) -> None:
        """Apply records as one call: handler, opening and outputs, changelog, write batch (module docs)."""
        started = time.monotonic()
        applied = fresh[-1].offset
        opened = False

        async def before_delivery() -> None:
            nonlocal opened
            if not opened:
                opened = True
                await self._open_call(store, applied)

        stage = store.stage
        letters = self._sends()
        carried: list[tuple[Any, Message]] = []
        for record in fresh:
            try:
                carried.extend((record, m) for m in decode_batch(record.value))
            except Exception as exc:  # a batch this worker cannot read: keep its bytes, go on
                self._dead_letter(
                    letters, tp, record, f"undecodable batch: {exc!r}", "batch", record.value, None
                )
        txn = store.transaction()
        try:
            delivered = await self._apply(stage, tp.partition, [m for _, m in carried], txn, before_delivery)
        except _InputFailure as failure:
            logger.warning(
                "stage %s: a call of %d failed (%r); one at a time", stage, len(carried), failure.error
            )
            txn = store.transaction()
            delivered = await self._one_at_a_time(stage, tp, carried, txn, letters, before_delivery)
        if letters:
            await before_delivery()
            await letters.send()
        if delivered:
            self.faults.passed("outputs-sent")
        changes = {key: value for writes in txn.changes.values() for key, value in writes.items()}
        last = await self._write_changelog(store, changes, applied) if changes else store.changelog
        self.faults.passed("changelog-sent")
        store.commit(txn, applied=applied, changelog=last)
        self.faults.passed("state-committed")
        self.metrics.batch_seconds.labels(stage).observe(time.monotonic() - started)

    async def _apply(
        self,
        stage: str,
        partition: int,
        messages: list[Message],
        txn: Transaction,
        before_delivery: Callable[[], Awaitable[None]],
    ) -> int:
        """Run the handler in ``txn`` and deliver what it produced; return how many output records it delivered.

        Raise :class:`_InputFailure` for the input's faults (the handler raising, a record too large for Kafka),
        anything else as it is."""
        if not messages:
            return 0
        try:
            produced = self.engine.handle(stage, messages, txn.partition(stage, partition))
        except StateError:
            raise  # the store failed, not the input
        except Exception as exc:
            raise _InputFailure(exc) from exc
        sends = self._sends()
        outputs = self._add_produced(sends, produced)
        if sends:
            await before_delivery()
        try:
            await sends.send()
        except (MessageSizeTooLargeError, RecordTooLargeError) as exc:
            raise _InputFailure(exc) from exc
        self.metrics.observe_outputs(outputs)
        if stage == "source":
            self.metrics.events_processed.inc(sum(1 for m in messages if isinstance(m, InputEvent)))
        return len(outputs)

    async def _one_at_a_time(
        self,
        stage: str,
        tp: TopicPartition,
        carried: list[tuple[Any, Message]],
        txn: Transaction,
        letters: Sends,
        before_delivery: Callable[[], Awaitable[None]],
    ) -> int:
        """Apply each message in a nested transaction; dead-letter those that fail, with the error and origin.

        Return how many output records the messages that succeeded delivered."""
        self.metrics.isolated.labels(stage).inc(len(carried))
        delivered = 0
        for record, message in carried:
            nested = txn.nested()
            try:
                delivered += await self._apply(stage, tp.partition, [message], nested, before_delivery)
            except _InputFailure as failure:
                exc = failure.error
                error = f"processing failed in stage {stage} ({type(exc).__name__}: {exc})"
                logger.warning("dead-lettering a %s message: %s", stage, error)
                if isinstance(message, InputEvent):
                    value, key, reason = (
                        encode_for_dead_letter(message),
                        event_key(message).encode(),
                        "failed",
                    )
                else:
                    value = next(encode_batches([message], max_bytes=MAX_MESSAGE_BYTES))
                    key, reason = None, "stage"
                self._dead_letter(letters, tp, record, error, reason, value, key)
                continue
            nested.commit()
        return delivered
