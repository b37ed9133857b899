"""Floors: the least Python work of the engine's job, beside the engine, in the same run on the same events.

    python -m benchmarks.floor
    python -m benchmarks.floor --feeds streaming

The engine's targets compare it with a Quix Streams application that only hashes chunks
(:mod:`benchmarks.streaming`) and with datasketch's ``MinHash.bulk`` (:mod:`benchmarks.engine`). A floor says how
far any Python implementation could go: it is a plain loop that does the storage work the engine cannot avoid and
nothing else, on the project's own store (``RocksDBStore``, the same RocksDB options), in batches of 2,048
documents as ``streamdedup run`` takes them, with the chunker, normalization and signature kernel of the engine
(the package's compiled kernels):

1. ``exact``: each chunk normalized and hashed (SHA-256); one record per document (its content hashes) and one per
   distinct text (its text and at most 100 source positions), read with one multi-get and written with one
   commit per batch. This is the Quix peer's work, without Kafka.
2. ``lsh_rocksdb``: ``exact``, and for each new distinct text of at least ``min_shingles`` shingles (as the engine
   does) its signature, its band keys and one record per LSH bucket, as the engine keeps them: a multi-get of
   the buckets, the text's id added, the bucket written back. The other ids in its buckets are its candidates
   (counted, not verified). Every LSH floor takes the engine's band hashes (``SignatureScheme.band_hashes``, a
   batch at a time), so the LSH floors differ only in where the buckets live.
3. ``lsh_memory``: the same, with the band index in memory (a dict from a 64-bit band hash to the ids in the
   bucket) and one record per batch holding the batch's new (band hash, id) pairs: what a band index that keeps
   its buckets in memory and persists a log of its changes would cost.
4. ``lsh_sorted``: the same in-memory index and log, held as sorted NumPy runs of (band hash, id) merged like a
   binary counter, and looked up for a whole batch with ``searchsorted``: no Python work per bucket.

Beside them, ``engine_bands_in_memory`` is the engine with its band family's records in a dict instead of RocksDB
(nothing persisted): what any change to where the engine keeps its buckets could give it at most.

No floor verifies candidates, keeps ACLs, versions or deletions, chooses canonicals or writes output records:
a floor is below what any implementation of the event contract costs. The engine's CPU time over a floor's
says how much trimming the engine could still give; a floor's CPU time over a target's baseline says whether
the target can be met with that storage design at all. Each contender runs ``--repeat`` times, interleaved, and
its least CPU time counts.

With ``--peer``, the streaming feed's runs also run the Quix Streams peer of :mod:`benchmarks.streaming` on the
project's broker (started on 127.0.0.1:29092 unless one answers there, and stopped after), and report its CPU
time per chunk after its startup (Kafka's client threads included, the broker's not), in the same run as the
floors.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from benchmarks.common import django_chunks, django_files, save
from streamdedup.contract.codec import decode_event
from streamdedup.core.chunking import chunk_document
from streamdedup.core.engine import Engine
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.core.normalize import normalize
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.settings import Settings
from streamdedup.store.rocksdb import RocksDBStore

BATCH = Settings.model_fields["batch_size"].default  # as `streamdedup run`
MAX_SOURCES = 100
FLOORS = ("exact", "lsh_rocksdb", "lsh_memory", "lsh_sorted")

Document = tuple[str, list[tuple[str, str]]]  # source id, (original, plain) text of each chunk


def _streaming_feed() -> tuple[list[UpsertEvent], list[str]]:
    """The streaming benchmark's feed: 6,000 pre-chunked documents of five real Django chunks."""
    from benchmarks.workload import _events

    limits = Settings().event_limits()
    events = [decode_event(value, limits) for value in _events("floor.")]
    texts = [normalize(c) for e in events for c in e.chunks or ()]
    return [e for e in events if isinstance(e, UpsertEvent)], texts


def _django_feed() -> tuple[list[UpsertEvent], list[str]]:
    """The engine benchmark's feed: the docs of five Django releases as text upserts."""
    events = [
        UpsertEvent(
            source_id=path.as_posix(), version=1, text=path.read_text(encoding="utf-8"), collection="django",
            attrs=SourceAttrs(acl=("*",), modified_at=1_700_000_000_000_000 + i),
        )
        for i, path in enumerate(django_files())
    ]  # fmt: skip
    return events, django_chunks()


