"""How run_feed cuts a feed into batches: at ``batch_size`` items, or earlier at ``batch_chars`` characters of text."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.model import DeleteEvent, InputEvent, SourceAttrs, UpsertEvent
from streamdedup.core.output_view import View
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner, Origin, Sink
from streamdedup.drivers.feeds import FeedItem, run_feed, text_chars
from streamdedup.store.memory import MemoryStore
from tests.helpers import upsert

WORDS = "the quick brown fox jumps over the lazy dog while seven wizards quietly hex a jovial bard".split()


class _Recording(EmbeddedRunner):
    """An embedded runner that records how many events each batch held."""

    def __init__(self) -> None:
        super().__init__(Engine(EngineParams()), MemoryStore())
        self.batches: list[int] = []

    def process(self, events: Sequence[InputEvent], sink: Sink, **kwargs: Any) -> list[Output]:
        self.batches.append(len(events))
        return super().process(events, sink, **kwargs)


class _ListFeed:
    """A feed of the given events, its progress counted in events."""

    def __init__(self, events: Sequence[InputEvent]) -> None:
        self.events = events

    def open(self) -> tuple[int, Iterator[FeedItem]]:
        items = (FeedItem(e, Origin(None, {"index": i}), i + 1) for i, e in enumerate(self.events))
        return len(self.events), items

    def consumed(self, items: Sequence[FeedItem]) -> dict[str, bytes]:
        return {}


def _text(n: int, words: int, version: int = 1) -> UpsertEvent:
    text = " ".join(WORDS[(n + i) % len(WORDS)] for i in range(words)) + f" number {n}"
    attrs = SourceAttrs(acl=("*",), modified_at=version)
    return UpsertEvent(source_id=f"s{n}", version=version, attrs=attrs, text=text)


def test_text_chars_counts_the_text_or_the_chunks_of_an_upsert_and_nothing_else() -> None:
    assert text_chars(_text(0, 3)) == len(_text(0, 3).text or "")
    assert text_chars(upsert("a", 1, ["abc", "de"])) == 5
    assert text_chars(DeleteEvent(source_id="a", version=2)) == 0
    assert text_chars(Output("dlq", None, {"error": "bad line"})) == 0


def test_a_batch_closes_at_batch_size_items() -> None:
    runner = _Recording()
    report = run_feed(
        runner, _ListFeed([_text(n, 20) for n in range(10)]), lambda outputs: None, batch_size=4
    )
    assert runner.batches == [4, 4, 2]
    assert report.events == 10


def test_a_batch_closes_early_once_its_events_hold_batch_chars_characters_of_text() -> None:
    events = [_text(n, 20) for n in range(9)]
    size = text_chars(events[0])
    runner = _Recording()
    # Each event brings about ``size`` characters: a batch closes with the event that reaches 2.5 of them.
    report = run_feed(
        runner, _ListFeed(events), lambda outputs: None, batch_size=100, batch_chars=int(size * 2.5)
    )
    assert runner.batches == [3, 3, 3]
    assert report.events == 9
    # One event larger than the bound makes a batch of its own: nothing is split or held back.
    runner = _Recording()
    run_feed(runner, _ListFeed(events[:4]), lambda outputs: None, batch_size=100, batch_chars=1)
    assert runner.batches == [1, 1, 1, 1]


@pytest.mark.parametrize(("batch_size", "batch_chars"), [(1, None), (3, None), (100, 200), (2, 50)])
def test_how_a_feed_is_cut_changes_none_of_the_view(batch_size: int, batch_chars: int | None) -> None:
    # Six sources, each updated more than once with other texts, and copies of one another's texts.
    events = [_text(n % 6, 12 + n % 5, version=n) for n in range(14)]
    views = []
    for size, chars in ((100, None), (batch_size, batch_chars)):
        outputs: list[Output] = []
        run_feed(_Recording(), _ListFeed(events), outputs.extend, batch_size=size, batch_chars=chars)
        view = View().apply_all(outputs)
        assert len(view.mappings) == 6 and view.chunks
        views.append(view.compacted(with_revision=False))
    assert views[0] == views[1]
