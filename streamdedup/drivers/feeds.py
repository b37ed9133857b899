"""Feeds of the embedded runner: one protocol for every source of input events, and the one loop that batches them.

A :class:`Feed` yields :class:`FeedItem` objects: an input event or, for input that is not a valid event, its
dead letter, with where it came from and how far along the feed it is. :func:`run_feed` takes them in batches of
``batch_size`` (fewer once they hold ``batch_chars`` characters of text), runs each batch through the runner
(which hands the outputs to the sink, then commits the state with the feed's own position) and reports progress.
A JSONL file (:class:`~streamdedup.drivers.jsonl.JsonlFeed`) and a folder
(:class:`~streamdedup.drivers.folder.FolderFeed`) are feeds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from streamdedup.core.messages import Output
from streamdedup.core.model import InputEvent, UpsertEvent
from streamdedup.drivers.embedded import Origin, Runner, Sink

__all__ = ["Feed", "FeedItem", "RunReport", "cut_batches", "run_feed", "text_chars"]


class FeedItem(NamedTuple):
    """One input of a feed: its event or dead letter, where it came from, and the progress once it is consumed."""

    item: InputEvent | Output
    origin: Origin
    done: int
    key: Any = None  # the feed's own bookkeeping for this item


class Feed(Protocol):
    """A source of input events for the embedded runner."""

    def open(self) -> tuple[int, Iterator[FeedItem]]:
        """Return the total progress units (bytes, files, ...) and the items to feed."""
        ...

    def consumed(self, items: Sequence[FeedItem]) -> dict[str, bytes]:
        """Note that ``items`` are about to be committed; return metadata to commit with them (the position)."""
        ...


@dataclass
class RunReport:
    """What one run over a feed did: events applied, inputs dead-lettered, output records written."""

    events: int = 0
    dead_letters: int = 0
    outputs: int = 0

    def add(self, applied: int, outputs: list[Output]) -> None:
        """Count a batch the runner processed: ``applied`` events and its outputs (dead letters among them)."""
        self.events += applied
        self.dead_letters += sum(1 for output in outputs if output.topic == "dlq")
        self.outputs += len(outputs)


def text_chars(item: InputEvent | Output) -> int:
    """Return the characters of document text ``item`` brings (its text, or its chunks); 0 for anything else."""
    if not isinstance(item, UpsertEvent):
        return 0
    if item.text is not None:
        return len(item.text)
    return sum(map(len, item.chunks or ()))


def cut_batches(
    items: Iterable[FeedItem], batch_size: int, batch_chars: int | None = None
) -> Iterator[list[FeedItem]]:
    """Yield ``items`` in batches of ``batch_size``, closing one earlier once its events hold ``batch_chars``.

    ``batch_chars`` (if given) counts characters of document text (:func:`text_chars`), so that a feed of large
    documents does not make one batch hold more than that in memory. ``run`` and ``calibrate`` cut feeds alike.
    """
    batch: list[FeedItem] = []
    chars = 0
    for item in items:
        batch.append(item)
        if batch_chars is not None:
            chars += text_chars(item.item)
        if len(batch) >= batch_size or (batch_chars is not None and chars >= batch_chars):
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def run_feed(
    runner: Runner,
    feed: Feed,
    sink: Sink,
    *,
    batch_size: int,
    batch_chars: int | None = None,
    report: RunReport | None = None,
    start: Callable[[int], None] = lambda total: None,
    progress: Callable[[int], None] = lambda done: None,
) -> RunReport:
    """Run every item of ``feed`` through ``runner`` in batches; ``start`` gets the total, ``progress`` the done.

    Batches are cut as :func:`cut_batches` cuts them. Every item is either applied or dead-lettered, never both and
    never neither, whatever it holds.
    """
    report = report if report is not None else RunReport()
    total, items = feed.open()
    start(total)
    for batch in cut_batches(items, batch_size, batch_chars):
        events = [i.item for i in batch if not isinstance(i.item, Output)]
        origins = [i.origin for i in batch if not isinstance(i.item, Output)]
        letters = [i.item for i in batch if isinstance(i.item, Output)]
        meta = feed.consumed(batch)
        outputs = runner.process(events, sink, dead_letters=letters, meta=meta, origins=origins)
        report.add(runner.last_applied, outputs)
        progress(batch[-1].done)
    progress(total)
    return report
