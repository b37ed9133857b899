"""The live view that query-time code reads: the outputs' last value per key, in a local RocksDB, with lookups.

``streamdedup materialize --into DIR`` keeps a view in step with the ``canonical-chunks`` and ``source-mappings``
topics, or with the JSONL output file of an embedded run (``--from FILE``); :class:`View` opens it. Every lookup
is a point read or one short prefix scan:

- :meth:`View.chunk`: the ``canonical-chunks`` value of a chunk id (``streamdedup.chunk/v2``);
- :meth:`View.mapping`: the ``source-mappings`` value of a source;
- :meth:`View.chunks_of`: the chunk ids of a source, in position order;
- :meth:`View.sources_of`: every source of a chunk, complete. A chunk record lists at most
  ``STREAMDEDUP_MAX_CHUNK_SOURCES`` sources; the view indexes the mappings by chunk id, so this answer has them
  all. A source's readers (``acl``), ``uri``, ``title`` and ``modified_at`` come from its mapping
  (``streamdedup.mapping/v2``), so they too are known for every source; a ``mapping/v1`` record, written before
  mappings carried them, leaves them to the chunk records that list the source (None where none does).

Records and their read position are written in one RocksDB write batch, so a view that stops at any moment
continues where it stopped, and applies no record twice. A reader in another process opens the view as a RocksDB
secondary instance while ``materialize --follow`` writes it, and :meth:`View.refresh` catches up.

Writing is in two phases, for a program that keeps something else in step with the view (an index writer):
:meth:`ViewWriter.stage` computes a batch's changes without writing them and returns them as :class:`Pending`,
whose lookups answer as the view will once they are committed; :meth:`ViewWriter.commit` writes them with the read
position (and the program's own *extras*) in one write batch. :meth:`ViewWriter.apply` does both at once.

Reviewers' decisions about pairs come from ``audit`` records of action ``decision`` (when the input has them: an
output file does; read from topics, ``audit`` is read only if asked for): :meth:`View.decision`.

Keys, in one column family: ``c\\0<chunk_id>`` and ``m\\0<source_id>`` hold the records as JSON;
``x\\0<chunk_id>\\0<source_id>`` the positions of a source that map to a chunk; ``a\\0<source_id>`` what the
source's mapping says of it (:func:`~streamdedup.query.safety_net.mapped_about`), ``s\\0<source_id>`` what the
chunk records say of it; ``d\\0<hash_a>:<hash_b>`` the decision in force about a pair; ``p\\0<where>`` how far
each input was read; ``e\\0<name>`` the extras.
"""

from __future__ import annotations

import bisect
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import msgspec
import rocksdict

from streamdedup.errors import StateError
from streamdedup.query.outdated import outdated_by
from streamdedup.query.safety_net import MAPPED_FIELDS, Citation, mapped_about

__all__ = ["FORMAT", "Pending", "Record", "View", "ViewWriter"]

#: The layout version of a view directory; a view of another layout is refused rather than misread.
FORMAT = b"1"
_FORMAT_KEY = b"p\0format"
_CHUNK = b"c\0"
_MAPPING = b"m\0"
_INDEX = b"x\0"
_MAPPED = b"a\0"
_SOURCE = b"s\0"
_PROGRESS = b"p\0"
_DECISION = b"d\0"
_EXTRA = b"e\0"
_SEP = b"\0"

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

#: An output record as a view applies it: ``(topic, key, value JSON or None)``.
Record = tuple[str, str, bytes | None]


def _options() -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_compression_type(rocksdict.DBCompressionType.lz4())
    options.set_bottommost_compression_type(rocksdict.DBCompressionType.zstd())
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(10, False)
    options.set_block_based_table_factory(table)
    return options


