"""Upserts that carry a document's bytes (``data``), turned into upserts of its text, in the order they came.

Every driver converts at its edge, before the engine: ``run`` as it reads a JSONL file or a folder, the worker as it
ingests the documents topic (so the source stage's topic holds the text, and a call replayed after a crash reads
the same text again). A document that cannot be converted becomes a dead letter naming the reason.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import msgspec

from streamdedup.contract.codec import encode_event
from streamdedup.convert import ConversionError, Converted
from streamdedup.convert.pool import Converter
from streamdedup.core.model import InputEvent, UpsertEvent

__all__ = ["carries_data", "converted_all", "converted_in_order", "with_text"]

T = TypeVar("T")


def carries_data(item: object) -> bool:
    """Whether an input item is an upsert of a document's bytes, which must be converted first."""
    return isinstance(item, UpsertEvent) and item.data is not None


def with_text(event: UpsertEvent, converted: Converted, max_bytes: int) -> UpsertEvent:
    """The upsert of the converted text; what the conversion found goes to ``metadata["conversion"]``.

    The upsert is held to the event bound, as the event that carried the file was: a zipped file can unpack to a
    hundred times its size, and the upsert goes on to the source stage's topic in one message.
    """
    attrs = event.attrs
    if converted.metadata:
        attrs = msgspec.structs.replace(
            attrs, metadata={**(attrs.metadata or {}), "conversion": converted.metadata}
        )
    upsert = msgspec.structs.replace(
        event, text=converted.text, data=None, content_type=converted.content_type, attrs=attrs
    )
    size = len(encode_event(upsert))
    if size > max_bytes:
        raise ConversionError(
            f"the converted text makes an event of {size:,} bytes, over the event bound of {max_bytes:,}"
            " (STREAMDEDUP_MAX_EVENT_BYTES)"
        )
    return upsert


def converted_in_order(
    items: Iterable[T],
    event_of: Callable[[T], Any],
    replace: Callable[[T, UpsertEvent | ConversionError], T],
    converter: Converter,
    max_bytes: int,
    window: int = 8,
) -> Iterator[T]:
    """Yield ``items`` in order, each upsert of bytes (``event_of(item)``) replaced by ``replace(item, upsert of
    its text or the error)``; up to ``window`` conversions run at once."""
    pending: deque[tuple[T, Future[Any] | None]] = deque()

    def finish(item: T, future: Future[Any] | None) -> T:
        if future is None:
            return item
        event = event_of(item)
        try:
            return replace(item, with_text(event, converter.result(future), max_bytes))
        except ConversionError as exc:
            return replace(item, exc)

    for item in items:
        event = event_of(item)
        future = converter.submit(event.data, event.content_type) if carries_data(event) else None
        pending.append((item, future))
        while pending and (len(pending) > window or pending[0][1] is None or pending[0][1].done()):
            yield finish(*pending.popleft())
    while pending:
        yield finish(*pending.popleft())


async def converted_all(
    converter: Converter, items: Sequence[tuple[T, InputEvent]], max_bytes: int
) -> list[tuple[T, InputEvent | ConversionError]]:
    """The events with each upsert of a document's bytes converted to text, all at once in the converter's
    processes (the event loop keeps running), in their order; an error where one could not be."""

    async def convert(event: InputEvent) -> InputEvent | ConversionError:
        if not isinstance(event, UpsertEvent) or event.data is None:
            return event
        try:
            return with_text(event, await converter.convert_async(event.data, event.content_type), max_bytes)
        except ConversionError as exc:
            return exc
        except Exception as exc:  # whatever else: this document's dead letter, never the caller's crash
            return ConversionError(f"the conversion failed ({type(exc).__name__}: {exc})")

    results = await asyncio.gather(*(convert(event) for _, event in items))
    return [(item, result) for (item, _), result in zip(items, results, strict=True)]
