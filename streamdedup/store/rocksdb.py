"""A store in RocksDB (rocksdict, raw bytes mode): one column family per stage plus one for metadata.

Keys are the partition as two big-endian bytes followed by the UTF-8 key, so one partition's keys are contiguous.
A commit is one ``WriteBatch``: the state changes of a batch and its progress metadata land together or not at all.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import rocksdict

from streamdedup.core.params import DEFAULT_STATE_CACHE_MB
from streamdedup.errors import StateError
from streamdedup.store.base import FAMILIES, Changes
from streamdedup.store.record_cache import RecordCache, fill_write_batch, new_record_cache

__all__ = ["RocksDBStore", "read_only", "record_cache", "refuse_shards", "shard_count"]

_META = "meta"


_BLOCK_CACHE_BYTES = 256 * 1024 * 1024
# The metadata family takes a few bytes on every commit, so its memtable never fills and never flushes, and would
# keep every write-ahead log file alive: the logs would grow with all writes ever made, not with the state.
# Past this size, RocksDB flushes the families that hold the oldest log, and the log files go.
_MAX_WAL_BYTES = 64 * 1024 * 1024
_WRITE_BUFFER_BYTES = 64 * 1024 * 1024  # RocksDB's default memtable size, named so tests can make it small
# The size of the filter over a memtable's keys, as a share of the memtable's (some 8 bits a key of the band stage's
# small records).
_MEMTABLE_BLOOM_RATIO = 0.02
# Most of the state is small records of hashes and ids. Bottom-level blocks are coded with a zstd dictionary that
# RocksDB trains per file from a sample of its blocks: records share their structure and field names, which a
# block of 4 KiB alone holds too little of to compress well. Blocks keep RocksDB's default size: once the state
# outgrows the block cache, a read decompresses a whole block, and 16 KiB blocks (a little smaller on disk) made
# the growth run's band stage three times slower at 460,000 positions.
# With the dictionary, a level above 3 gains almost nothing on blocks this small, and compression is most of what a
# compaction costs: a full compaction of a 205,000-position state took 5.3 s at level 3 against 7.5 s at level 6,
# for the same size; over the growth run to 972,800 positions, RocksDB's background threads used 90 instead of
# 146 s of CPU; the Django state is 1,160 instead of 1,151 bytes per unique chunk (level 2: 79 s and 1,172 bytes).
_LEVEL0_FILES = 8
_ZSTD_LEVEL = 3
_LEVELS = 7  # RocksDB's default number of levels
_ZSTD_DICT_BYTES = 64 * 1024
_ZSTD_TRAIN_BYTES = 16 * _ZSTD_DICT_BYTES


# The content stage's keys are read through a record cache (`streamdedup.store.record_cache`): the values a
# process last read or wrote, bounded in bytes. The block cache does not keep a grown state's records: keys are
# hashes, so each compaction rewrites the whole bottom level and the cached blocks go with their files. A record of
# the content stage is read again when a later text is a copy or a candidate of it, a key of the others mostly not:
# growth to 983,040 positions, last four windows, the content stage 2.9 instead of 3.6-3.8 s a window with 1 GiB
# (its records, ids and references nearly all held); with the band, source and view stages' keys cached too, their
# many writes took more time than their reads gave back, and a cache of every family was slower than none.
_CACHED = frozenset({"content"})
_SERIALS = itertools.count(1)  # a namespace per open store, in a record cache that stores may share
_NAMESPACE_BYTES = 5  # a store's number (4 bytes) and its family's (1), before a partition's address


def record_cache(megabytes: int = DEFAULT_STATE_CACHE_MB) -> RecordCache | None:
    """Return a record cache of ``megabytes`` for one or more stores to share, or None for 0."""
    return new_record_cache(megabytes * 1024 * 1024) if megabytes > 0 else None


@functools.cache
def shared_cache() -> rocksdict.Cache:
    """Return the block cache that the stores of one process share (a worker opens one store per partition)."""
    return rocksdict.Cache(_BLOCK_CACHE_BYTES)


def _options(cache: rocksdict.Cache | None = None, write_buffer: int | None = None) -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_compression_type(rocksdict.DBCompressionType.lz4())
    # Level 0, what a flush writes, is not compressed: its files are compacted to the levels below soon after, which
    # compress what they write, and a flush, which a close waits for, then only copies the memtable to disk
    # (`streamdedup run` on 10,000 positions: 4.9% fewer instructions). A state too small to have been compacted
    # yet takes more room on disk (14 instead of 9 MB for those 10,000 positions); a compacted one, the same.
    options.set_compression_per_level(
        [rocksdict.DBCompressionType.none()] + [rocksdict.DBCompressionType.lz4()] * (_LEVELS - 1)
    )
    # The bottom level holds nearly all of the data once it settles: zstd codes it about twice as small as lz4
    # (hex hashes and text compress far better with an entropy coder), and only compaction pays for it.
    options.set_bottommost_compression_type(rocksdict.DBCompressionType.zstd())
    options.set_bottommost_compression_options(-14, _ZSTD_LEVEL, 0, _ZSTD_DICT_BYTES, True)
    options.set_bottommost_zstd_max_train_bytes(_ZSTD_TRAIN_BYTES, True)
    # Keys are hashes, so a compaction of level 0 into the level below rewrites all of that level, whatever it brings,
    # and its cost grows with the state. On two cores it slows the engine itself: growing a state to 983,040
    # positions, a window with a compaction took 1.5-2 s more than one without. Compacting level 0 at eight files
    # instead of RocksDB's four does it half as often: background CPU 22-24 instead of 53-55 s over the run, the
    # whole run 105-113 instead of 115-116 s, its last four windows 7.0-7.7 instead of 8.3-8.9 s (alternated runs).
    # A lookup then probes up to eight level-0 filters, and level 0, uncompressed, holds up to twice as much.
    options.set_level_zero_file_num_compaction_trigger(_LEVEL0_FILES)
    options.set_max_total_wal_size(_MAX_WAL_BYTES)
    options.set_write_buffer_size(write_buffer or _WRITE_BUFFER_BYTES)
    # The table files' Bloom filters (below) do not cover the memtable, where a lookup of an absent key searches
    # the whole skiplist; most lookups are of absent keys, and a recent state is mostly in the memtable. A filter
    # over the memtable's keys answers them at once: on the streaming feed, absent-key reads took 0.7 instead of
    # 1.8 us and the band stage 35% less time, for 1.3 MiB per full memtable and a little more per write.
    options.set_memtable_prefix_bloom_ratio(_MEMTABLE_BLOOM_RATIO)
    options.set_memtable_whole_key_filtering(True)
    # Open a database's table files one after another: its files are few (a worker opens one store per partition),
    # and the default pool of 16 threads, started and stopped on every open, cost more than the opening itself.
    options.set_max_file_opening_threads(1)
    table = rocksdict.BlockBasedOptions()
    # Most lookups are for keys that do not exist yet (a new content's LSH buckets, a new content hash): a Bloom
    # filter answers those without reading any data block, however large the state grows.
    table.set_bloom_filter(10, False)
    # Each table file's index and whole filter stay in memory beside the block cache (RocksDB's default): an absent
    # key is then a Bloom probe per file, with no cache lookup. A band lookup probes every level-0 file and one
    # file per level below, nearly always for an absent key; with filters partitioned into the block cache, each
    # probe looked up a filter block in the cache first. Growth to 358,400 positions: band reads 1.9 instead of
    # 3.7 us a key (1.2 instead of 2.4 s a window; a four-times larger block cache changed nothing), content
    # reads 4.4 instead of 5.3. The price is memory that grows with the state: 11 MiB of filters and indexes at
    # 400,000 positions (7 of them the band stage's). (Kept in the block cache, whole filters were evicted and read
    # back for every few lookups once the state outgrew the cache.)
    table.set_cache_index_and_filter_blocks(False)
    if cache is not None:
        table.set_block_cache(cache)
    options.set_block_based_table_factory(table)
    return options


# Keys per multi-get. A multi-get of tens of thousands of keys costs more per key than one of a thousand: 1.3-1.5
# against 0.35 us for an absent key at 50,000 (a new text's band keys are nearly all absent, and a batch reads
# some 50,000 of them), and 3.0-3.9 against 2.3-3.1 us for a present one.
_MULTI_GET_KEYS = 1024

_PREFIXES = tuple(p.to_bytes(2, "big") for p in range(256))


def _prefix(partition: int) -> bytes:
    return _PREFIXES[partition] if partition < 256 else partition.to_bytes(2, "big")


def _address(partition: int, key: str) -> bytes:
    return _prefix(partition) + key.encode("utf-8")


def shard_count(state: Path) -> int:
    """Return how many worker stores a state directory is spread over: 0 for the state of one process.

    A run with ``--workers N`` keeps partition ``w`` of every stage in ``STATE/shard-w`` and its own totals in
    ``STATE/db`` (see :mod:`streamdedup.drivers.parallel`).
    """
    count = 0
    while (state / f"shard-{count}").is_dir():
        count += 1
    return count


def refuse_shards(state: Path, what: str) -> None:
    """Raise :class:`StateError` if ``state`` is spread over worker stores, which ``what`` cannot read."""
    workers = shard_count(state)
    if workers:
        raise StateError(
            f"the state at {state} is spread over {workers} worker stores (a run with --workers {workers}); "
            f"{what} reads the state of a run in one process"
        )


@contextmanager
def read_only(state: Path, families: Sequence[str]) -> Iterator[rocksdict.Rdict]:
    """Open a state directory's ``families`` read-only (no lock: a run may hold the state meanwhile), then close it.

    Values are raw bytes; keys are those of :func:`_address`. A missing directory or family is a ``StateError``, and
    so is a state spread over worker stores.
    """
    refuse_shards(state, "the review console and calibration each")
    db = state / "db"
    if not db.is_dir():
        raise StateError(
            f"no state at {state} (no {db}); write one with 'streamdedup run INPUT --state {state}'"
        )
    try:
        present = rocksdict.Rdict.list_cf(str(db))
    except Exception as exc:
        raise StateError(f"{state} is not a state directory: {exc}") from exc
    missing = [name for name in families if name not in present]
    if missing:
        raise StateError(
            f"{state} is not a state directory written by 'streamdedup run' (no {', '.join(missing)})"
        )
    try:
        rdict = rocksdict.Rdict(
            str(db),
            options=rocksdict.Options(raw_mode=True),
            column_families={name: rocksdict.Options(raw_mode=True) for name in families},
            access_type=rocksdict.AccessType.read_only(),
        )
    except Exception as exc:
        raise StateError(f"cannot open the state at {state} read-only: {exc}") from exc
    try:
        yield rdict
    finally:
        rdict.close()


class _Own:
    """The type of :data:`_OWN`."""


_OWN = _Own()  # a store's default: a record cache of its own, of the default size


class RocksDBStore:
    """Stage state in a RocksDB database under ``path``.

    ``families`` are the keyed families it holds (every stage's and the view's by default; a worker's partition
    store holds its stage's alone); ``cache`` is a block cache to share with other stores, ``records`` a record
    cache (:func:`record_cache`; by default one of its own, None for none), ``write_buffer_bytes`` the memtable size
    of each family.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        families: tuple[str, ...] = FAMILIES,
        cache: rocksdict.Cache | None = None,
        records: RecordCache | _Own | None = _OWN,
        write_buffer_bytes: int | None = None,
    ) -> None:
        self.path = Path(path)
        names = (*families, _META)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            cache = cache or rocksdict.Cache(_BLOCK_CACHE_BYTES)  # shared by every column family
            options = {name: _options(cache, write_buffer_bytes) for name in names}
            self._db = rocksdict.Rdict(
                str(self.path / "db"), options=_options(cache, write_buffer_bytes), column_families=options
            )
        except Exception as exc:
            raise StateError(f"cannot open the state at {self.path}: {exc}") from exc
        self._families = {name: self._db.get_column_family(name) for name in names}
        self._handles = {name: self._db.get_column_family_handle(name) for name in names}
        # Each family that reads through a record cache: the cache, and the namespace of this store's keys in it.
        self._cached: dict[str, tuple[RecordCache, bytes]] = {}
        if any(name in _CACHED for name in names):
            shared = record_cache() if isinstance(records, _Own) else records
            if shared is not None:
                serial = next(_SERIALS).to_bytes(4, "big")
                self._cached = {
                    name: (shared, serial + bytes([i])) for i, name in enumerate(names) if name in _CACHED
                }
        self._closed = False

    def _family(self, name: str) -> rocksdict.Rdict:
        family = self._families.get(name)
        if family is None:
            if self._closed:
                raise StateError(f"the state at {self.path} is closed")
            raise StateError(f"the state at {self.path} holds no family {name!r}")
        return family

    def get(self, stage: str, partition: int, key: str) -> bytes | None:
        """Return the value of ``key`` in a stage partition, or None."""
        value = self._family(stage).get(_address(partition, key))
        return None if value is None else bytes(value)

    def get_many(self, stage: str, partition: int, keys: list[str]) -> list[bytes | None]:
        """Return the values of many keys of a stage partition, in order, with one multi-get."""
        family = self._family(stage)
        cached = self._cached.get(stage)
        if cached is not None:
            records, namespace = cached
            return records.get_many(
                namespace + _prefix(partition), _NAMESPACE_BYTES, keys, family.get, _MULTI_GET_KEYS
            )
        prefix = _prefix(partition)
        addresses: list[str | int | float | bytes | bool] = [prefix + key.encode() for key in keys]
        # In raw mode a multi-get returns a new list of bytes and None: nothing to convert.
        if len(addresses) <= _MULTI_GET_KEYS:
            return family.get(addresses) or []
        values: list[bytes | None] = []
        for start in range(0, len(addresses), _MULTI_GET_KEYS):
            values.extend(family.get(addresses[start : start + _MULTI_GET_KEYS]) or [])
        return values

    def scan(self, stage: str, partition: int, prefix: str) -> list[tuple[str, bytes]]:
        """Return every (key, value) of a stage partition whose key starts with ``prefix``, in key order."""
        start = _address(partition, prefix)
        found: list[tuple[str, bytes]] = []
        cursor = self._family(stage).iter()
        cursor.seek(start)
        while cursor.valid():
            key = cursor.key()
            if not key.startswith(start):
                break
            found.append((key[2:].decode("utf-8"), bytes(cursor.value())))
            cursor.next()
        return found

    def get_meta(self, key: str) -> bytes | None:
        """Return a metadata value, or None."""
        value = self._family(_META).get(key.encode("utf-8"))
        return None if value is None else bytes(value)

    def commit(self, changes: Changes, meta: Mapping[str, bytes]) -> None:
        """Write every change and metadata value in one ``WriteBatch``."""
        self._family(_META)
        batch = rocksdict.WriteBatch(raw_mode=True)
        cached_groups = []
        for (stage, partition), writes in changes.items():
            group = writes if isinstance(writes, dict) else dict(writes)
            prefix = _prefix(partition)
            fill_write_batch(batch.put, batch.delete, self._handles[stage], prefix, group)
            cached = self._cached.get(stage)
            if cached is not None:
                cached_groups.append((cached[0], cached[1] + prefix, group))
        for key, value in meta.items():
            batch.put(key.encode("utf-8"), value, self._handles[_META])
        self._db.write(batch)
        for records, namespace, group in cached_groups:  # after the write: never a value the store lacks
            records.update(namespace, group)

    def commit_raw(
        self, stage: str, partition: int, writes: Mapping[bytes, bytes | None], meta: Mapping[str, bytes]
    ) -> None:
        """Like :meth:`commit` for one stage partition, with keys already UTF-8 (a changelog's replay)."""
        self._family(_META)
        handle = self._handles[stage]
        prefix = _prefix(partition)
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in writes.items():
            if value is None:
                batch.delete(prefix + key, handle)
            else:
                batch.put(prefix + key, value, handle)
        for name, value in meta.items():
            batch.put(name.encode("utf-8"), value, self._handles[_META])
        self._db.write(batch)
        cached = self._cached.get(stage)
        if cached is not None:
            records, namespace = cached
            records.update(namespace + prefix, writes if isinstance(writes, dict) else dict(writes))

    def keys(self, stage: str) -> list[tuple[int, str]]:
        """Return the (partition, key) pairs of a stage, in key order."""
        # Iterating an Rdict in raw mode fails; its keys() view works.
        keys = [k for k in self._family(stage).keys() if isinstance(k, bytes)]  # noqa: SIM118
        return [(int.from_bytes(k[:2], "big"), k[2:].decode("utf-8")) for k in keys]

    def disk_bytes(self) -> int:
        """Return the bytes the database occupies on disk."""
        return sum(f.stat().st_size for f in (self.path / "db").rglob("*") if f.is_file())

    def close(self) -> None:
        """Flush and close the database, releasing its lock."""
        if self._closed:
            return
        self._closed = True
        self._cached.clear()  # its entries in a shared cache are never read again, and are the first to go
        # Closing a family flushes its memtable and waits for it. Asked for all at once first, the flushes run side
        # by side on RocksDB's background threads instead of one after another (80-90 ms of a 10,000-position run).
        for family in self._families.values():
            family.flush(False)
        for family in self._families.values():
            family.close()
        self._families.clear()
        self._handles.clear()
        self._db.flush()
        self._db.close()
