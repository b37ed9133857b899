"""Checkpoints: a stage partition's calls applied one after another without waiting for Kafka, committed together.

:class:`Checkpoints` is the part of :class:`~streamdedup.drivers.kafka.worker.StageWorker` that opens the calls
of a round, and commits a partition's calls at a checkpoint: every ``checkpoint_interval`` seconds, once its
calls carried ``checkpoint_messages`` messages, when a fetch brings nothing (the input is drained), before its
partition is revoked and when the worker stops.

**A round.** Before any handler runs, each stage partition with new input gets one record opening its calls on
its changelog partition, naming the last input offset fetched (``opening``, :mod:`.changelog`), handed to the
producer and not waited for: the handlers run while Kafka writes it. A call then runs its handler in the
partition's checkpoint transaction (it reads the changes of the calls before it), waits for that opening record
only if it has something to deliver (by then Kafka has it, nearly always), and hands its outputs, stage messages
and dead letters to the producer without waiting for them.

**A checkpoint,** in this order: (1) wait until Kafka has every batch the calls handed to the producer; (2) send
the changes of all the calls (the last value of each key only) to the changelog partition as one changelog call,
whose closing record names the last input offset applied, and wait; (3) commit one RocksDB write batch holding
the changes, the applied input offset and the changelog offset; (4) only then may the consumer commit offsets
past that input.

**What a crash leaves, and why the view is right.** A crash before (3) loses every change since the last
checkpoint, not the input: the consumer's committed offset never passes the committed state. Recovery replays the
closed changelog calls (a checkpoint cut before its closing record is repaired, as a cut call always was), and
finds the records opening the lost calls: if they name input past the applied offset, some of it may have
delivered. That input, and no more, is applied again **one record per call**, each committed at once, before
anything newer. The lost calls took whole records too, so this splits their input at least as finely as they did:
every state they delivered is reached again, and each change they delivered is delivered again or undone by a
later call of the split (delivering again is harmless, design §5 I4). Applied as one call, or with newer input,
a change undone within that call would be written by no one, and what the lost calls delivered would stay
downstream for good. ``tests/simulation`` checks both: checkpoints cut after they delivered and taken again one
message per call reach the embedded view under every seed; taken again as one call, some feed does not.

A call applied again alone also waits for its own outputs before its checkpoint, so a record Kafka refuses (too
large) is dead-lettered there, as it was before checkpoints. In a checkpoint of many calls such a refusal stops
the worker; after its restart, that input is applied again alone, and the record is dead-lettered.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition
from aiokafka.errors import MessageSizeTooLargeError, RecordTooLargeError

from streamdedup.drivers.kafka.changelog import opening
from streamdedup.drivers.kafka.delivery import acknowledged
from streamdedup.drivers.kafka.ingest import Ingest
from streamdedup.errors import StateError

if TYPE_CHECKING:
    from streamdedup.drivers.kafka.partitions import PartitionStore, PartitionStores

__all__ = ["Checkpoints"]


class Checkpoints(Ingest):
    """Open a round's calls and commit partitions at checkpoints (a part of the worker; see the module docs)."""

    stores: PartitionStores
    _stage_of: dict[str, str]
    _done: dict[TopicPartition, int]

    async def _open_calls(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """Send, without waiting, the records opening the calls on input past what earlier ones named."""
        sends = self._sends("changelog")
        opened: list[PartitionStore] = []
        for tp, records in fetched.items():
            if not records or tp.topic not in self._stage_of:
                continue
            store = self.stores.partitions.get((self._stage_of[tp.topic], tp.partition))
            last = records[-1].offset
            if store is None or last <= store.opened:
                continue
            key, value, hdrs = opening(store.applied, last)
            sends.add(self.names.changelog(store.stage), store.partition, key, value, hdrs)
            store.opened = last
            opened.append(store)
        if not opened:
            return
        ack = asyncio.ensure_future(acknowledged(await sends.queue()))
        for store in opened:
            store.open_ack = ack
        await asyncio.sleep(0)  # the producer's sender writes them while the handlers run

    def _due(self, store: PartitionStore, now: float) -> bool:
        pending = store.pending
        return pending is not None and (
            now - pending.started >= self.settings.checkpoint_interval
            or pending.messages >= self.settings.checkpoint_messages
        )

    async def _checkpoints(self, *, every: bool = False) -> None:
        """Commit the partitions whose checkpoint is due (``every``: all with calls since their last one)."""
        now = time.monotonic()
        due = [
            store
            for store in self.stores.partitions.values()
            if store.pending is not None and (every or self._due(store, now))
        ]
        if due:
            await asyncio.gather(*(self._checkpoint(store) for store in due))

    async def _checkpoint(self, store: PartitionStore) -> None:
        """Commit a partition's calls since its last checkpoint (module docs, steps 1 to 4)."""
        pending = store.pending
        if pending is None:
            return
        store.pending = None
        try:
            await acknowledged(pending.sent)
        except (MessageSizeTooLargeError, RecordTooLargeError) as exc:
            raise StateError(
                f"{store.stage}-{store.partition}: Kafka refused a record of a checkpoint ({exc!r}); after a "
                "restart its input is applied again one record per call, and the record goes to dlq"
            ) from exc
        if store.open_ack is not None:
            await store.open_ack
        if pending.delivered:
            self.faults.passed("outputs-sent")
        changes = store.logged(
            {key: value for writes in pending.txn.changes.values() for key, value in writes.items()}
        )
        last = await self._write_changelog(store, changes, pending.applied) if changes else store.changelog
        self.faults.passed("changelog-sent")
        store.commit(pending.txn, applied=pending.applied, changelog=last)
        self.faults.passed("state-committed")
        tp = TopicPartition(self.names.stage(store.stage), store.partition)
        self._done[tp] = max(self._done.get(tp, 0), pending.applied + 1)
