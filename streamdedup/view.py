"""The live view that query-time code reads: the outputs' last value per key, in a local RocksDB, with lookups.

``streamdedup materialize --into DIR`` keeps a view in step with the ``canonical-chunks`` and ``source-mappings``
topics, or with the JSONL output file of an embedded run (``--from FILE``); :class:`View` opens it. Every lookup
is a point read or one short prefix scan:

- :meth:`View.chunk`: the ``canonical-chunks`` value of a chunk id (``streamdedup.chunk/v2``);
- :meth:`View.mapping`: the ``source-mappings`` value of a source;
- :meth:`View.chunks_of`: the chunk ids of a source, in position order;
- :meth:`View.sources_of`: every source of a chunk, complete. A chunk record lists at most
  ``STREAMDEDUP_MAX_CHUNK_SOURCES`` sources; the view indexes the mappings by chunk id, so this answer has them
  all. A source's ``uri``, ``title`` and ``modified_at`` come from the chunk records that list it (the mapping
  carries none of them), and so do its readers (``acl``); a source that no chunk record lists has them as None.

Records and their read position are written in one RocksDB write batch, so a view that stops at any moment
continues where it stopped, and applies no record twice. A reader in another process opens the view as a RocksDB
secondary instance while ``materialize --follow`` writes it, and :meth:`View.refresh` catches up.

Keys, in one column family: ``c\\0<chunk_id>`` and ``m\\0<source_id>`` hold the records as JSON;
``x\\0<chunk_id>\\0<source_id>`` the positions of a source that map to a chunk; ``s\\0<source_id>`` what the
chunk records say of a source; ``p\\0<where>`` how far each input was read.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec
import rocksdict
from watchfiles import watch

from streamdedup.core.view import COMPACTED_TOPICS
from streamdedup.errors import StateError
from streamdedup.retrieval import Citation

__all__ = ["FORMAT", "OutputFile", "View", "ViewWriter", "build_view"]

#: The layout version of a view directory; a view of another layout is refused rather than misread.
FORMAT = b"1"
_FORMAT_KEY = b"p\0format"
_CHUNK = b"c\0"
_MAPPING = b"m\0"
_INDEX = b"x\0"
_SOURCE = b"s\0"
_PROGRESS = b"p\0"
_SEP = b"\0"

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


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


class View:
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
        found: list[Citation] = []
        for key, value in _scan(self._db, prefix):
            source_id = key[len(prefix) :].decode()
            about = self._json(_SOURCE + source_id.encode()) or {}
            found.append(
                Citation(
                    source_id=source_id,
                    positions=tuple(_decoder.decode(value)),
                    uri=about.get("uri"),
                    title=about.get("title"),
                    modified_at=about.get("modified_at"),
                    acl=None if about.get("acl") is None else tuple(about["acl"]),
                )
            )
        return found

    def index_fields(self, chunk_id: str) -> dict[str, Any] | None:
        """Return what an index writer stores for a chunk, so a search engine can collapse and filter by itself.

        ``chunk_id`` is single-valued (collapse or group by it), ``source_ids`` and ``acl`` are multi-valued
        (filter by the caller's principals with a terms query); ``source_ids`` is complete, however many copies
        the text has. None when the chunk is not live.
        """
        value = self.chunk(chunk_id)
        if value is None:
            return None
        return {
            "chunk_id": chunk_id,
            "text": value["text"],
            "content_hash": value["content_hash"],
            "source_ids": [c.source_id for c in self.sources_of(chunk_id)],
            "acl": list(value["acl"]),
        }

    def chunk_ids(self) -> Iterator[str]:
        """Yield the id of every live chunk, in id order."""
        for key, _ in _scan(self._db, _CHUNK):
            yield key[len(_CHUNK) :].decode()

    def source_ids(self) -> Iterator[str]:
        """Yield the id of every live source, in id order."""
        for key, _ in _scan(self._db, _MAPPING):
            yield key[len(_MAPPING) :].decode()

    def progress(self, where: str) -> bytes | None:
        """Return how far the input named ``where`` was read, as its writer recorded it."""
        return self._get(_PROGRESS + where.encode())


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

    def __enter__(self) -> ViewWriter:
        return self

    def apply(self, records: Iterable[tuple[str, str, bytes | None]], progress: Mapping[str, bytes]) -> int:
        """Apply ``(topic, key, value JSON or None)`` records and record ``progress``, all in one write batch.

        Topics other than the compacted ones are skipped. Returns how many records were applied.
        """
        pending: dict[bytes, bytes | None] = {}

        def read(key: bytes) -> bytes | None:
            return pending[key] if key in pending else self._get(key)

        count = 0
        for topic, key, value in records:
            if topic == "canonical-chunks":
                self._apply_chunk(key, value, pending)
            elif topic == "source-mappings":
                self._apply_mapping(key, value, pending, read)
            else:
                continue
            count += 1
        batch = rocksdict.WriteBatch(raw_mode=True)
        for address, change in pending.items():
            if change is None:
                batch.delete(address)
            else:
                batch.put(address, change)
        for where, position in progress.items():
            batch.put(_PROGRESS + where.encode(), position)
        self._db.write(batch)
        self.applied += count
        return count

    @staticmethod
    def _apply_chunk(chunk_id: str, value: bytes | None, pending: dict[bytes, bytes | None]) -> None:
        pending[_CHUNK + chunk_id.encode()] = value
        if value is None:
            return
        for source in _decoder.decode(value).get("sources", ()):
            about = {name: source.get(name) for name in ("uri", "title", "modified_at", "acl")}
            pending[_SOURCE + str(source["source_id"]).encode()] = _encoder.encode(about)

    @staticmethod
    def _apply_mapping(
        source_id: str,
        value: bytes | None,
        pending: dict[bytes, bytes | None],
        read: Callable[[bytes], bytes | None],
    ) -> None:
        key = _MAPPING + source_id.encode()
        tail = _SEP + source_id.encode()
        old = read(key)
        if old is not None:
            for chunk_id in {str(c["chunk_id"]) for c in _decoder.decode(old)["chunks"]}:
                pending[_INDEX + chunk_id.encode() + tail] = None
        pending[key] = value
        if value is None:
            pending[_SOURCE + source_id.encode()] = None
            return
        positions: dict[str, list[int]] = {}
        for chunk in _decoder.decode(value)["chunks"]:
            positions.setdefault(str(chunk["chunk_id"]), []).append(int(chunk["position"]))
        for chunk_id, numbers in positions.items():
            pending[_INDEX + chunk_id.encode() + tail] = _encoder.encode(sorted(numbers))


class OutputFile:
    """An embedded run's JSONL output file as an input of a view: read from where the view stopped.

    The view records the byte offset after the last whole line it applied, with the file's identity; a line still
    being written (no newline yet) waits for the next read. A file that shrank below that offset, or another file
    at the same path, is refused: its records are not the ones the view holds.
    """

    def __init__(self, path: Path, writer: ViewWriter, *, batch_lines: int = 1000) -> None:
        self.path = path
        self.writer = writer
        self.batch_lines = batch_lines
        self._where = f"file:{path.resolve()}"

    def _start(self) -> int:
        stored = self.writer.progress(self._where)
        if stored is None:
            return 0
        mark = json.loads(stored)
        stat = self.path.stat()
        if mark["inode"] != stat.st_ino or stat.st_size < mark["offset"]:
            raise StateError(
                f"{self.path} is not the file this view was read from (replaced or truncated); "
                "materialize it into an empty directory"
            )
        return int(mark["offset"])

    def catch_up(self, on_batch: Callable[[int], None] | None = None) -> int:
        """Apply every whole line written since the last read; return how many records were applied."""
        if not self.path.exists():
            raise StateError(f"no such output file: {self.path}")
        offset = self._start()
        inode = self.path.stat().st_ino
        total = 0
        with self.path.open("rb") as handle:
            handle.seek(offset)
            while True:
                records: list[tuple[str, str, bytes | None]] = []
                while len(records) < self.batch_lines:
                    line = handle.readline()
                    if not line.endswith(b"\n"):
                        break
                    offset += len(line)
                    if line.strip():
                        records.append(_record(line, self.path, offset))
                if not records:
                    return total
                mark = json.dumps({"inode": inode, "offset": offset}).encode()
                total += self.writer.apply(records, {self._where: mark})
                if on_batch is not None:
                    on_batch(total)
                handle.seek(offset)

    def follow(self, stop: threading.Event, on_batch: Callable[[int], None] | None = None) -> None:
        """Catch up, then keep applying what the run appends until ``stop`` is set."""
        self.catch_up(on_batch)
        for _ in watch(self.path, stop_event=stop, rust_timeout=500, yield_on_timeout=True, debounce=50):
            self.catch_up(on_batch)


def _record(line: bytes, path: Path, end: int) -> tuple[str, str, bytes | None]:
    try:
        item = _decoder.decode(line)
        topic, key, value = item["topic"], item["key"], item["value"]
    except (msgspec.DecodeError, KeyError, TypeError) as exc:
        raise StateError(f"{path}: the line ending at byte {end} is not an output line: {exc}") from exc
    if topic in COMPACTED_TOPICS and not isinstance(key, str):
        raise StateError(f"{path}: the {topic} record ending at byte {end} has no key")
    return str(topic), str(key), None if value is None else _encoder.encode(value)


def build_view(outputs: str | Path, into: str | Path) -> View:
    """Materialize an embedded run's output file into the directory ``into`` and return it opened for reading."""
    with ViewWriter(into) as writer:
        OutputFile(Path(outputs), writer).catch_up()
    return View.open(into)