def _scan(db: rocksdict.Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    cursor = db.iter()
    cursor.seek(prefix)
    while cursor.valid():
        key = bytes(cursor.key())
        if not key.startswith(prefix):
            return
        yield key, bytes(cursor.value())
        cursor.next()


class _Lookups:
    """The lookups of a view, over point reads and prefix scans that a subclass provides."""

    def _get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def _prefixed(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    def _get_many(self, keys: list[bytes]) -> list[bytes | None]:
        raise NotImplementedError

    def _json(self, key: bytes) -> dict[str, Any] | None:
        raw = self._get(key)
        if raw is None:
            return None
        value: dict[str, Any] = _decoder.decode(raw)
        return value

    def chunk(self, chunk_id: str) -> dict[str, Any] | None:
        """Return the ``canonical-chunks`` value of ``chunk_id``, or None when there is no such live chunk."""
        return self._json(_CHUNK + chunk_id.encode())

    def mapping(self, source_id: str) -> dict[str, Any] | None:
        """Return the ``source-mappings`` value of ``source_id``, or None when the source is not live."""
        return self._json(_MAPPING + source_id.encode())

    def chunks_of(self, source_id: str) -> list[str]:
        """Return the chunk ids of a source's positions, in position order, each once."""
        mapping = self.mapping(source_id)
        if mapping is None:
            return []
        ordered = sorted(mapping["chunks"], key=lambda c: int(c["position"]))
        return list(dict.fromkeys(str(c["chunk_id"]) for c in ordered))

    def sources_of(self, chunk_id: str) -> list[Citation]:
        """Return every source with a position mapped to ``chunk_id``, sorted by source id."""
        prefix = _INDEX + chunk_id.encode() + _SEP
        entries = [(key[len(prefix) :], value) for key, value in self._prefixed(prefix)]
        # One multi-get, however many sources; a second one only for sources whose mapping is a v1 record.
        abouts: list[dict[str, Any]] = [
            {} if raw is None else _decoder.decode(raw)
            for raw in self._get_many([_MAPPED + source for source, _ in entries])
        ]
        partial = [n for n, about in enumerate(abouts) if len(about) < len(MAPPED_FIELDS)]
        listed = self._get_many([_SOURCE + entries[n][0] for n in partial])
        for n, raw in zip(partial, listed, strict=True):
            said: dict[str, Any] = {} if raw is None else _decoder.decode(raw)
            abouts[n] = {**{name: said.get(name) for name in MAPPED_FIELDS}, **abouts[n]}
        return [
            Citation.of(source.decode(), _decoder.decode(value), about)
            for (source, value), about in zip(entries, abouts, strict=True)
        ]

    def decision(self, pair_key: str) -> dict[str, Any] | None:
        """Return the reviewers' decision in force about a pair (its ``review`` key), as the decision event."""
        return self._json(_DECISION + pair_key.encode())

    def index_fields(self, chunk_id: str) -> dict[str, Any] | None:
        """Return what an index writer stores for a chunk, so a search engine can collapse and filter by itself.

        ``chunk_id`` is single-valued (collapse or group by it), ``source_ids`` and ``acl`` are multi-valued
        (filter by the caller's principals with a terms query); ``source_ids`` is complete, however many copies
        the text has. A chunk only outdated versions of a document hold also has ``"current": False`` and
        ``outdated_by`` (absent: current, as in its record), to filter out with ``current_only``. None when the
        chunk is not live.
        """
        value = self.chunk(chunk_id)
        if value is None:
            return None
        fields = {
            "chunk_id": chunk_id,
            "text": value["text"],
            "content_hash": value["content_hash"],
            "source_ids": [c.source_id for c in self.sources_of(chunk_id)],
            "acl": list(value["acl"]),
        }
        newest = outdated_by(value)
        if newest is not None:
            fields.update(current=False, outdated_by=newest)
        return fields

    def chunk_ids(self) -> Iterator[str]:
        """Yield the id of every live chunk, in id order."""
        for key, _ in self._prefixed(_CHUNK):
            yield key[len(_CHUNK) :].decode()

    def source_ids(self) -> Iterator[str]:
        """Yield the id of every live source, in id order."""
        for key, _ in self._prefixed(_MAPPING):
            yield key[len(_MAPPING) :].decode()


class View(_Lookups):
    """A materialized view directory, opened for reading (or for writing by :class:`ViewWriter`).

    A reader is a RocksDB secondary instance: it does not lock the directory, so it can be opened while
    ``materialize --follow`` writes it; :meth:`refresh` makes it see what was written since.
    """

    def __init__(self, directory: str | Path, *, _db: rocksdict.Rdict | None = None) -> None:
        self.directory = Path(directory)
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        if _db is not None:
            self._db = _db
        else:
            if not (self.directory / "db" / "CURRENT").exists():
                raise StateError(
                    f"{self.directory} holds no view; write one with 'streamdedup materialize --into {directory}'"
                )
            self._scratch = tempfile.TemporaryDirectory(prefix="streamdedup-view-")
            try:
                self._db = rocksdict.Rdict(
                    str(self.directory / "db"),
                    options=_options(),
                    access_type=rocksdict.AccessType.secondary(self._scratch.name),
                )
            except Exception as exc:
                self._scratch.cleanup()
                raise StateError(f"cannot open the view at {self.directory}: {exc}") from exc
        found = self._db.get(_FORMAT_KEY)
        if found is not None and bytes(found) != FORMAT:
            self.close()
            raise StateError(
                f"the view at {self.directory} has layout {bytes(found).decode()!r}, not {FORMAT.decode()!r}; "
                "write it again into an empty directory"
            )

    @classmethod
    def open(cls, directory: str | Path) -> View:
        """Open the view in ``directory`` for reading."""
        return cls(directory)

    def __enter__(self) -> View:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def refresh(self) -> None:
        """See what the writer committed since this view was opened or last refreshed."""
        if self._scratch is not None:
            self._db.try_catch_up_with_primary()

    def close(self) -> None:
        """Release the database."""
        if self._db is not None:
            self._db.close()
            self._db = None  # type: ignore[assignment]
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    def _get(self, key: bytes) -> bytes | None:
        value = self._db.get(key)
        return None if value is None else bytes(value)

    def _prefixed(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return _scan(self._db, prefix)

    def _get_many(self, keys: list[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        found = self._db.get(cast("list[str | int | float | bytes | bool]", keys)) or []
        return [None if value is None else bytes(value) for value in found]

    def progress(self, where: str) -> bytes | None:
        """Return how far the input named ``where`` was read, as its writer recorded it."""
        return self._get(_PROGRESS + where.encode())

    def extra(self, name: str) -> bytes | None:
        """Return the extra named ``name`` that the view's writer stored with it, or None."""
        return self._get(_EXTRA + name.encode())

    def extras(self, names: Sequence[str]) -> list[bytes | None]:
        """Return the extras named ``names``, in order (None for a missing one), with one multi-get."""
        return self._get_many([_EXTRA + name.encode() for name in names])

    def extra_names(self, prefix: str) -> list[str]:
        """Return the names of the extras that start with ``prefix``, in order."""
        start = len(_EXTRA)
        return [key[start:].decode() for key, _ in self._prefixed(_EXTRA + prefix.encode())]


class Pending(_Lookups):
    """A batch's changes to a view, staged by :meth:`ViewWriter.stage` and not yet written.

    Its lookups answer as the view will once the changes are committed. ``chunks_touched`` holds every chunk id
    whose record or sources the batch may have changed: the key of each ``canonical-chunks`` record, and every
    chunk id that a ``source-mappings`` record names in its value or that the source's previous mapping named.
    ``sources_touched`` holds the key of each ``source-mappings`` record. ``count`` is the number of records
    staged (records of other topics are skipped and not counted).
    """

    def __init__(self, base: ViewWriter, generation: int) -> None:
        self._base = base
        self._generation = generation
        self._changes: dict[bytes, bytes | None] = {}
        self._sorted: list[bytes] | None = None
        self.chunks_touched: set[str] = set()
        self.sources_touched: set[str] = set()
        self.count = 0

    def _get(self, key: bytes) -> bytes | None:
        if key in self._changes:
            return self._changes[key]
        return self._base._get(key)

    def _get_many(self, keys: list[bytes]) -> list[bytes | None]:
        unknown = [key for key in keys if key not in self._changes]
        found = dict(zip(unknown, self._base._get_many(unknown), strict=True))
        return [self._changes[key] if key in self._changes else found[key] for key in keys]

    def _prefixed(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        if self._sorted is None:
            self._sorted = sorted(self._changes)
        start = bisect.bisect_left(self._sorted, prefix)
        changed: dict[bytes, bytes | None] = {}
        for key in self._sorted[start:]:
            if not key.startswith(prefix):
                break
            changed[key] = self._changes[key]
        if not changed:
            return self._base._prefixed(prefix)
        merged = {key: value for key, value in self._base._prefixed(prefix) if key not in changed}
        merged.update((key, value) for key, value in changed.items() if value is not None)
        return iter(sorted(merged.items()))

    def _stage(self, records: Iterable[Record]) -> None:
        for topic, key, value in records:
            if topic == "canonical-chunks":
                self._stage_chunk(key, value)
            elif topic == "source-mappings":
                self._stage_mapping(key, value)
            else:
                if topic == "audit" and value is not None:
                    self._stage_decision(value)
                continue
            self.count += 1

    def _stage_decision(self, value: bytes) -> None:
        record = _decoder.decode(value)
        decision = record.get("decision") if record.get("action") == "decision" else None
        if not isinstance(decision, dict) or "pair" not in decision:
            return
        key = _DECISION + str(record.get("subject", "")).encode()
        held = self._get(key)
        if held is None or _decoder.decode(held)["version"] < decision["version"]:
            self._changes[key] = _encoder.encode(decision)

    def _stage_chunk(self, chunk_id: str, value: bytes | None) -> None:
        self._changes[_CHUNK + chunk_id.encode()] = value
        self.chunks_touched.add(chunk_id)
        if value is None:
            return
        for source in _decoder.decode(value).get("sources", ()):
            about = {name: source.get(name) for name in ("uri", "title", "modified_at", "acl")}
            self._changes[_SOURCE + str(source["source_id"]).encode()] = _encoder.encode(about)

    def _stage_mapping(self, source_id: str, value: bytes | None) -> None:
        key = _MAPPING + source_id.encode()
        tail = _SEP + source_id.encode()
        self.sources_touched.add(source_id)
        old = self._get(key)
        if old is not None:
            for chunk_id in {str(c["chunk_id"]) for c in _decoder.decode(old)["chunks"]}:
                self._changes[_INDEX + chunk_id.encode() + tail] = None
                self.chunks_touched.add(chunk_id)
        self._changes[key] = value
        if value is None:
            self._changes[_SOURCE + source_id.encode()] = None
            self._changes[_MAPPED + source_id.encode()] = None
            return
        mapping = _decoder.decode(value)
        about = mapped_about(mapping)
        self._changes[_MAPPED + source_id.encode()] = _encoder.encode(about) if about else None
        positions: dict[str, list[int]] = {}
        for chunk in mapping["chunks"]:
            positions.setdefault(str(chunk["chunk_id"]), []).append(int(chunk["position"]))
        for chunk_id, numbers in positions.items():
            self._changes[_INDEX + chunk_id.encode() + tail] = _encoder.encode(sorted(numbers))
            self.chunks_touched.add(chunk_id)


class ViewWriter(View):
    """The one writer of a view directory: applies output records with their read position atomically."""

    def __init__(self, directory: str | Path) -> None:
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            db = rocksdict.Rdict(str(directory / "db"), options=_options())
        except Exception as exc:
            raise StateError(f"cannot open the view at {directory} for writing: {exc}") from exc
        super().__init__(directory, _db=db)
        if db.get(_FORMAT_KEY) is None:
            db.put(_FORMAT_KEY, FORMAT)
        self.applied = 0
        self._generation = 0

    def __enter__(self) -> ViewWriter:
        return self

    def apply(self, records: Iterable[Record], progress: Mapping[str, bytes]) -> int:
        """Apply ``(topic, key, value JSON or None)`` records and record ``progress``, all in one write batch.

        Topics other than the compacted ones are skipped. Returns how many records were applied.
        """
        return self.commit(self.stage(records), progress)

    def stage(self, records: Iterable[Record]) -> Pending:
        """Compute what ``(topic, key, value JSON or None)`` records change, without writing anything.

        Records are staged in order, each over the ones before it. Topics other than the compacted ones are
        skipped.
        """
        pending = Pending(self, self._generation)
        pending._stage(records)
        return pending

    def commit(
        self,
        pending: Pending,
        progress: Mapping[str, bytes],
        *,
        extras: Mapping[str, bytes | None] | None = None,
    ) -> int:
        """Write staged changes, ``progress`` and ``extras`` (None deletes one) in one write batch; return how many
        records it applied.

        A batch staged before another commit was computed over a view that has changed since, and is refused.
        """
        if pending._base is not self or pending._generation != self._generation:
            raise StateError("these changes were staged over an earlier state of the view; stage them again")
        batch = rocksdict.WriteBatch(raw_mode=True)
        for address, change in pending._changes.items():
            if change is None:
                batch.delete(address)
            else:
                batch.put(address, change)
        for where, position in progress.items():
            batch.put(_PROGRESS + where.encode(), position)
        for name, value in (extras or {}).items():
            if value is None:
                batch.delete(_EXTRA + name.encode())
            else:
                batch.put(_EXTRA + name.encode(), value)
        self._db.write(batch)
        self._generation += 1
        self.applied += pending.count
        return pending.count

    def put_extras(self, extras: Mapping[str, bytes]) -> None:
        """Store extras at once, in one write batch of their own (records and positions are not touched)."""
        if not extras:
            return
        batch = rocksdict.WriteBatch(raw_mode=True)
        for name, value in extras.items():
            batch.put(_EXTRA + name.encode(), value)
        self._db.write(batch)
