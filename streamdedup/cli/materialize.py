"""``streamdedup materialize --into DIR``: keep a local view (:mod:`~streamdedup.query.live_view`) in step with the
outputs.

The outputs are the ``canonical-chunks`` and ``source-mappings`` topics of a deployment, or an embedded run's JSONL
output file (``--from FILE``). Without ``--follow`` the command stops once it has applied everything that was
there when it started; with it, it keeps applying new records until interrupted. Either way a batch of records
and the position it was read to are one write, so the next start continues exactly where this one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from rich.console import Console

from streamdedup.core.output_view import COMPACTED_TOPICS
from streamdedup.drivers.kafka.admin import partitions_of, start_reader
from streamdedup.drivers.kafka.generations import reader_names
from streamdedup.query.live_view import ViewWriter
from streamdedup.query.output_file import Applier, OutputFile
from streamdedup.settings import Settings

__all__ = ["materialize_into_command", "materialize_topics", "read_file", "stopping"]

_POLL_MS = 500


def materialize_into_command(
    settings: Settings, into: Path, source: Path | None, follow: bool, console: Console
) -> None:
    """Bring the view in ``into`` up to date with ``source`` (a file) or the deployment's topics."""
    with ViewWriter(into) as writer:
        with console.status("materializing") as status:

            def shown(total: int) -> None:
                status.update(f"materializing: {total:,} records applied")

            if source is not None:
                read_file(OutputFile(source, writer), follow, shown, console, into)
            else:
                asyncio.run(materialize_topics(settings, writer, follow=follow, on_batch=shown))
        console.print(f"view in {into}: {writer.applied:,} records applied this run")


def read_file(
    reader: OutputFile, follow: bool, on_batch: Callable[[int], None], console: Console, into: object
) -> None:
    """Apply what an output file holds; with ``follow``, keep applying what is appended until interrupted."""
    if not follow:
        reader.catch_up(on_batch)
        return
    stop = threading.Event()
    with stopping(stop.set):
        console.print(f"following {reader.path} into {into} (Ctrl-C to stop)")
        reader.follow(stop, on_batch)


@contextlib.contextmanager
def stopping(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on SIGTERM or Ctrl-C instead of raising, so the last batch is written whole."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop())
    try:
        yield None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def materialize_topics(
    settings: Settings,
    writer: Applier,
    *,
    follow: bool = False,
    on_batch: Callable[[int], None] | None = None,
    stop: asyncio.Event | None = None,
    topics: Sequence[str] = COMPACTED_TOPICS,
) -> None:
    """Apply the deployment's compacted output topics (or the output ``topics`` named) to ``writer``.

    Each input continues from where it stopped.

    Without ``follow``, return once every partition is read to the end it had at the start. With it, keep going
    until ``stop`` is set (or SIGTERM / Ctrl-C), and pick up the topics once they exist.
    """
    names = await reader_names(settings)
    by_name = {names.output(t): t for t in topics}
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    partitions = await _partitions_to_read(settings, by_name, follow, stop)
    if not partitions or stop.is_set():
        return

    consumer = await start_reader(settings)
    try:
        consumer.assign(partitions)
        where = {tp: f"kafka:{tp.topic}:{tp.partition}" for tp in partitions}
        for tp in partitions:
            stored = writer.progress(where[tp])
            if stored is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, int(stored))
        ends = await consumer.end_offsets(partitions)
        remaining = {tp for tp in partitions if await consumer.position(tp) < ends[tp]}
        applied = 0
        while not stop.is_set() and (follow or remaining):
            batches = await consumer.getmany(timeout_ms=_POLL_MS, max_records=settings.fetch_records)
            count = await _apply_fetched(writer, batches, by_name, where)
            if count is not None:
                applied += count
                if on_batch is not None:
                    on_batch(applied)
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def _partitions_to_read(
    settings: Settings, by_name: dict[str, str], follow: bool, stop: asyncio.Event
) -> list[TopicPartition]:
    """Return the partitions of the topics ``by_name`` names; when following, wait until every topic exists (or
    ``stop`` is set)."""
    found = await partitions_of(settings, by_name)
    while follow and len(found) < len(by_name) and not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        found = await partitions_of(settings, by_name)
    return [TopicPartition(topic, p) for topic, parts in sorted(found.items()) for p in parts]


async def _apply_fetched(
    writer: Applier,
    batches: dict[TopicPartition, list[Any]],
    by_name: dict[str, str],
    where: dict[TopicPartition, str],
) -> int | None:
    """Apply fetched records with how far each partition was read; return how many records had a key (and were
    applied), or None if nothing was fetched."""
    records: list[tuple[str, str, bytes | None]] = []
    progress: dict[str, bytes] = {}
    for tp, received in batches.items():
        for record in received:
            if record.key is not None:
                records.append((by_name[tp.topic], record.key.decode("utf-8"), record.value))
            progress[where[tp]] = str(record.offset + 1).encode()
    if not progress:
        return None
    done = writer.apply(records, progress)
    if inspect.isawaitable(done):
        await done
    return len(records)
