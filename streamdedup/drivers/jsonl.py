"""Feeding the embedded runner from a JSONL file of input events, and writing its JSONL output."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from streamdedup.codec import DEFAULT_LIMITS, EventLimits, dead_letter, decode_event, encode_output_line
from streamdedup.core.messages import Output
from streamdedup.core.model import InputEvent
from streamdedup.drivers.embedded import EmbeddedRunner, Origin
from streamdedup.errors import InvalidEventError

__all__ = ["FileSink", "Line", "RunReport", "read_events", "read_lines", "run_file"]


@dataclass
class RunReport:
    """What one run over a file did: events applied, inputs dead-lettered, output records written."""

    events: int = 0
    dead_letters: int = 0
    outputs: int = 0

    def add(self, applied: int, outputs: list[Output]) -> None:
        """Count a batch the runner processed: ``applied`` events and its outputs (dead letters among them)."""
        self.events += applied
        self.dead_letters += sum(1 for output in outputs if output.topic == "dlq")
        self.outputs += len(outputs)


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


def read_events(path: Path, limits: EventLimits = DEFAULT_LIMITS) -> Iterator[Line]:
    """Yield a :class:`Line` for each non-blank line of ``path``; nothing in the file makes this raise."""
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
            try:
                item: InputEvent | Output = decode_event(line, limits)
            except InvalidEventError as exc:
                item = dead_letter(line, exc, where)
            yield Line(number, done, item, Origin(line, where))


class FileSink:
    """Append output lines to a file (or standard output for ``-``), durable before the state commits."""

    def __init__(self, target: str) -> None:
        self._stdout = target == "-"
        self._handle: BinaryIO = (
            os.fdopen(os.dup(1), "ab") if self._stdout else open(target, "ab")  # noqa: SIM115
        )

    def __call__(self, outputs: list[Output]) -> None:
        """Write ``outputs`` and make them durable."""
        self._handle.write(b"".join(encode_output_line(o) for o in outputs))
        self._handle.flush()
        if not self._stdout:
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        """Close the file."""
        self._handle.close()


def run_file(
    runner: EmbeddedRunner,
    path: Path,
    sink: Callable[[list[Output]], None],
    *,
    batch_size: int,
    limits: EventLimits = DEFAULT_LIMITS,
    progress: Callable[[int], None] = lambda done: None,
) -> RunReport:
    """Run every event of a JSONL file through ``runner`` in batches; report progress in bytes read.

    Every non-blank line is either applied or dead-lettered, never both and never neither, whatever it holds.
    """
    report = RunReport()
    events: list[InputEvent] = []
    origins: list[Origin] = []
    letters: list[Output] = []

    def flush() -> None:
        outputs = runner.process(events, sink, dead_letters=letters, origins=origins)
        report.add(runner.last_applied, outputs)
        events.clear()
        origins.clear()
        letters.clear()

    for line in read_events(path, limits):
        if isinstance(line.item, Output):
            letters.append(line.item)
        else:
            events.append(line.item)
            origins.append(line.origin)
        if len(events) + len(letters) >= batch_size:
            flush()
            progress(line.done)
    if events or letters:
        flush()
    progress(path.stat().st_size)
    return report
