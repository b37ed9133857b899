"""The embedded driver: deterministic output (I5), replay changes nothing (I4), state survives restarts."""

import contextlib
import json
import random

import pytest

from streamdedup.contract.codec import encode_output_line
from streamdedup.core._native import RecordCache
from streamdedup.core.messages import Output
from streamdedup.core.model import AclEvent, DeleteEvent
from streamdedup.core.output_view import View
from streamdedup.drivers.embedded import EmbeddedRunner, RunCounters
from streamdedup.drivers.jsonl import OUTPUTS_PER_WRITE, SINK_META_KEY, FileSink, opened_state
from streamdedup.settings import Settings
from streamdedup.store.base import Transaction
from streamdedup.store.rocksdb import RocksDBStore, record_cache
from streamdedup.testing.invariants import check_invariants
from streamdedup.testing.random_feeds import random_feed
from streamdedup.testing.reference import Reference, live_sources
from tests.helpers import upsert


def _run(engine, store, events, batch):
    runner = EmbeddedRunner(engine, store)
    produced = []
    for start in range(0, len(events), batch):
        runner.process(events[start : start + batch], produced.extend)
    return produced, runner


def test_same_input_gives_byte_identical_output(engine, tmp_path):
    events = random_feed(random.Random(11), sources=8, events=60)
    outputs = []
    for name in ("one", "two"):
        store = RocksDBStore(tmp_path / name)
        produced, _ = _run(engine, store, events, batch=7)
        store.close()
        outputs.append(b"".join(encode_output_line(o) for o in produced))
    assert outputs[0] == outputs[1] and outputs[0]


def test_output_is_the_same_whatever_the_record_cache_holds(engine, tmp_path):
    # No record cache, one that holds a few records at a time (constant eviction), and the default.
    events = random_feed(random.Random(21), sources=10, events=80)
    outputs = []
    for name, records in (("none", None), ("tiny", RecordCache(4_000)), ("default", record_cache())):
        store = RocksDBStore(tmp_path / name, records=records)
        produced, _ = _run(engine, store, events, batch=5)
        store.close()
        outputs.append(b"".join(encode_output_line(o) for o in produced))
    assert outputs[0] and outputs[1] == outputs[0] and outputs[2] == outputs[0]


def test_replaying_events_changes_nothing(engine):
    from streamdedup.store.memory import MemoryStore

    events = random_feed(random.Random(12), sources=8, events=60)
    store = MemoryStore()
    _, runner = _run(engine, store, events, batch=5)
    again = []
    runner.process(events, again.extend)
    runner.process(list(reversed(events)), again.extend)
    assert again == []


def test_the_invariants_see_a_mapping_that_missed_its_sources_latest_attributes(engine):
    from streamdedup.store.memory import MemoryStore

    events = [
        upsert("s", 1, ["a text of a few words in one chunk"], acl=("eng",)),
        AclEvent(source_id="s", version=2, acl=("ops",)),
    ]
    produced, _ = _run(engine, MemoryStore(), events, batch=1)
    live = live_sources(events)
    assert check_invariants(View().apply_all(produced), live, threshold=0.8, shingle_size=5) == []
    # Without the mapping the ACL change sent again, the view's mapping names readers the source no longer has.
    last = max(n for n, o in enumerate(produced) if o.topic == "source-mappings")
    stale = View().apply_all(produced[:last] + produced[last + 1 :])
    problems = check_invariants(stale, live, threshold=0.8, shingle_size=5)
    assert "I2: mapping of s has readers ['eng'], the source ['ops']" in problems
    view = View().apply_all(produced)
    view.mappings["s"] = {**view.mappings["s"], "title": "Setup", "uri": None}
    problems = check_invariants(view, live, threshold=0.8, shingle_size=5)
    assert [p.split(" has ")[1].split(",")[0] for p in problems] == ["uri None", "title 'Setup'"]


