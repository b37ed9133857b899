"""The Kafka commands that read or write the topics: ``produce``, ``tail`` and ``materialize`` (the worker is
:mod:`streamdedup.cli.service`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError
from rich.console import Console
from rich.progress import DownloadColumn

from streamdedup.cli.progress import progress_bar
from streamdedup.contract.codec import EventLimits, decode_event, encode_output_line, event_key, parse_json
from streamdedup.core.messages import Output
from streamdedup.core.output_view import COMPACTED_TOPICS, View
from streamdedup.drivers.jsonl import read_lines
from streamdedup.drivers.kafka.admin import ensure_topics, read_to_end
from streamdedup.drivers.kafka.generations import reader_names
from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES, TopicNames
from streamdedup.errors import InvalidEventError
from streamdedup.settings import Settings

__all__ = [
    "ProduceReport",
    "materialize",
    "materialize_command",
    "produce_command",
    "tail_command",
]

logger = logging.getLogger(__name__)
_KEY_CHARS = 1024  # an invalid line's source_id is its key only when a valid one could be that long


@dataclass
class ProduceReport:
    """What ``produce`` did with the lines of a file."""

    sent: int = 0
    invalid: int = 0  # lines that are not valid events (sent as they are, or skipped)
    skipped: int = 0
    too_large: int = 0  # lines over the topic's message size limit, which Kafka cannot take

    def describe(self, topic: str, broker: str) -> str:
        """Return one line for the user."""
        text = f"sent {self.sent:,} lines to {topic} at {broker}; {self.invalid:,} not valid events"
        if self.skipped:
            text += f" ({self.skipped:,} skipped)"
        elif self.invalid:
            text += " (sent as they are: the worker dead-letters them)"
        if self.too_large:
            text += f"; {self.too_large:,} over {MAX_MESSAGE_BYTES:,} bytes, not sent"
        return text


def _key_of(line: bytes, limits: EventLimits) -> tuple[bytes | None, bool]:
    """Return the Kafka key of a line (its source_id, when it has one) and whether it is a valid event."""
    try:
        return event_key(decode_event(line, limits)).encode("utf-8"), True
    except InvalidEventError:
        pass
    try:
        data = parse_json(line, limits)
    except InvalidEventError:
        return None, False
    source_id = data.get("source_id") if isinstance(data, dict) else None
    if isinstance(source_id, str) and 0 < len(source_id) <= _KEY_CHARS:
        return source_id.encode("utf-8", "surrogatepass"), False
    return None, False


async def _produce(
    settings: Settings, path: Path, skip_invalid: bool, progress: Callable[[int], None]
) -> ProduceReport:
    await ensure_topics(settings)
    topic = TopicNames(settings.topic_prefix).documents
    limits = settings.event_limits()
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        acks="all",
        max_request_size=MAX_MESSAGE_BYTES,
        linger_ms=5,
    )
    await producer.start()
    report = ProduceReport()
    try:
        pending = []
        with path.open("rb") as handle:
            done = 0
            for line, size, cut in read_lines(handle, MAX_MESSAGE_BYTES - 1024):
                done += size
                progress(done)
                if cut:
                    report.invalid += 1
                    report.too_large += 1
                    continue
                if not line.strip():
                    continue
                key, valid = _key_of(line, limits)
                if not valid:
                    report.invalid += 1
                    if skip_invalid:
                        report.skipped += 1
                        continue
                try:
                    pending.append(await producer.send(topic, line, key=key))
                except MessageSizeTooLargeError:  # the line and its key together are over the limit
                    report.too_large += 1
                    continue
                report.sent += 1
                if len(pending) >= 1000:
                    await asyncio.gather(*pending)
                    pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return report


def produce_command(settings: Settings, path: Path, console: Console, *, skip_invalid: bool = False) -> None:
    """Send every line of a JSONL file to the documents topic, keyed by its source_id.

    A line that is not a valid event is sent as it is (the worker dead-letters it, as it would a connector's), or
    skipped with ``skip_invalid``; nothing in the file stops the command.
    """
    with progress_bar(console, DownloadColumn(), label="produce") as progress:
        task = progress.add_task(path.name, total=path.stat().st_size)
        report = asyncio.run(
            _produce(settings, path, skip_invalid, lambda done: progress.update(task, completed=done))
        )
    console.print(report.describe(TopicNames(settings.topic_prefix).documents, settings.broker))


def _show(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value.decode("utf-8", "replace")


async def _tail(settings: Settings, topic: str, follow: bool, limit: int | None) -> None:
    names = await reader_names(settings)
    full = (
        names.output(topic) if not topic.startswith(settings.topic_prefix) and topic != "documents" else topic
    )
    if topic == "documents":
        full = names.documents
    shown = 0
    if not follow:
        async for _, partition, offset, key, value, headers in read_to_end(settings, [full]):
            print(json.dumps(_record(topic, partition, offset, key, value, headers), ensure_ascii=False))
            shown += 1
            if limit is not None and shown >= limit:
                return
        return
    consumer = AIOKafkaConsumer(
        full,
        bootstrap_servers=settings.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        async for record in consumer:
            print(
                json.dumps(
                    _record(
                        topic, record.partition, record.offset, record.key, record.value, list(record.headers)
                    ),
                    ensure_ascii=False,
                ),
                flush=True,
            )
            shown += 1
            if limit is not None and shown >= limit:
                return
    finally:
        await consumer.stop()


def _record(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "topic": topic,
        "key": key.decode("utf-8", "replace") if key is not None else None,
        "value": _show(value),
        "partition": partition,
        "offset": offset,
    }
    if headers:
        record["headers"] = {k: v.decode("utf-8", "replace") for k, v in headers}
    return record


def tail_command(settings: Settings, topic: str, follow: bool, limit: int | None) -> None:
    """Print the records of a topic as JSON lines."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_tail(settings, topic, follow, limit))


async def materialize(settings: Settings) -> View:
    """Read the compacted output topics from the beginning and return the downstream view (of the generation the
    settings name, else of the serving one)."""
    names = await reader_names(settings)
    topics = {names.output(t): t for t in COMPACTED_TOPICS}
    view = View()
    async for topic, _, _, key, value, _ in read_to_end(settings, list(topics)):
        view.apply(
            Output(
                topics[topic],
                key.decode("utf-8") if key is not None else None,
                None if value is None else json.loads(value),
            )
        )
    return view


def materialize_command(settings: Settings, out: str, console: Console) -> None:
    """Write the downstream view (last value per key, tombstones applied) as JSONL output lines."""
    view = asyncio.run(materialize(settings))
    lines = [
        encode_output_line(Output(topic, key, value))
        for topic, table in (("canonical-chunks", view.chunks), ("source-mappings", view.mappings))
        for key, value in sorted(table.items())
    ]
    if out == "-":
        sys.stdout.buffer.write(b"".join(lines))
        sys.stdout.flush()
    else:
        Path(out).write_bytes(b"".join(lines))
        console.print(
            f"wrote {len(view.chunks):,} chunks and {len(view.mappings):,} source mappings to {out}"
        )
