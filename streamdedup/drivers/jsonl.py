"""A JSONL file of input events as a feed of the embedded runner, and the runner's JSONL output."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from streamdedup.contract.codec import (
    DEFAULT_LIMITS,
    EventLimits,
    dead_letter,
    decode_event,
    encode_output_lines,
)
from streamdedup.convert import ConversionError
from streamdedup.convert.events import converted_in_order
from streamdedup.convert.pool import Converter
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.model import InputEvent, UpsertEvent
from streamdedup.drivers.embedded import EmbeddedRunner, Origin, Runner
from streamdedup.drivers.feeds import FeedItem
from streamdedup.errors import ConfigurationError, InvalidEventError, StateError
from streamdedup.settings import Settings
from streamdedup.store.rocksdb import RocksDBStore, record_cache, shard_count

__all__ = ["SINK_META_KEY", "FileSink", "JsonlFeed", "Line", "opened_state", "read_events", "read_lines"]

logger = logging.getLogger(__name__)


class Line(NamedTuple):
    """One non-blank line of a file: its number, the bytes read up to its end, and its event or dead letter."""

    number: int
    done: int
    item: InputEvent | Output
    origin: Origin


def read_lines(handle: BinaryIO, max_bytes: int) -> Iterator[tuple[bytes, int, bool]]:
    """Yield each line without its end, its length in the file, and whether it was cut at ``max_bytes`` + 2.

    A line is never held whole beyond the limit, so one huge line cannot exhaust memory.
    """
    while True:
        line = handle.readline(max_bytes + 2)
        if not line:
            return
        size, cut = len(line), len(line) == max_bytes + 2 and not line.endswith(b"\n")
        while cut:
            rest = handle.readline(1 << 20)
            size += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        yield line.rstrip(b"\r\n"), size, cut


def read_events(
    path: Path,
    limits: EventLimits = DEFAULT_LIMITS,
    decode: Callable[[bytes], InputEvent | None] | None = None,
) -> Iterator[Line]:
    """Yield a :class:`Line` for each non-blank line of ``path``; nothing in the file makes this raise.

    ``decode`` reads a line in another input format than the contract's (a feed's change events); a line it maps
    to nothing (a tombstone) yields no line.
    """
    done = 0
    with path.open("rb") as handle:
        for number, (line, size, cut) in enumerate(read_lines(handle, limits.bytes), start=1):
            done += size
            if not cut and not line.strip():
                continue
            where: dict[str, Any] = {"file": str(path), "line": number}
            if cut:
                error = InvalidEventError(f"line of {size} bytes exceeds the limit of {limits.bytes} bytes")
                where["truncated_to"] = len(line)
                yield Line(number, done, dead_letter(line, error, where), Origin(line, where))
                continue
            item: InputEvent | Output | None
            try:
                item = decode_event(line, limits) if decode is None else decode(line)
            except InvalidEventError as exc:
                item = dead_letter(line, exc, where)
            if item is None:
                continue
            yield Line(number, done, item, Origin(line, where))


#: State metadata: the size of the output file once a batch's outputs were written, and the file's path, committed
#: with the batch's state.
SINK_META_KEY = "embedded-output-file"
#: Outputs encoded into one buffer and written at a time. A batch's outputs at once made one buffer of the whole
#: batch's lines (140 MB for each batch of the five Django releases' folder), its pages new to the process each time;
#: a few MB at a time, the allocator reuses the same memory.
OUTPUTS_PER_WRITE = 2048


class FileSink:
    """Append output lines to a file (or standard output for ``-``), durable before the state commits.

    Each batch's state commits with the file's size after its outputs. A run that stops between the two (killed,
    the machine lost) leaves outputs of a batch its state does not hold: :meth:`roll_back` cuts them off before the
    next run appends. Applied again, the batch might not make them again: the input may have changed meanwhile, or
    be cut into other batches, and a chunk the lost batch wrote could then stay in the file for good. Standard
    output cannot be cut; a consumer of it sees such a batch's outputs, and what the next run makes instead.
    """

    def __init__(self, target: str) -> None:
        self._stdout = target == "-"
        self._path = "" if self._stdout else os.path.abspath(target)
        self._handle: BinaryIO = (
            os.fdopen(os.dup(1), "ab") if self._stdout else open(target, "ab")  # noqa: SIM115
        )

    def __call__(self, outputs: list[Output]) -> dict[str, bytes] | None:
        """Write ``outputs`` and make them durable; return the metadata to commit with the batch's state."""
        for start in range(0, len(outputs), OUTPUTS_PER_WRITE):
            self._handle.write(encode_output_lines(outputs[start : start + OUTPUTS_PER_WRITE]))
        self._handle.flush()
        if self._stdout:
            return None
        os.fsync(self._handle.fileno())
        return {SINK_META_KEY: f"{self._handle.tell()}\n{self._path}".encode()}

    @staticmethod
    def roll_back(target: str, committed: bytes | None) -> int:
        """Cut the output file ``target`` back to the size the state committed with it; return the bytes cut."""
        if target == "-" or committed is None:
            return 0
        size_text, _, path = committed.decode().partition("\n")
        if path != os.path.abspath(target) or not os.path.exists(path):
            return 0  # another file than the one the state wrote to
        extra = os.path.getsize(path) - int(size_text)
        if extra <= 0:
            return 0
        with open(path, "r+b") as handle:
            handle.truncate(int(size_text))
            handle.flush()
            os.fsync(handle.fileno())
        return extra

    def close(self) -> None:
        """Close the file."""
        self._handle.close()


