"""Feeding the embedded runner from a JSONL file of input events, and writing its JSONL output."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from streamdedup.codec import dead_letter, decode_event, encode_output_line
from streamdedup.core.messages import Output
from streamdedup.core.model import InputEvent
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.errors import InvalidEventError

__all__ = ["FileSink", "RunReport", "read_events", "run_file"]


@dataclass
class RunReport:
    """What one run over a file did."""

    events: int = 0
    dead_letters: int = 0
    outputs: int = 0


def read_events(path: Path, *, max_bytes: int) -> Iterator[tuple[int, int, InputEvent | Output]]:
    """Yield ``(line number, bytes read so far, event or dead letter)`` for each non-blank line of ``path``."""
    done = 0
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            done += len(line)
            if not line.strip():
                continue
            try:
                yield number, done, decode_event(line, max_bytes=max_bytes)
            except InvalidEventError as exc:
                yield (
                    number,
                    done,
                    dead_letter(line.rstrip(b"\r\n"), exc, {"file": str(path), "line": number}),
                )


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
    max_event_bytes: int,
    progress: Callable[[int], None] = lambda done: None,
) -> RunReport:
    """Run every event of a JSONL file through ``runner`` in batches; report progress in bytes read."""
    report = RunReport()
    events: list[InputEvent] = []
    letters: list[Output] = []

    def flush() -> None:
        outputs = runner.process(events, sink, dead_letters=letters)
        report.events += len(events)
        report.dead_letters += len(letters)
        report.outputs += len(outputs)
        events.clear()
        letters.clear()

    for _, done, item in read_events(path, max_bytes=max_event_bytes):
        if isinstance(item, Output):
            letters.append(item)
        else:
            events.append(item)
        if len(events) + len(letters) >= batch_size:
            flush()
            progress(done)
    if events or letters:
        flush()
    progress(path.stat().st_size)
    return report
