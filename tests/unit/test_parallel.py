"""The parallel embedded driver: the engine's partitions in worker processes reach the state one process reaches,
deterministically, across restarts and crashes between the steps of a commit, and a failing event is isolated."""

import random

import pytest

from streamdedup.contract.codec import encode_output_line
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output, router, split
from streamdedup.core.output_view import View
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner, run_to_quiescence
from streamdedup.drivers.jsonl import opened_state
from streamdedup.drivers.parallel import ParallelRunner
from streamdedup.errors import StateError
from streamdedup.settings import Settings
from streamdedup.store.base import Transaction
from streamdedup.store.memory import MemoryStore
from streamdedup.store.rocksdb import RocksDBStore, read_only, shard_count
from streamdedup.testing.invariants import check_invariants
from streamdedup.testing.random_feeds import random_feed
from streamdedup.testing.reference import Reference, live_sources

PARAMS = EngineParams()


def _run(runner, events, batch):
    produced: list[Output] = []
    for start in range(0, len(events), batch):
        runner.process(events[start : start + batch], produced.extend)
    return produced


def _parallel(state, events, *, workers=2, batch=8, fault_source_id=None):
    runner = ParallelRunner(PARAMS, state, workers=workers, fault_source_id=fault_source_id)
    try:
        return _run(runner, events, batch), runner.counters
    finally:
        runner.close()


def _single(events, *, batch=8, fault_source_id=None):
    runner = EmbeddedRunner(Engine(PARAMS, fault_source_id=fault_source_id), MemoryStore())
    return _run(runner, events, batch), runner.counters


def test_the_router_sends_every_message_where_split_does():
    events = random_feed(random.Random(31), sources=8, events=60)
    seen = []
    engine = Engine(PARAMS)
    handle = engine.handle

    def spy(stage, messages, state):
        produced = handle(stage, messages, state)
        seen.extend(m for m in produced if not isinstance(m, Output))
        return produced

    engine.handle = spy
    run_to_quiescence(engine, Transaction(MemoryStore()), events)
    assert {type(m).__name__ for m in seen} >= {"SourceRefs", "SourceStatuses", "BandJoin", "BandAck"}
    for partitions in (1, 2, 3, 7):
        destinations = router(partitions)
        assert [destinations(m) for m in seen + events] == [split(m, partitions) for m in seen + events]


@pytest.mark.parametrize(("seed", "workers"), [(32, 2), (32, 3), (38, 2), (39, 4)])
def test_workers_reach_the_state_and_totals_one_process_reaches(tmp_path, seed, workers):
    events = random_feed(random.Random(seed), sources=10, events=90)
    produced, counters = _parallel(tmp_path / "state", events, workers=workers)
    expected, single = _single(events)
    view = View().apply_all(produced)
    live = live_sources(events)
    assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
    assert view.compacted(with_revision=False) == Reference(Engine(PARAMS), live).compacted()
    alone = View().apply_all(expected)
    assert view.compacted(with_revision=False) == alone.compacted(with_revision=False)
    # Flags are counted as they are raised, which depends on how the work interleaves, as it does on batch sizes
    # in one process.
    assert {**counters.__dict__, "flags": {}} == {**single.__dict__, "flags": {}}
    assert shard_count(tmp_path / "state") == workers


def test_the_same_input_and_workers_give_byte_identical_output(tmp_path):
    events = random_feed(random.Random(33), sources=8, events=60)
    runs = [b"".join(encode_output_line(o) for o in _parallel(tmp_path / name, events)[0]) for name in "ab"]
    assert runs[0] == runs[1] and runs[0]


def test_a_restart_continues_from_the_stored_state(tmp_path):
    events = random_feed(random.Random(34), sources=8, events=80)
    produced = []
    for part in (events[:30], events[30:55], events[55:]):
        produced += _parallel(tmp_path / "state", part, batch=4)[0]
    again, counters = _parallel(tmp_path / "state", events, batch=10)  # replayed input changes nothing
    assert again == []
    live = live_sources(events)
    view = View().apply_all(produced)
    assert view.compacted(with_revision=False) == Reference(Engine(PARAMS), live).compacted()
    assert counters.events == 2 * len(events)
    assert counters.positions == sum(len(s.texts) for s in live.values())
    assert counters.chunks == len(view.chunks)


class _Crash(Exception):
    pass


def _half_run(tmp_path, seed):
    """A feed of 48 events, and a run with two workers that has committed the first 24 as one batch."""
    events = random_feed(random.Random(seed), sources=6, events=48)
    state = tmp_path / "state"
    runner = ParallelRunner(PARAMS, state, workers=2)
    return events, state, runner, _run(runner, events[:24], batch=24)


