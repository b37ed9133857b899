"""A worker's partition stores: one RocksDB store per assigned (stage, partition), and their recovery.

Each store holds the partition's state and two offsets, committed in the same write batch as the state:

- ``applied``: the last offset of the stage topic partition whose messages the state includes. Messages at or
  below it are dropped when they are read again (after a crash, the consumer group's committed offset may be
  behind it);
- ``changelog``: the offset of the last changelog record the state includes.

Recovery brings a store up to the end of its changelog before the partition is processed: it replays the log from
the record after ``changelog`` (from the start when there is no local state), whole calls only (see
:mod:`.changelog`). The changelog is the partition's truth; when the local store and the log disagree, the log
wins and the store is rebuilt from the start of the log:

- the store's changelog offset is below the log's start (the records it would need were deleted), or
- it is at or past the log's end (the topic was deleted and created again, or the broker lost its data): the
  local state includes records the log does not have.

The band stage's changelog carries its member records only, not its buckets (:mod:`streamdedup.core.stages.bands`):
a replayed batch of member records is written with the bucket changes that bring the buckets from the records
the store had to the ones replayed.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from streamdedup.core.params import DEFAULT_STATE_CACHE_MB, EngineParams
from streamdedup.core.stages.bands import MEMBER_PREFIX, BandStage, buckets_of_members, logged
from streamdedup.drivers.kafka.changelog import AppliedCall, Replay
from streamdedup.errors import StateError
from streamdedup.store.base import Changes, Transaction, check_params
from streamdedup.store.record_cache import RecordCache
from streamdedup.store.rocksdb import RocksDBStore, record_cache, shared_cache

__all__ = ["Checkpoint", "PartitionStore", "PartitionStores", "RecoveryReport", "recover"]

logger = logging.getLogger(__name__)

_STORES_DIR = "partitions"  # under a worker's data directory
APPLIED_KEY = "applied-offset"
CHANGELOG_KEY = "changelog-offset"
BAND_LAYOUT_KEY = "band-changelog"  # "members": a band store whose changelog carries member records
_BAND_LAYOUT = b"members"
_WRITE_BUFFER_BYTES = 8 * 1024 * 1024  # many stores share a worker's memory
_REPLAY_COMMIT_RECORDS = 20_000  # records replayed per write batch


def _offset(raw: bytes | None) -> int:
    return -1 if raw is None else int(raw)


@dataclass
class Checkpoint:
    """A partition's calls since its last commit: their changes (each call reads those before it), the last input
    offset they applied, and the output batches they handed to the producer (:mod:`.worker`)."""

    txn: Transaction
    started: float
    applied: int = -1
    messages: int = 0
    delivered: int = 0
    sent: list[Any] = field(default_factory=list)


class PartitionStore:
    """The state of one stage partition on this worker, with its applied input and changelog offsets."""

    def __init__(
        self, root: Path, stage: str, partition: int, params: EngineParams, records: RecordCache | None = None
    ) -> None:
        self.stage, self.partition, self.params, self.records = stage, partition, params, records
        self.path = root / f"{stage}-{partition}"
        self._open()

    def _open(self) -> None:
        self.store = RocksDBStore(
            self.path,
            families=(self.stage,),
            cache=shared_cache(),
            records=self.records,
            write_buffer_bytes=_WRITE_BUFFER_BYTES,
        )
        check_params(self.store, self.params, where=str(self.path))
        self.applied = _offset(self.store.get_meta(APPLIED_KEY))
        self.changelog = _offset(self.store.get_meta(CHANGELOG_KEY))
        if self.stage == BandStage.name and self.store.get_meta(BAND_LAYOUT_KEY) != _BAND_LAYOUT:
            if not self.empty:
                self.store.close()
                raise StateError(
                    f"{self.path}: a band store written before band changelogs carried member records; this "
                    "worker cannot continue it: start a new generation and switch to it (docs/generations.md)"
                )
            self.store.commit_raw(self.stage, self.partition, {}, {BAND_LAYOUT_KEY: _BAND_LAYOUT})
        # Set by recovery: the last input offset that records opening calls name, past the applied one: calls that
        # may have delivered were cut short. Their input is applied again one record per call (see :mod:`.worker`);
        # -1 when there is none.
        self.cut = -1
        #: The last input offset the records opening calls name (sent, not always acknowledged yet), and the
        #: acknowledgement of the last of them.
        self.opened = self.applied
        self.open_ack: Any = None
        #: The calls since the last commit, or None.
        self.pending: Checkpoint | None = None

    @property
    def empty(self) -> bool:
        """Whether the store has never taken a changelog record."""
        return self.changelog < 0

    def transaction(self) -> Transaction:
        """Return a transaction over the store (its changes are this partition's)."""
        return Transaction(self.store)

    def commit(self, txn: Transaction, *, applied: int, changelog: int) -> None:
        """Commit ``txn`` with the offsets it brings the store to, in one write batch."""
        applied = max(applied, self.applied)
        changelog = max(changelog, self.changelog)
        txn.meta[APPLIED_KEY] = str(applied).encode()
        txn.meta[CHANGELOG_KEY] = str(changelog).encode()
        txn.commit()
        self.applied, self.changelog = applied, changelog

    def logged(self, changes: dict[str, bytes | None]) -> dict[str, bytes | None]:
        """Return what the changelog carries of the changes of calls: all of them, but the band stage's buckets."""
        if self.stage != BandStage.name:
            return changes
        return {key: value for key, value in changes.items() if logged(key)}

    def apply_calls(self, calls: Iterable[AppliedCall]) -> int:
        """Write replayed calls in one write batch, keys as the changelog holds them; return their records."""
        writes: dict[bytes, bytes | None] = {}
        applied, last, records = self.applied, self.changelog, 0
        for call in calls:
            writes.update(call.writes)
            records += len(call.writes)
            applied, last = max(applied, call.applied), max(last, call.last_offset)
        if records:
            if self.stage == BandStage.name:
                writes = self._with_buckets(writes)
            meta = {APPLIED_KEY: str(applied).encode(), CHANGELOG_KEY: str(last).encode()}
            self.store.commit_raw(self.stage, self.partition, writes, meta)
            self.applied, self.changelog = applied, last
        return records

    def _with_buckets(self, writes: dict[bytes, bytes | None]) -> dict[bytes, bytes | None]:
        """Add to replayed member records the bucket changes they make (module docs)."""
        keys = [key.decode("utf-8") for key in writes]
        stray = next((key for key in keys if not logged(key)), None)
        if stray is not None:
            raise StateError(
                f"{self.stage}-{self.partition}: the changelog holds a bucket record ({stray!r}): it was written "
                "by a worker before band changelogs carried member records, and this worker cannot replay it; "
                "start a new generation and switch to it (docs/generations.md)"
            )
        read = self.current
        changes = [
            (key[len(MEMBER_PREFIX) :], before, writes[key.encode("utf-8")])
            for key, before in read(keys).items()
        ]
        buckets = buckets_of_members(changes, lambda wanted: list(read(wanted).values()))
        return {**writes, **{key.encode("utf-8"): value for key, value in buckets}}

    def current(self, keys: Iterable[str]) -> dict[str, bytes | None]:
        """Return the stored value of each key (None where absent)."""
        wanted = list(keys)
        values = self.store.get_many(self.stage, self.partition, wanted) if wanted else []
        return dict(zip(wanted, values, strict=True))

    def wipe(self) -> None:
        """Drop every local record of the partition (the changelog is replayed from its start afterwards)."""
        self.store.close()
        shutil.rmtree(self.path, ignore_errors=True)
        self._open()

    def close(self) -> None:
        """Close the store (its files stay for the next assignment)."""
        self.store.close()


class PartitionStores:
    """The partition stores of one worker's data directory, also usable as one :class:`Store`.

    The worker opens a store per assigned (stage, partition) and closes those it loses. Through the store protocol
    (what the store contract suite runs against), a read or a commit goes to the partition store it names, opened
    on first use, and metadata to a store of the worker's own.
    """

    def __init__(
        self, root: Path, params: EngineParams, *, state_cache_mb: int = DEFAULT_STATE_CACHE_MB
    ) -> None:
        self.root, self.params = root, params
        self.records = record_cache(state_cache_mb)  # shared by the worker's partition stores
        self.partitions: dict[tuple[str, int], PartitionStore] = {}
        self._meta: RocksDBStore | None = None
        self._closed = False
        self._opening: threading.Thread | None = None
        self._found: dict[tuple[str, int], PartitionStore] = {}

    @classmethod
    def of_worker(
        cls, data_dir: Path, params: EngineParams, *, state_cache_mb: int = DEFAULT_STATE_CACHE_MB
    ) -> PartitionStores:
        """Return the partition stores of a worker whose data directory is ``data_dir`` (none opened yet)."""
        return cls(Path(data_dir) / _STORES_DIR, params, state_cache_mb=state_cache_mb)

    def open_found(self) -> None:
        """Start opening, in a thread, every partition store the data directory holds.

        A restarted worker is mostly given the partitions it had, and RocksDB opens a store without holding the
        interpreter: the opening overlaps the rest of the worker's start instead of following its assignment.
        Every other method waits for the thread first. A store that fails to open here is opened again, and its
        error raised, when its partition is assigned.
        """
        if self._opening is not None or self._closed:
            return
        found = []
        for path in sorted(self.root.glob("*-*")) if self.root.is_dir() else ():
            stage, _, partition = path.name.rpartition("-")
            if path.is_dir() and partition.isdigit():
                found.append((stage, int(partition)))
        self._opening = threading.Thread(
            target=self._open_each, args=(found,), name="open-stores", daemon=True
        )
        self._opening.start()

    def _open_each(self, found: list[tuple[str, int]]) -> None:
        for stage, partition in found:
            try:
                self._found[(stage, partition)] = PartitionStore(
                    self.root, stage, partition, self.params, self.records
                )
            except Exception as exc:  # raised again when the partition is assigned
                logger.debug("could not open %s-%d ahead of its assignment: %r", stage, partition, exc)

    def _opened(self) -> None:
        """Wait for the stores :meth:`open_found` is opening, and take them."""
        if self._opening is not None:
            self._opening.join()
            self._opening = None
            self.partitions.update(self._found)
            self._found = {}

    def open(self, stage: str, partition: int) -> PartitionStore:
        """Return the store of a stage partition, opening it if needed."""
        if self._closed:
            raise StateError(f"the state at {self.root} is closed")
        self._opened()
        store = self.partitions.get((stage, partition))
        if store is None:
            store = self.partitions[(stage, partition)] = PartitionStore(
                self.root, stage, partition, self.params, self.records
            )
        return store

    def keep_only(self, wanted: Iterable[tuple[str, int]]) -> None:
        """Close the stores of every partition not in ``wanted`` and open the others."""
        wanted = set(wanted)
        self._opened()
        for address in list(self.partitions):
            if address not in wanted:
                self.partitions.pop(address).close()
        for stage, partition in sorted(wanted):
            self.open(stage, partition)

    def get(self, stage: str, partition: int, key: str) -> bytes | None:
        """Return the value of ``key`` in a stage partition, or None."""
        return self.open(stage, partition).store.get(stage, partition, key)

    def get_many(self, stage: str, partition: int, keys: list[str]) -> list[bytes | None]:
        """Return the values of many keys of a stage partition, in order."""
        return self.open(stage, partition).store.get_many(stage, partition, keys)

    def scan(self, stage: str, partition: int, prefix: str) -> list[tuple[str, bytes]]:
        """Return every (key, value) under ``prefix`` in a stage partition, in key order."""
        return self.open(stage, partition).store.scan(stage, partition, prefix)

    def get_meta(self, key: str) -> bytes | None:
        """Return a metadata value of the worker's own store, or None."""
        return self._meta_store().get_meta(key)

    def commit(self, changes: Changes, meta: Mapping[str, bytes]) -> None:
        """Commit each partition's changes to its store (one write batch each), then the metadata."""
        written = False
        for (stage, partition), writes in changes.items():
            if writes:
                self.open(stage, partition).store.commit({(stage, partition): writes}, {})
                written = True
        if meta or not written:
            self._meta_store().commit({}, meta)

    def keys(self, stage: str) -> list[tuple[int, str]]:
        """Return the (partition, key) pairs of a stage over the open partition stores, in order."""
        self._opened()
        return sorted(
            k for (s, _), store in self.partitions.items() if s == stage for k in store.store.keys(s)
        )

    def _meta_store(self) -> RocksDBStore:
        if self._closed:
            raise StateError(f"the state at {self.root} is closed")
        if self._meta is None:
            self._meta = RocksDBStore(self.root / "worker", families=(), cache=shared_cache())
        return self._meta

    def close(self) -> None:
        """Close every store (again: nothing)."""
        if self._closed:
            return
        self.keep_only(())
        if self._meta is not None:
            self._meta.close()
        self._closed = True


@dataclass
class RecoveryReport:
    """What recovery did for one partition."""

    stage: str
    partition: int
    records: int = 0
    rebuilt: str = ""  # why the local store was dropped and rebuilt, or empty
    trailing: tuple[str, ...] = ()  # keys of a call cut short at the log's end, to repair
    cut: int = -1  # the last input offset of a call that delivered and was cut short (-1: none)


def _rebuild_reason(store: PartitionStore, start: int, end: int) -> str:
    """Return why a store cannot continue from its changelog offset (the log's ``start`` and ``end``), or ""."""
    if not store.empty and store.changelog + 1 < start:
        return f"its changelog offset {store.changelog} is below the log's start {start}"
    if not store.empty and store.changelog >= end:
        return f"its changelog offset {store.changelog} is not below the log's end {end}"
    return ""


async def recover(
    consumer: AIOKafkaConsumer, stores: Mapping[TopicPartition, PartitionStore], *, timeout: float = 600.0
) -> dict[TopicPartition, RecoveryReport]:
    """Replay each changelog partition into its store, from the store's changelog offset to the log's end.

    ``consumer`` is started, without a group; ``stores`` maps each changelog partition to its store.
    """
    if not stores:
        return {}
    reports = {tp: RecoveryReport(store.stage, store.partition) for tp, store in stores.items()}
    partitions = list(stores)
    consumer.assign(partitions)
    starts = await consumer.beginning_offsets(partitions)
    ends = await consumer.end_offsets(partitions)
    replays: dict[TopicPartition, Replay] = {}
    for tp, store in stores.items():
        start = starts[tp]
        reason = _rebuild_reason(store, start, ends[tp])
        if reason:
            logger.warning("rebuilding %s-%d from its changelog: %s", store.stage, store.partition, reason)
            store.wipe()
            reports[tp].rebuilt = reason
        replays[tp] = Replay()
        consumer.seek(tp, max(store.changelog + 1, start))
    remaining = {tp for tp in partitions if stores[tp].changelog + 1 < ends[tp]}
    deadline = time.monotonic() + timeout
    while remaining:
        if time.monotonic() > deadline:
            raise StateError(
                f"recovery did not reach the end of {sorted(map(str, remaining))} in {timeout} s"
            )
        fetched = await consumer.getmany(*remaining, timeout_ms=500, max_records=_REPLAY_COMMIT_RECORDS)
        for tp, fetched_records in fetched.items():
            end = ends[tp]
            records = fetched_records
            if records[-1].offset >= end:  # past the end recovery set out to reach
                records = [r for r in records if r.offset < end]
            replays[tp].feed_records(records)
            reports[tp].records += stores[tp].apply_calls(replays[tp].take())
        for tp in list(remaining):
            if await consumer.position(tp) >= ends[tp]:
                remaining.discard(tp)
    for tp, replay in replays.items():
        reports[tp].records += stores[tp].apply_calls(replay.take())
        reports[tp].trailing = tuple(replay.trailing_keys())
        if replay.opened > stores[tp].applied:
            reports[tp].cut = replay.opened
    consumer.unsubscribe()
    return reports
