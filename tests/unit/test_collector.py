"""The garbage collector is paused while a batch runs, and resumes as it was."""

import gc
import weakref

import pytest

from streamdedup.core.engine import Engine
from streamdedup.core.params import EngineParams
from streamdedup.drivers.collector import BatchCollector, collector_paused
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.store.memory import MemoryStore
from tests.helpers import upsert


def test_the_collector_resumes_after_the_block_even_when_it_raises():
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def test_a_frozen_block_leaves_what_it_made_out_of_the_collectors_reach():
    gc.unfreeze()  # what earlier embedded batches froze
    assert gc.get_freeze_count() == 0
    try:
        with collector_paused(freeze=True):
            assert not gc.isenabled()
            kept = [[] for _ in range(1000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(kept)
        walked = {id(o) for generation in range(3) for o in gc.get_objects(generation=generation)}
        assert not walked & {id(o) for o in kept}
    finally:
        gc.unfreeze()


def test_an_embedded_batch_runs_its_handlers_with_the_collector_paused(monkeypatch):
    engine = Engine(EngineParams())
    seen = []
    handle = engine.handle

    def observed(stage, messages, state):
        seen.append(gc.isenabled())
        return handle(stage, messages, state)

    monkeypatch.setattr(engine, "handle", observed)
    EmbeddedRunner(engine, MemoryStore()).process([upsert("s", 1, ["a text of a few words"])], lambda _: None)
    assert seen and not any(seen)
    assert gc.isenabled()


class _Node:
    """An object that can be part of a reference cycle, and be watched with a weak reference."""

    other: object = None


def test_batches_freeze_what_they_leave_and_every_few_batches_thaw_it_so_cycles_are_still_collected():
    gc.unfreeze()
    collector = BatchCollector(thaw_every=3)
    try:
        with collector.batch():
            assert not gc.isenabled()
            node = _Node()
            node.other = node  # a cycle, alive only through itself once ``node`` goes
            watched = weakref.ref(node)
            kept = [[] for _ in range(1000)]
        del node
        assert gc.isenabled()
        walked = {id(o) for generation in range(3) for o in gc.get_objects(generation=generation)}
        assert not walked & {id(o) for o in kept}  # out of the collector's reach
        gc.collect()
        assert watched() is not None  # frozen: not collected yet
        with collector.batch():
            pass
        assert gc.get_freeze_count() > 0
        with collector.batch():  # the third batch thaws
            pass
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert watched() is None
    finally:
        gc.unfreeze()


def test_an_embedded_runner_freezes_what_its_batches_leave():
    gc.unfreeze()
    runner = EmbeddedRunner(Engine(EngineParams()), MemoryStore())
    try:
        outputs = runner.process([upsert("s", 1, ["a text of a few words"])], lambda _: None)
        assert outputs and gc.get_freeze_count() > 0
        walked = {id(o) for generation in range(3) for o in gc.get_objects(generation=generation)}
        assert id(outputs) not in walked
    finally:
        gc.unfreeze()