@pytest.mark.parametrize("step", ["prepare", "apply"])
def test_a_crash_between_the_steps_of_a_commit_leaves_all_or_none_of_the_batch(tmp_path, monkeypatch, step):
    # After "prepare" and before the decision, the batch is in no store yet: it is dropped and runs again. After
    # the decision and before "apply", it is the run's: the workers apply what they prepared when they reopen.
    events, state, runner, produced = _half_run(tmp_path, 35)
    send_all = ParallelRunner._all

    def crashing(self, command, argument=None):
        if command == step and step == "apply":
            raise _Crash  # the decision is committed; no worker applied the batch
        send_all(self, command, argument)
        if command == step:
            raise _Crash  # every worker prepared; no decision

    monkeypatch.setattr(ParallelRunner, "_all", crashing)
    with pytest.raises(_Crash):
        runner.process(events[24:], produced.extend)
    monkeypatch.setattr(ParallelRunner, "_all", send_all)
    runner.close()  # the workers stop as a killed run's would: what they prepared stays in its file
    assert all((state / f"shard-{w}" / "prepared").exists() for w in range(2))

    runner = ParallelRunner(PARAMS, state, workers=2)
    assert not any((state / f"shard-{w}" / "prepared").exists() for w in range(2))
    rest = _run(runner, events[24:], batch=24)
    runner.close()
    if step == "apply":
        assert rest == []  # the batch was committed: its events are old news
    live = live_sources(events)
    view = View().apply_all(produced + rest)
    assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
    assert view.compacted(with_revision=False) == Reference(Engine(PARAMS), live).compacted()
    # The run's totals, kept with the decision, agree with the workers' state.
    assert runner.counters.positions == sum(len(s.texts) for s in live.values())
    assert runner.counters.chunks == len(view.chunks)


def test_an_event_that_fails_in_a_worker_is_dead_lettered_and_the_rest_applied(tmp_path):
    events = random_feed(random.Random(36), sources=6, events=40)
    marked = events[5].source_id
    produced, counters = _parallel(tmp_path / "state", events, batch=10, fault_source_id=marked)
    expected, single = _single(events, batch=10, fault_source_id=marked)
    letters = [o.value for o in produced if o.topic == "dlq"]
    assert letters and letters == [o.value for o in expected if o.topic == "dlq"]
    assert all(letter["error"].startswith("processing failed (InjectedFault: ") for letter in letters)
    assert View().apply_all(produced).compacted(with_revision=False) == View().apply_all(expected).compacted(
        with_revision=False
    )
    assert counters == single


def test_a_state_opens_only_with_the_number_of_workers_that_wrote_it(tmp_path):
    events = random_feed(random.Random(37), sources=4, events=10)
    _parallel(tmp_path / "spread", events)
    with pytest.raises(StateError, match="spread over 2 workers; run it with --workers 2"):
        ParallelRunner(PARAMS, tmp_path / "spread", workers=3)
    with (
        pytest.raises(StateError, match="run it with --workers 2"),
        opened_state(Settings(), tmp_path / "spread", str(tmp_path / "out.jsonl")),
    ):
        pass
    with (
        pytest.raises(StateError, match="spread over 2 worker stores"),
        read_only(tmp_path / "spread", ("content",)),
    ):
        pass
    store = RocksDBStore(tmp_path / "single")
    store.close()
    with pytest.raises(StateError, match="written by a run in one process"):
        ParallelRunner(PARAMS, tmp_path / "single", workers=2)


def test_a_worker_that_cannot_open_its_state_stops_the_run_with_a_clear_error(tmp_path):
    state = tmp_path / "state"
    (state / "shard-0").mkdir(parents=True)
    (state / "shard-1").mkdir()
    (state / "shard-1" / "db").write_text("not a database")
    with pytest.raises(StateError, match="worker 1"):
        ParallelRunner(PARAMS, state, workers=2)


def test_a_worker_killed_after_the_decision_applies_its_batch_when_the_run_reopens(tmp_path, monkeypatch):
    events, state, runner, produced = _half_run(tmp_path, 40)
    send_all = ParallelRunner._all

    def kill_before_apply(self, command, argument=None):
        if command == "apply":
            self._processes[1].kill()  # worker 0 applies the batch; worker 1 dies with it prepared
            self._processes[1].wait()
        send_all(self, command, argument)

    monkeypatch.setattr(ParallelRunner, "_all", kill_before_apply)
    with pytest.raises(StateError, match="worker 1 stopped unexpectedly"):
        runner.process(events[24:], produced.extend)
    monkeypatch.setattr(ParallelRunner, "_all", send_all)
    runner.close()
    assert not (state / "shard-0" / "prepared").exists() and (state / "shard-1" / "prepared").exists()

    runner = ParallelRunner(PARAMS, state, workers=2)
    rest = _run(runner, events, batch=48)
    runner.close()
    assert rest == []  # both batches are in every store
    live = live_sources(events)
    view = View().apply_all(produced)
    assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
    assert view.compacted(with_revision=False) == Reference(Engine(PARAMS), live).compacted()
    assert runner.counters.positions == sum(len(s.texts) for s in live.values())