def test_restart_continues_from_the_stored_state(engine, tmp_path):
    events = random_feed(random.Random(13), sources=8, events=80)
    whole = View().apply_all(_run(engine, RocksDBStore(tmp_path / "whole"), events, batch=4)[0])
    view = View()
    for part in (events[:30], events[30:55], events[55:]):
        store = RocksDBStore(tmp_path / "parts")  # reopened: a new process would do the same
        produced, runner = _run(engine, store, part, batch=4)
        counters = runner.counters
        store.close()
        view.apply_all(produced)
    assert view.compacted(with_revision=False) == whole.compacted(with_revision=False)
    live = live_sources(events)
    assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
    assert view.compacted(with_revision=False) == Reference(engine, live).compacted()
    assert counters.events == len(events)
    assert counters.positions == sum(len(s.texts) for s in live.values())
    assert counters.chunks == len(view.chunks)


def test_a_crash_before_commit_repeats_the_batch_harmlessly(engine, tmp_path):
    events = random_feed(random.Random(14), sources=6, events=40)
    store = RocksDBStore(tmp_path / "state")
    produced, runner = _run(engine, store, events[:20], batch=20)

    def crash(outputs):
        produced.extend(outputs)  # outputs reached the sink, then the process died before the commit
        raise RuntimeError("power cut")

    with contextlib.suppress(RuntimeError):
        runner.process(events[20:], crash)
    store.close()
    store = RocksDBStore(tmp_path / "state")
    rest, _ = _run(engine, store, events[20:], batch=20)
    store.close()
    view = View().apply_all(produced + rest)
    live = live_sources(events)
    assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
    assert view.compacted(with_revision=False) == Reference(engine, live).compacted()


def test_a_runner_whose_batch_failed_goes_on_from_the_committed_state(engine):
    # A batch that fails after its handlers changed the state leaves no change behind for the batches after it.
    from streamdedup.store.memory import MemoryStore

    events = random_feed(random.Random(15), sources=6, events=40)
    produced, runner = _run(engine, MemoryStore(), events[:20], batch=20)

    def disk_full(outputs):
        raise OSError("no space left on device")

    with pytest.raises(OSError):
        runner.process(events[20:], disk_full)
    runner.process(events[20:], produced.extend)
    uninterrupted, _ = _run(engine, MemoryStore(), events, batch=20)
    assert produced == uninterrupted


def test_a_batch_whose_handler_failed_leaves_no_changed_record_to_the_next(engine):
    # Here every event of the batch fails again alone: none of its changes may reach the next batch.
    from streamdedup.core.engine import Engine
    from streamdedup.store.memory import MemoryStore

    class FailingAfterContent(Engine):
        failing = False

        def handle(self, stage, messages, state):
            produced = super().handle(stage, messages, state)
            if self.failing and stage == "content":
                raise RuntimeError("the content stage changed its records, then failed")
            return produced

    failing = FailingAfterContent(engine.params)
    runner = EmbeddedRunner(failing, MemoryStore())
    a = "Open the settings page and choose reset password to receive a link by email within ten minutes"
    b = "Rotate the signing keys every ninety days and keep the previous key until every token has expired"
    first, second = [upsert("src-1", 1, [a])], [upsert("src-1", 2, [b]), upsert("src-2", 1, [a])]
    produced = runner.process(first, lambda outputs: None)
    failing.failing = True
    letters = runner.process(second, lambda outputs: None)
    assert [o.topic for o in letters] == ["dlq", "dlq"]
    failing.failing = False
    produced += runner.process(second, lambda outputs: None)
    uninterrupted, _ = _run(engine, MemoryStore(), first + second, batch=1)
    assert View().apply_all(produced).compacted() == View().apply_all(uninterrupted).compacted()


class _Killed(BaseException):
    """The process dying between writing a batch's outputs and committing its state."""


