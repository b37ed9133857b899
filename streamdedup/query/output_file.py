"""An embedded run's JSONL output file as the input of a live view (:mod:`streamdedup.query.live_view`).

:class:`OutputFile` applies the file's records to a :class:`~streamdedup.query.live_view.ViewWriter` (or to a
program that keeps one, an :class:`Applier`) from where it stopped, and follows what the run appends;
:func:`build_view` materializes a whole file into a new view.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import msgspec
from watchfiles import watch

from streamdedup.core.output_view import COMPACTED_TOPICS
from streamdedup.errors import StateError
from streamdedup.query.live_view import Record, View, ViewWriter

__all__ = ["Applier", "OutputFile", "build_view"]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class Applier(Protocol):
    """What :class:`OutputFile` applies records to: a :class:`ViewWriter`, or a program that keeps one."""

    def progress(self, where: str) -> bytes | None:
        """Return how far the input named ``where`` was applied."""
        ...

    def apply(self, records: list[Record], progress: dict[str, bytes]) -> object:
        """Apply records and record how far each input was read, atomically."""
        ...


class OutputFile:
    """An embedded run's JSONL output file as an input of a view: read from where the view stopped.

    The view records the byte offset after the last whole line it applied, with the file's identity; a line still
    being written (no newline yet) waits for the next read. A file that shrank below that offset, or another file
    at the same path, is refused: its records are not the ones the view holds. ``writer`` is a
    :class:`ViewWriter`, or anything that applies records with their position as it does (an index writer).
    """

    def __init__(self, path: Path, writer: Applier, *, batch_lines: int = 1000) -> None:
        self.path = path
        self.writer = writer
        self.batch_lines = batch_lines
        self._where = f"file:{path.resolve()}"

    def position(self) -> int:
        """Return the byte offset up to which the file has been applied (0 before the first read)."""
        stored = self.writer.progress(self._where)
        return 0 if stored is None else int(json.loads(stored)["offset"])

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
                records: list[Record] = []
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
                self.writer.apply(records, {self._where: mark})
                total += sum(topic in COMPACTED_TOPICS for topic, _, _ in records)
                if on_batch is not None:
                    on_batch(total)
                handle.seek(offset)

    def follow(self, stop: threading.Event, on_batch: Callable[[int], None] | None = None) -> None:
        """Catch up, then keep applying what the run appends until ``stop`` is set."""
        self.catch_up(on_batch)
        for _ in watch(self.path, stop_event=stop, rust_timeout=500, yield_on_timeout=True, debounce=50):
            self.catch_up(on_batch)


def _record(line: bytes, path: Path, end: int) -> Record:
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
