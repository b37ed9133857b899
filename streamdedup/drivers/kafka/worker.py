"""The stage worker: consumes the input topics (documents, and the feeds' connector topics) and the stage topics,
applies handler calls to partition stores.

One consumer in the worker group reads the documents topic and every stage topic. A round takes what the
consumer has fetched and handles each topic partition's records as one call, the calls of a round concurrently
(each partition has its own store):

- an input partition is *ingested*: each record is validated (a feed's change event mapped,
  :mod:`streamdedup.contract.cdc`), the valid events are sent to the source stage
  partition of their source_id (one batch message per partition), the invalid ones to ``dlq``;
- a stage partition's call drops the records at or below what its store applied (read again after a crash) and
  runs the handler on the rest in the partition's checkpoint transaction, which holds the changes of the calls
  since its last checkpoint. What the call delivers (outputs, stage messages, dead letters) is handed to the
  producer, batched per topic partition, once the record opening the round's calls on the partition is in Kafka
  (sent before the handlers ran, so nearly always acknowledged by then); nothing else waits for Kafka.

At a partition's checkpoint (every ``checkpoint_interval`` seconds, or ``checkpoint_messages`` messages, when a
fetch brings nothing within ``fetch_wait``, at a rebalance and at the stop), in this order: (1) everything its
calls delivered is acknowledged; (2) their changes, the last value of each key, go to the stage's changelog
partition as one changelog call (:mod:`.changelog`), acknowledged; (3) one RocksDB write batch commits the
changes, the applied input offset and the changelog offset; (4) the consumer may then commit offsets past that
input (at once when the fetch brought nothing).

A crash before (2) leaves the input since the last checkpoint unapplied. If those calls may have delivered,
recovery finds the record that opened them, and their input is applied again one record per call, each committed
at once, before anything newer: a split at least as fine as theirs, so each change they delivered is delivered
again or undone (repeating delivered messages is harmless, design §5 I4); applied as one call, or with newer
input, a change undone within the call would be written by no one. A crash between (2) and (3) is repaired by
recovery, which replays the changelog call. After (3), the input is never applied twice, whatever the group's
committed offset says. A crash repeats at most what the last checkpoint had not committed.
:mod:`.checkpoints` says more.

The consumer's committed offsets only say where to start reading after a restart; correctness does not depend on
them. They are committed every ``commit_interval`` seconds, all of them as soon as a fetch comes back empty after
work (so the group's lag reads 0 when the work is done), and a watchdog recommits a partition whose committed
offset stays behind what was applied.

A handler that raises does not take its call with it: the call's messages are applied again one at a time, each in
a transaction nested in the checkpoint's, and the one that fails goes to ``dlq`` with the error and where it came
from.
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
from aiokafka.errors import KafkaError

from streamdedup.contract.cdc import FeedDecoder, load_feeds
from streamdedup.convert.pool import Converter
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGES, Message
from streamdedup.core.output_view import OUTPUT_TOPICS
from streamdedup.drivers.collector import collector_paused
from streamdedup.drivers.kafka.batches import decode_batch
from streamdedup.drivers.kafka.delivery import FaultPoints, TopicPartitions
from streamdedup.drivers.kafka.handling import Handling, InputFailure
from streamdedup.drivers.kafka.metrics import Metrics
from streamdedup.drivers.kafka.offsets import CommittedOffsets
from streamdedup.drivers.kafka.partitions import Checkpoint, PartitionStore, PartitionStores, recover
from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES
from streamdedup.settings import Settings

__all__ = ["StageWorker"]

logger = logging.getLogger(__name__)
_BATCH_BYTES = 1024 * 1024  # record batch size of the worker's producer
_FETCH_MAX_WAIT_MS = 100  # how long the broker holds the worker's fetch while no partition in it has data


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: StageWorker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.worker.revoke(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.worker.assign(assigned)


class StageWorker(Handling, CommittedOffsets, mode.Service):
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
        self.engine = Engine(settings.engine_params(), **settings.engine_options(), band_members=True)
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
                    await self._checkpoints(every=True)
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
                idle = False
                async with self._lock:
                    if fetched:
                        await self._round(fetched)
                        await self._checkpoints()
                    elif any(store.pending is not None for store in self.stores.partitions.values()):
                        # Nothing came within fetch_wait: commit what was applied now, not at the next checkpoint.
                        await self._checkpoints(every=True)
                        idle = True
                try:
                    if idle:
                        await self._commit()  # what the checkpoints just committed, at once
                    else:
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
        """Wait for the round in flight, commit every partition's calls, then the consumer offsets of what was
        applied (the partitions may go elsewhere)."""
        async with self._lock:
            try:
                await self._checkpoints(every=True)
            except Exception as exc:  # the new owners apply again what was not committed
                logger.critical("stopping the worker: a checkpoint before a rebalance failed: %r", exc)
                await self._crash_app(exc)
                return
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
                store.opened = max(store.opened, store.applied, store.cut)
                if store.cut >= 0:
                    logger.warning(
                        "%s-%d: calls that may have delivered were cut short; their input (%d to %d) is applied "
                        "again first, one record per call",
                        store.stage, store.partition, store.applied + 1, store.cut,
                    )  # fmt: skip
            records = sum(r.records for r in reports.values())
            seconds = time.monotonic() - started
            self.metrics.recovery_seconds.observe(seconds)
            self.metrics.recovered_records.inc(records)
            self._done = {tp: o for tp, o in self._done.items() if tp in set(assigned)}
            self._committed = {tp: o for tp, o in self._committed.items() if tp in set(assigned)}
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
        await self._open_calls(fetched)
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
            if records and tp.topic in self.inputs:  # a stage partition's input is done at its checkpoint
                self._done[tp] = max(self._done.get(tp, 0), records[-1].offset + 1)

    async def _stage_call(self, store: PartitionStore, tp: TopicPartition, records: Sequence[Any]) -> None:
        """Apply one partition's new records as one call; after a crash cut calls that may have delivered short,
        first their input again, one record per call (:mod:`.checkpoints`)."""
        done = store.applied if store.pending is None else store.pending.applied
        fresh = [r for r in records if r.offset > done]
        self.metrics.skipped.inc(len(records) - len(fresh))
        if records[0].offset <= store.applied:  # read again after a restart: what the state holds is done
            self._done[tp] = max(self._done.get(tp, 0), min(records[-1].offset, store.applied) + 1)
        if store.cut >= 0:
            for record in [r for r in fresh if r.offset <= store.cut]:
                await self._call(store, tp, [record], alone=True)
            if not fresh or fresh[-1].offset < store.cut:
                return
            store.cut = -1
            fresh = [r for r in fresh if r.offset > store.applied]
        if fresh:
            await self._call(store, tp, fresh)

    async def _call(
        self, store: PartitionStore, tp: TopicPartition, fresh: Sequence[Any], *, alone: bool = False
    ) -> None:
        """Apply records as one call of the partition's checkpoint: the handler in the checkpoint's transaction,
        what it delivers handed to the producer once the record opening the call is in Kafka; ``alone``, a call
        applied again after a crash, committed at once (:mod:`.checkpoints`)."""
        started = time.monotonic()
        pending = store.pending
        if pending is None:
            pending = store.pending = Checkpoint(store.transaction(), started)

        async def before_delivery() -> None:
            if store.open_ack is not None:
                await store.open_ack

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
        attempt = pending.txn.nested()
        try:
            delivered = await self._apply(
                stage, tp.partition, [m for _, m in carried], attempt, before_delivery, pending, alone
            )
            attempt.commit()
        except InputFailure as failure:
            logger.warning(
                "stage %s: a call of %d failed (%r); one at a time", stage, len(carried), failure.error
            )
            delivered = await self._one_at_a_time(
                stage, tp, carried, pending.txn, letters, before_delivery, pending, alone
            )
        if letters:
            await before_delivery()
            pending.sent += await letters.queue()
        pending.applied = fresh[-1].offset
        pending.messages += len(carried)
        pending.delivered += delivered
        self.metrics.batch_seconds.labels(stage).observe(time.monotonic() - started)
        if alone:
            await self._checkpoint(store)