class JsonlFeed:
    """A JSONL file of input events as a feed (progress in bytes read); with ``decode``, of a feed's change
    events, one record value per line (:mod:`streamdedup.contract.cdc`)."""

    def __init__(
        self,
        path: Path,
        limits: EventLimits = DEFAULT_LIMITS,
        decode: Callable[[bytes], InputEvent | None] | None = None,
        converter: Converter | None = None,
    ) -> None:
        self.path, self.limits, self.decode = path, limits, decode
        self.converter = converter or Converter()

    def open(self) -> tuple[int, Iterator[FeedItem]]:
        """Return the file's size and an item per non-blank line; an upsert of a document's bytes is converted
        to text (:mod:`streamdedup.convert`), several at once, and stays in its place."""
        lines = converted_in_order(
            read_events(self.path, self.limits, self.decode),
            lambda line: line.item,
            _with_result,
            self.converter,
            self.limits.bytes,
        )
        return self.path.stat().st_size, (FeedItem(line.item, line.origin, line.done) for line in lines)

    def consumed(self, items: Sequence[FeedItem]) -> dict[str, bytes]:
        """A file has no position kept in the state: a new run reads it from the start."""
        return {}


def _with_result(line: Line, result: UpsertEvent | ConversionError) -> Line:
    """The line with its converted upsert, or with the dead letter of its conversion's error."""
    if isinstance(result, ConversionError):
        return Line(
            line.number,
            line.done,
            dead_letter(line.origin.raw or b"", result, line.origin.where),
            line.origin,
        )
    return Line(line.number, line.done, result, line.origin)


def _open_runner(settings: Settings, state: Path) -> tuple[Runner, Callable[[], None]]:
    """Return the runner of an embedded run on ``state`` and what closes it.

    With ``settings.workers`` above one, the run's partitions go to that many worker processes
    (:mod:`streamdedup.drivers.parallel`).
    """
    if settings.workers > 1:
        from streamdedup.drivers.parallel import ParallelRunner  # noqa: PLC0415 - a run in one process needs none

        parallel = ParallelRunner(
            settings.engine_params(),
            state,
            workers=settings.workers,
            **settings.engine_options(),
            state_cache_mb=settings.state_cache_mb,
        )
        return parallel, parallel.close
    workers = shard_count(state)
    if workers:
        raise StateError(
            f"the state at {state} is spread over {workers} worker processes; run it with --workers {workers}"
        )
    store = RocksDBStore(state, records=record_cache(settings.state_cache_mb))
    try:
        engine = Engine(settings.engine_params(), **settings.engine_options())
        return EmbeddedRunner(engine, store, where=str(state)), store.close
    except BaseException:
        store.close()
        raise


@contextmanager
def opened_state(settings: Settings, state: Path, out: str) -> Iterator[tuple[Runner, FileSink]]:
    """Open the state of an embedded run and its output file (appended to), and close both after use."""
    runner, close = _open_runner(settings, state)
    sink: FileSink | None = None
    try:
        if runner.counters.events == 0 and out != "-" and Path(out).exists() and Path(out).stat().st_size:
            raise ConfigurationError(
                f"{out} already holds outputs, but the state at {state} is new: appending would mix two "
                "histories in one file; remove it or choose another --out"
            )
        cut = FileSink.roll_back(out, runner.store.get_meta(SINK_META_KEY))
        if cut:
            logger.warning(
                "%s ended in %d bytes of outputs of a batch whose state was not committed (the last run stopped "
                "in between); they were removed, and the batch is applied again",
                out,
                cut,
            )
        sink = FileSink(out)
        yield runner, sink
    finally:
        if sink is not None:
            sink.close()
        close()
