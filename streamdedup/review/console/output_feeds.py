"""Where the console's fold of the outputs comes from: an embedded run's output file, or the output topics.

:class:`OutputFileFeed` reads the whole lines appended to the file since its last read, each time a page asks
(``streamdedup run`` and the console's own decisions append to it); a file that was replaced or truncated is read
again from its start. :class:`TopicFeed` reads the output topics of a deployment from their start and then keeps
following them, in the background, for as long as the console runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from pathlib import Path

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from streamdedup.core.messages import Output
from streamdedup.drivers.kafka.admin import partitions_of, start_reader
from streamdedup.drivers.kafka.generations import reader_names
from streamdedup.drivers.kafka.topics import TopicNames
from streamdedup.errors import StreamDedupError
from streamdedup.review.console.data import ConsoleData, output_of_line
from streamdedup.settings import Settings

__all__ = ["CONSOLE_TOPICS", "OutputFileFeed", "TopicFeed"]

logger = logging.getLogger(__name__)

#: The output topics the console folds.
CONSOLE_TOPICS = ("canonical-chunks", "review", "audit")
_POLL_MS = 500
_RETRY_SECONDS = 2.0


class OutputFileFeed:
    """The fold of an embedded run's output file, brought up to date by :meth:`refresh`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = ConsoleData()
        self.skipped = 0  # lines that were not output records
        self._offset = 0
        self._inode: int | None = None
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        """What the console reads, in words."""
        return f"output file {self.path}"

    @property
    def problem(self) -> str | None:
        """Why the outputs cannot be shown, or None."""
        return None if self.path.exists() else f"no output file at {self.path} yet"

    def refresh(self) -> ConsoleData:
        """Apply the whole lines written since the last call and return the fold."""
        with self._lock:
            if not self.path.exists():
                return self.data
            stat = self.path.stat()
            if self._inode is not None and (stat.st_ino != self._inode or stat.st_size < self._offset):
                logger.info("%s was replaced or truncated; reading it again from the start", self.path)
                self.data, self._offset, self.skipped = ConsoleData(), 0, 0
            self._inode = stat.st_ino
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                for line in handle:
                    if not line.endswith(b"\n"):
                        break  # still being written: the next refresh reads it whole
                    self._offset += len(line)
                    if not line.strip():
                        continue
                    try:
                        self.data.apply(output_of_line(json.loads(line)))
                    except (ValueError, KeyError, TypeError):
                        self.skipped += 1
            return self.data


class TopicFeed:
    """The fold of a deployment's output topics, kept up to date by :meth:`follow` in the background."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.data = ConsoleData()
        self.caught_up = False
        self.error: str | None = None
        self.skipped = 0  # records that were not JSON objects
        names = TopicNames(settings.topic_prefix)
        self._topics = {names.output(topic): topic for topic in CONSOLE_TOPICS}

    @property
    def where(self) -> str:
        """What the console reads, in words."""
        return f"the output topics at {self.settings.broker} (prefix {self.settings.topic_prefix!r})"

    @property
    def problem(self) -> str | None:
        """Why the outputs cannot be shown (yet), or None."""
        if self.error is not None:
            return self.error
        return None if self.caught_up else "still reading the output topics from their start"

    def refresh(self) -> ConsoleData:
        """Return the fold (the background task keeps it up to date)."""
        return self.data

    async def follow(self, stop: asyncio.Event) -> None:
        """Read the output topics from their start until ``stop`` is set; retry while the broker is away."""
        while not stop.is_set():
            try:
                await self._read(stop)
            except (KafkaError, StreamDedupError) as exc:
                self.error = f"cannot read the output topics: {exc}"
                logger.warning("%s", self.error)
                self.data, self.caught_up = ConsoleData(), False  # the next attempt reads from the start
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=_RETRY_SECONDS)

    async def _read(self, stop: asyncio.Event) -> None:
        names = await reader_names(self.settings)  # the serving generation's topics (docs/generations.md)
        self._topics = {names.output(topic): topic for topic in CONSOLE_TOPICS}
        found = await partitions_of(self.settings, self._topics)
        while len(found) < len(self._topics) and not stop.is_set():
            self.error = "the output topics do not exist yet (no worker has run)"
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=_RETRY_SECONDS)
            found = await partitions_of(self.settings, self._topics)
        self.error = None
        partitions = [TopicPartition(topic, p) for topic, parts in sorted(found.items()) for p in parts]
        if stop.is_set():
            return
        consumer = await start_reader(self.settings)
        try:
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(partitions)
            remaining = {tp for tp in partitions if ends[tp] > 0}
            self.caught_up = not remaining
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=_POLL_MS, max_records=self.settings.fetch_records)
                for tp, records in batches.items():
                    for record in records:
                        try:
                            value = None if record.value is None else json.loads(record.value)
                            key = None if record.key is None else record.key.decode("utf-8")
                        except ValueError:  # UnicodeDecodeError is one
                            self.skipped += 1
                            continue
                        if value is None or isinstance(value, dict):
                            self.data.apply(Output(self._topics[tp.topic], key, value))
                        else:
                            self.skipped += 1
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
                self.caught_up = not remaining
        finally:
            await consumer.stop()
