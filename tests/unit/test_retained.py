"""The retained record (streamdedup.core.retained): the source stage keeps, in its state, the events that rebuild the
engine from nothing, under any parameters.

A rebuild from the record gives the view of a run of the whole history under the new parameters; and events
applied again after the record (a new generation takes live events from a cut no later than what the record
holds) change nothing that a run of the history would not.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdedup.core.engine import Engine
from streamdedup.core.model import AclEvent, DeleteEvent, InputEvent, UpsertEvent
from streamdedup.core.params import EngineParams
from streamdedup.core.retained import RETAINED_PREFIX, retained_events
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.store.memory import MemoryStore
from streamdedup.testing.random_feeds import ParagraphPool, random_feed, with_decisions
from tests.helpers import run_embedded, upsert

#: Parameters a new generation may choose: the defaults, a higher threshold, shorter shingles, other chunking.
GENERATIONS = (
    EngineParams(),
    EngineParams(threshold=0.85),
    EngineParams(shingle_size=3),
    EngineParams(shingle_size=4, num_perm=64, threshold=0.7),
)


def retained(engine: Engine, events: list[InputEvent]) -> list[InputEvent]:
    """Run ``events`` in one embedded runner and return the retained record its source stage holds."""
    store = MemoryStore()
    runner = EmbeddedRunner(engine, store)
    runner.process(list(events), lambda outputs: None)
    return list(retained_events(store.scan("source", 0, RETAINED_PREFIX)))


def feed_of(seed: int) -> list[InputEvent]:
    rng = random.Random(seed)
    pool = ParagraphPool(rng, families=3)
    return with_decisions(rng, random_feed(rng, sources=7, events=50, pool=pool), pool, count=10)


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("new", GENERATIONS, ids=["same", "threshold", "shingles", "all"])
def test_a_rebuild_from_the_record_is_a_run_of_the_history_under_the_new_parameters(seed, new):
    feed = feed_of(seed)
    record = retained(Engine(EngineParams()), feed)
    engine = Engine(new)
    rebuilt = run_embedded(engine, record, batch=7)
    assert rebuilt.compacted(with_revision=False) == run_embedded(engine, feed).compacted(with_revision=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    cut=st.floats(0.0, 1.0),
    overlap=st.floats(0.0, 1.0),
    order=st.randoms(use_true_random=False),
)
def test_events_after_a_cut_applied_again_on_the_record_change_nothing_a_run_would_not(
    seed, cut, overlap, order
):
    """The record holds at least the events before a cut (and maybe some after); the new generation then takes every
    event from a point at or before what the record holds. The record's events may arrive in any order."""
    feed = feed_of(seed)
    held = int(len(feed) * cut)  # the record reflects feed[:held]
    start = int(held * overlap)  # the live events the new generation takes: feed[start:]
    record = retained(Engine(EngineParams()), feed[:held])
    order.shuffle(record)
    engine = Engine(EngineParams(threshold=0.85, shingle_size=4))
    rebuilt = run_embedded(engine, record + feed[start:], batch=5)
    assert rebuilt.compacted(with_revision=False) == run_embedded(engine, feed).compacted(with_revision=False)


def test_the_record_holds_the_latest_state_of_each_source_and_nothing_of_what_was_replaced():
    engine = Engine(EngineParams())
    events: list[InputEvent] = [
        upsert("a", 1, ["first text of a"]),
        upsert("a", 2, ["second text of a"], acl=("team",)),
        AclEvent(source_id="a", version=4, acl=("other",)),
        upsert("a", 3, ["an older version arriving late"]),
        upsert("b", 1, ["text of b"]),
        DeleteEvent(source_id="b", version=2),
        AclEvent(source_id="c", version=5, acl=("x",)),  # never upserted: only its version is kept
    ]
    record = {e.source_id: e for e in retained(engine, events)}
    a = record["a"]
    assert isinstance(a, UpsertEvent)
    assert (a.version, a.chunks, a.attrs.acl) == (4, ("second text of a",), ("other",))
    assert record["b"] == DeleteEvent(source_id="b", version=2)
    assert record["c"] == DeleteEvent(source_id="c", version=5)


def test_a_replayed_older_upsert_does_not_bring_a_deleted_source_back_in_the_new_generation():
    engine = Engine(EngineParams())
    old = upsert("a", 1, ["the text of a, a paragraph"])
    record = retained(engine, [old, DeleteEvent(source_id="a", version=2)])
    engine = Engine(EngineParams(threshold=0.9))
    view = run_embedded(engine, [*record, old])
    assert view.compacted(with_revision=False) == run_embedded(engine, []).compacted(with_revision=False)
    assert b'"a"' not in view.compacted(with_revision=False)