FEEDS: dict[str, Callable[[], tuple[list[UpsertEvent], list[str]]]] = {
    "streaming": _streaming_feed,
    "django": _django_feed,
}


def _documents(events: list[UpsertEvent], params: EngineParams) -> Iterator[list[Document]]:
    """Cut the events into chunks as the engine does, a batch at a time (the cutting is timed with the floor)."""
    for i in range(0, len(events), BATCH):
        batch = []
        for event in events[i : i + BATCH]:
            if event.chunks is not None:
                chunks = [(c, c) for c in event.chunks]
            else:
                cut = chunk_document(event.text or "", event.content_type, max_chars=params.max_chunk_chars)
                chunks = [(c.original, c.plain) for c in cut]
            batch.append((event.source_id, chunks))
        yield batch


class _Floor:
    """One floor's loop over a feed, on a new store in ``path``."""

    def __init__(self, kind: str, path: Path, params: EngineParams) -> None:
        self.kind, self.params = kind, params
        self.scheme = Engine(params).scheme
        self.store = RocksDBStore(path)
        self.encode, self.decode = msgspec.msgpack.Encoder().encode, msgspec.msgpack.Decoder().decode
        self.buckets: dict[int, list[int]] = {}
        self.runs: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        self.new_texts = self.indexed = self.candidates = 0

    def run(self, events: list[UpsertEvent]) -> None:
        for number, batch in enumerate(_documents(events, self.params)):
            changes: dict[tuple[str, int, str], bytes | None] = {}
            fresh = self._contents(batch, changes)
            if fresh and self.kind == "lsh_rocksdb":
                self._bands_in_store(fresh, changes)
            elif fresh and self.kind in ("lsh_memory", "lsh_sorted"):
                self._bands_in_memory(fresh, changes, number)
            self.store.commit(changes, {})
        self.store.close()

    def _contents(
        self, batch: list[Document], changes: dict[tuple[str, int, str], bytes | None]
    ) -> list[Any]:
        """Hash every chunk, add its position to its text's record; return the new texts' (hash, normalized)."""
        positions = []
        for source_id, chunks in batch:
            hashes = []
            for position, (original, plain) in enumerate(chunks):
                text = normalize(plain)
                digest = hashlib.sha256(text.encode()).hexdigest()
                hashes.append(digest)
                positions.append((digest, source_id, position, text, original))
            changes["source", 0, source_id] = self.encode(hashes)
        keys = list(dict.fromkeys(p[0] for p in positions))
        records = {
            key: None if raw is None else self.decode(raw)
            for key, raw in zip(keys, self.store.get_many("content", 0, keys), strict=True)
        }
        fresh = []
        for digest, source_id, position, text, original in positions:
            record = records[digest]
            if record is None:
                record = records[digest] = [original, []]
                fresh.append((digest, text))
            if len(record[1]) < MAX_SOURCES:
                record[1].append((source_id, position))
        for key, record in records.items():
            changes["content", 0, key] = self.encode(record)
        self.new_texts += len(fresh)
        return fresh

    def _band_hashes(self, fresh: list[Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Return the band hashes (texts x bands) and ids of the new texts long enough to join bands."""
        signatures, distinct = self.scheme.signatures([text for _, text in fresh])
        long_enough = distinct >= self.params.min_shingles
        hashes = self.scheme.band_hashes(signatures[long_enough], self.params.bands, self.params.rows)
        digests = [digest for (digest, _), keep in zip(fresh, long_enough.tolist(), strict=True) if keep]
        self.indexed += len(digests)
        return hashes, np.array([int(digest[:16], 16) for digest in digests], dtype=np.uint64)

    def _bands_in_store(self, fresh: list[Any], changes: dict[tuple[str, int, str], bytes | None]) -> None:
        hashes, ids = self._band_hashes(fresh)
        bands = self.params.bands
        members = [member.to_bytes(8, "big") for member in ids.tolist()]
        joins = [
            (f"{i % bands:03d}{band_hash:016x}", members[i // bands])
            for i, band_hash in enumerate(hashes.ravel().tolist())
        ]
        keys = list(dict.fromkeys(key for key, _ in joins))
        buckets = {
            key: raw or b"" for key, raw in zip(keys, self.store.get_many("band", 0, keys), strict=True)
        }
        for key, member in joins:
            self.candidates += len(buckets[key]) // 8
            buckets[key] += member
        for key, raw in buckets.items():
            changes["band", 0, key] = raw

    def _bands_in_memory(
        self, fresh: list[Any], changes: dict[tuple[str, int, str], bytes | None], number: int
    ) -> None:
        hashes, ids = self._band_hashes(fresh)
        bands = self.params.bands
        changes["band", 0, f"log{number:012d}"] = hashes.tobytes() + ids.tobytes()
        if self.kind == "lsh_sorted":
            self._sorted_runs(hashes.ravel(), np.repeat(ids, bands))
            return
        buckets = self.buckets
        for band_hash, member in zip(hashes.ravel().tolist(), np.repeat(ids, bands).tolist(), strict=True):
            bucket = buckets.get(band_hash)
            if bucket is None:
                buckets[band_hash] = [member]
            else:
                self.candidates += len(bucket)
                bucket.append(member)

    def _sorted_runs(self, hashes: np.ndarray[Any, Any], members: np.ndarray[Any, Any]) -> None:
        """Count the batch's candidates in every sorted run and among its own keys; add the batch as a run."""
        for keys, _ in self.runs:
            found = np.searchsorted(keys, hashes, "right") - np.searchsorted(keys, hashes, "left")
            self.candidates += int(found.sum())
        order = np.argsort(hashes, kind="stable")
        keys = hashes[order]
        _, sizes = np.unique(keys, return_counts=True)
        self.candidates += int((sizes * (sizes - 1) // 2).sum())
        self.runs.append((keys, members[order]))
        while len(self.runs) > 1 and len(self.runs[-2][0]) <= 2 * len(self.runs[-1][0]):
            (a, a_ids), (b, b_ids) = self.runs.pop(), self.runs.pop()
            merged = np.concatenate([b, a])
            order = np.argsort(merged, kind="stable")
            self.runs.append((merged[order], np.concatenate([b_ids, a_ids])[order]))


class _BandsInMemory:
    """A store that keeps the band family in a dict and every other family in RocksDB."""

    def __init__(self, path: Path) -> None:
        self.rocksdb = RocksDBStore(path)
        self.bands: dict[tuple[int, str], bytes] = {}

    def get(self, stage: str, partition: int, key: str) -> bytes | None:
        if stage == "band":
            return self.bands.get((partition, key))
        return self.rocksdb.get(stage, partition, key)

    def get_many(self, stage: str, partition: int, keys: list[str]) -> list[bytes | None]:
        if stage == "band":
            return [self.bands.get((partition, key)) for key in keys]
        return self.rocksdb.get_many(stage, partition, keys)

    def scan(self, stage: str, partition: int, prefix: str) -> list[tuple[str, bytes]]:
        if stage == "band":
            raise NotImplementedError("the engine does not scan the band family")
        return self.rocksdb.scan(stage, partition, prefix)

    def get_meta(self, key: str) -> bytes | None:
        return self.rocksdb.get_meta(key)

    def commit(self, changes: Mapping[tuple[str, int, str], bytes | None], meta: Mapping[str, bytes]) -> None:
        rest = {}
        for (stage, partition, key), value in changes.items():
            if stage != "band":
                rest[stage, partition, key] = value
            elif value is None:
                self.bands.pop((partition, key), None)
            else:
                self.bands[partition, key] = value
        self.rocksdb.commit(rest, meta)

    def close(self) -> None:
        self.rocksdb.close()


def _engine(
    events: list[UpsertEvent], path: Path, params: EngineParams, bands_in_memory: bool = False
) -> None:
    store = _BandsInMemory(path) if bands_in_memory else RocksDBStore(path)
    runner = EmbeddedRunner(Engine(params), store)
    for i in range(0, len(events), BATCH):
        runner.process(events[i : i + BATCH], lambda outputs: None)
    store.close()


def _timed(function: Callable[[], Any]) -> dict[str, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    function()
    return {"cpu_seconds": time.process_time() - cpu, "seconds": time.perf_counter() - wall}


def _bulk(texts: list[str]) -> None:
    from benchmarks.signatures import _bulk as bulk

    for i in range(0, len(texts), 4096):
        bulk(texts[i : i + 4096])


def _peer(root: Path) -> dict[str, float]:
    from benchmarks.streaming import _quix
    from benchmarks.workload import _events

    result = _quix(_events, root)
    chunks = result["chunks"]
    return {
        "cpu_seconds": chunks / (result["processing_chunks_per_cpu_s"] or result["chunks_per_cpu_s"]),
        "seconds": chunks / (result["processing_chunks_per_s"] or result["chunks_per_s"]),
    }


def measure(feed: str, repeat: int, root: Path, peer: bool = False) -> dict[str, Any]:
    """Run the engine, every floor and datasketch ``bulk`` on one feed ``repeat`` times, interleaved (and the Quix
    peer, with ``peer``)."""
    events, texts = FEEDS[feed]()
    params = EngineParams()
    chunks = len(texts)
    names = (
        "engine",
        "engine_bands_in_memory",
        *FLOORS,
        "datasketch_bulk",
        *(("quix_peer",) if peer else ()),
    )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    counts: dict[str, dict[str, int]] = {}
    for attempt in range(repeat):
        engine_path = root / f"{feed}-engine-{attempt}"
        runs["engine"].append(_timed(lambda path=engine_path: _engine(events, path, params)))  # type: ignore[misc]
        engine_path = root / f"{feed}-engine-bands-in-memory-{attempt}"
        runs["engine_bands_in_memory"].append(
            _timed(lambda path=engine_path: _engine(events, path, params, bands_in_memory=True))  # type: ignore[misc]
        )
        for kind in FLOORS:
            floor = _Floor(kind, root / f"{feed}-{kind}-{attempt}", params)
            runs[kind].append(_timed(lambda floor=floor: floor.run(events)))  # type: ignore[misc]
            counts[kind] = {
                "new_texts": floor.new_texts,
                "indexed": floor.indexed,
                "candidates": floor.candidates,
            }
        runs["datasketch_bulk"].append(_timed(lambda: _bulk(texts)))
        if peer:
            runs["quix_peer"].append(_peer(root))
        print(
            f"{feed} run {attempt + 1}: "
            + ", ".join(
                f"{name} {r[-1]['cpu_seconds'] / chunks * 1e6:.0f} us/chunk" for name, r in runs.items()
            )
        )
    best = {name: min(r, key=lambda run: run["cpu_seconds"]) for name, r in runs.items()}
    per_chunk = {name: b["cpu_seconds"] / chunks * 1e6 for name, b in best.items()}
    return {
        "chunks": chunks,
        "documents": len(events),
        "counts": counts,
        "runs": runs,
        "cpu_us_per_chunk": per_chunk,
        "engine_to_floor": {kind: per_chunk["engine"] / per_chunk[kind] for kind in FLOORS},
        "floor_to_bulk": {kind: per_chunk[kind] / per_chunk["datasketch_bulk"] for kind in FLOORS},
        **(
            {"floor_to_peer": {kind: per_chunk[kind] / per_chunk["quix_peer"] for kind in FLOORS}}
            if peer
            else {}
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--feeds", nargs="+", choices=list(FEEDS), default=list(FEEDS))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--peer", action="store_true", help="also run the Quix peer on the streaming feed")
    args = parser.parse_args()
    result: dict[str, Any] = {"batch": BATCH, "repeat": args.repeat, "feeds": {}}
    from benchmarks.workload import start_broker, stop_broker

    started = args.peer and start_broker()
    try:
        with tempfile.TemporaryDirectory(prefix="floor-") as root:
            for feed in args.feeds:
                result["feeds"][feed] = measure(
                    feed, args.repeat, Path(root), args.peer and feed == "streaming"
                )
    finally:
        if started:
            stop_broker()
    save("floor", result)


if __name__ == "__main__":
    main()