def _chunks_in(path) -> dict[str, object]:
    chunks: dict[str, object] = {}
    for line in path.read_bytes().splitlines():
        record = json.loads(line)
        if record["topic"] == "canonical-chunks":
            chunks[record["key"]] = record["value"]
    return {key: value for key, value in chunks.items() if value is not None}


def test_outputs_of_a_batch_whose_state_was_lost_are_cut_from_the_output_file(tmp_path, caplog):
    text = (
        "Travel bookings are made through the travel desk at least two weeks before departure, and every booking "
        "needs the approval of the traveller's manager before the desk confirms the tickets and the hotel"
    )
    settings, state, out = Settings(), tmp_path / "state", tmp_path / "outputs.jsonl"
    with opened_state(settings, state, str(out)) as (runner, sink):
        runner.process(
            [upsert("kept", 1, ["A document that stays, with enough words in it to count here."])], sink
        )
        committed = out.stat().st_size

        def dies(outputs):
            sink(outputs)  # written and made durable ...
            raise _Killed  # ... then the process is gone before the commit

        with contextlib.suppress(_Killed):
            runner.process([upsert("travel", 1, [text])], dies)
    assert len(_chunks_in(out)) == 2 and out.stat().st_size > committed
    # Before the next run, the document was deleted: that batch will never be applied again as it was.
    with opened_state(settings, state, str(out)) as (runner, sink):
        assert out.stat().st_size == committed
        runner.process([DeleteEvent(source_id="travel", version=2)], sink)
    assert "whose state was not committed" in caplog.text
    (chunk,) = _chunks_in(out).values()
    assert chunk["canonical"]["source_id"] == "kept"
    # A state that did commit keeps its file whole; another output file is never cut.
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"x" * 10)
    store = RocksDBStore(state)
    committed_meta = store.get_meta(SINK_META_KEY)
    store.close()
    assert FileSink.roll_back(str(out), committed_meta) == 0
    assert FileSink.roll_back(str(other), committed_meta) == 0 and other.stat().st_size == 10


def _mapping(source_id, relations):
    if relations is None:
        return Output("source-mappings", source_id, None)
    return Output("source-mappings", source_id, {"chunks": [{"relation": r} for r in relations]})


def test_the_run_totals_count_each_key_by_its_last_record_in_a_batch_or_across_batches():
    from streamdedup.store.memory import MemoryStore

    records = [
        Output("canonical-chunks", "c1", {"text": "a"}),
        _mapping("s1", ["canonical", "exact"]),
        Output("canonical-chunks", "c2", {"text": "b"}),
        Output("canonical-chunks", "c1", None),  # the same chunk gone again within the batch
        _mapping("s1", ["canonical", "near", "exact"]),  # the same source mapped again
        _mapping("s2", ["exact"]),
        _mapping("s2", None),
        Output("canonical-chunks", "c2", {"text": "b2"}),
    ]
    totals = []
    for batches in ([records], [[record] for record in records]):
        counters, store = RunCounters(), MemoryStore()
        for batch in batches:
            txn = Transaction(store)
            counters.observe_all(batch, txn)
            txn.commit()
        totals.append((counters.positions, counters.exact, counters.near, counters.chunks))
    assert totals[0] == totals[1] == (3, 1, 1, 1)


def test_the_file_sink_writes_a_batch_in_parts_as_one_line_per_output(tmp_path):
    outputs = [
        Output("audit", f"c{i}", {"schema": "streamdedup.audit/v1", "n": i, "text": "é\n" * (i % 5)})
        if i % 7
        else Output("canonical-chunks", f"c{i}", None)
        for i in range(2 * OUTPUTS_PER_WRITE + 3)
    ]
    out = tmp_path / "out.jsonl"
    sink = FileSink(str(out))
    meta = sink(outputs)
    sink(outputs[:1])
    sink.close()
    once = b"".join(encode_output_line(output) for output in outputs)
    assert meta == {SINK_META_KEY: f"{len(once)}\n{out}".encode()}
    assert out.read_bytes() == once + encode_output_line(outputs[0])
