"""Parts of the Kafka driver that need no broker."""

import pytest

from streamdedup.core.messages import BandJoin, Output, RefUpdate
from streamdedup.kafka.batches import decode_batch, encode_batches
from streamdedup.kafka.metrics import Metrics
from streamdedup.kafka.state import TableState
from streamdedup.kafka.topics import TopicNames, topic_config
from streamdedup.settings import Settings


def test_batches_round_trip_and_split_by_size():
    messages = [BandJoin(f"band-{i:04d}", "h" * 64, i) for i in range(200)]
    parts = list(encode_batches(messages, max_bytes=2000))
    assert len(parts) > 1 and all(len(p) <= 2000 for p in parts)
    assert [m for p in parts for m in decode_batch(p)] == messages  # order kept across the split


def test_an_oversized_message_travels_alone():
    big = RefUpdate("h", "s", 1, (0,), ("x" * 5000,), "x" * 5000)
    parts = list(encode_batches([BandJoin("k", "h", 1), big, BandJoin("k", "h", 2)], max_bytes=1000))
    assert [len(decode_batch(p)) for p in parts] == [1, 1, 1]


def test_table_state_buffers_and_writes_back_every_touched_key():
    table = {b"a": b"1", b"b": b"2"}
    state = TableState(table)
    assert state.get("a") == b"1" and state.get("missing") is None
    state.put("c", b"3")
    state.delete("b")
    assert table == {b"a": b"1", b"b": b"2"}  # nothing reaches the table before write_back
    assert state.get("c") == b"3" and state.get("b") is None
    assert state.write_back() == 4
    # "a" was only read: it is written again (heals a changelog that lags its local store after a crash)
    assert table == {b"a": b"1", b"c": b"3"}


def test_table_state_rewrites_read_keys():
    writes = []

    class Recording(dict):
        def __setitem__(self, key, value):
            writes.append(key)
            super().__setitem__(key, value)

    state = TableState(Recording({b"k": b"v"}))
    state.get("k")
    state.write_back()
    assert writes == [b"k"]


def test_topic_names_share_the_prefix():
    names = TopicNames("acme.")
    assert all(t.startswith("acme.") for t in names.all())
    assert len(set(names.all())) == 10  # documents, 4 stage topics, 5 outputs
    with pytest.raises(ValueError):
        names.output("nope")
    assert topic_config("canonical-chunks")["cleanup.policy"] == "compact"
    assert "cleanup.policy" not in topic_config("audit")


@pytest.mark.parametrize(
    ("broker", "servers"),
    [
        ("kafka://127.0.0.1:9092", "127.0.0.1:9092"),
        ("kafka://a:9092;kafka://b:9093", "a:9092,b:9093"),
        ("a:1,b:2", "a:1,b:2"),
    ],
)
def test_bootstrap_servers(broker, servers):
    assert Settings(broker=broker).bootstrap_servers == servers


def test_metrics_count_merges_swaps_and_flags():
    metrics = Metrics()
    metrics.observe_outputs(
        [
            Output("audit", "c", {"action": "merge", "reason": "near"}),
            Output("audit", "c", {"action": "merge", "reason": "exact"}),
            Output("audit", "c", {"action": "swap", "reason": "newer modified_at"}),
            Output("review", "a:b", {"reason": "fact_conflict"}),
            Output("canonical-chunks", "c", None),
        ]
    )
    text = metrics.render().decode()
    assert 'streamdedup_merges_total{kind="near"} 1.0' in text
    assert "streamdedup_canonical_changes_total 1.0" in text
    assert 'streamdedup_review_flags_total{reason="fact_conflict"} 1.0' in text
    assert 'streamdedup_outputs_total{topic="canonical-chunks"} 1.0' in text


def test_the_worker_leaves_the_log_level_alone(tmp_path):
    # Faust's terminal spinner would turn the root logger to DEBUG, making every producer send build a record.
    import logging

    from streamdedup.cli.kafka import make_worker
    from streamdedup.kafka.app import build_app

    app, _ = build_app(Settings(data_dir=tmp_path))
    worker = make_worker(app, "warning")
    probe = logging.Logger("probe", logging.WARNING)
    probe.addHandler(logging.NullHandler())
    worker.on_setup_root_logger(probe, logging.WARNING)
    assert probe.level == logging.WARNING and not probe.isEnabledFor(logging.DEBUG)


def test_a_stage_batch_is_one_handler_call_per_partition_with_that_partition_current(tmp_path):
    # Several Kafka messages of one partition become one handler call; faust's tables take the partition of their
    # writes from the current event, so it must be one of that partition while the handler runs.
    import asyncio
    from types import SimpleNamespace

    import faust.streams

    from streamdedup.kafka.app import build_app

    _, pipeline = build_app(Settings(data_dir=tmp_path))
    calls = []

    def handle(stage, messages, state):
        current = faust.streams._current_event.get()()
        calls.append((stage, [m.epoch for m in messages], current.message.partition))
        return []

    pipeline.engine.handle = handle
    pipeline.tables["band"] = {}

    class Event:  # what faust hands an agent: the value and the message it came in (weakly referenced)
        def __init__(self, partition, *epochs):
            (self.value,) = encode_batches([BandJoin(f"b{e}", "h", e) for e in epochs], max_bytes=1 << 20)
            self.message = SimpleNamespace(partition=partition)

    events = [Event(0, 1, 2), Event(1, 3), Event(0, 4)]
    asyncio.run(pipeline.run_stage("band", events))
    assert calls == [("band", [1, 2, 4], 0), ("band", [3], 1)]


def _pipeline_with_fakes(tmp_path, fail_on_epoch):
    from types import SimpleNamespace

    from streamdedup.kafka.app import build_app

    _, pipeline = build_app(Settings(data_dir=tmp_path))
    applied, delivered, letters = [], [], []

    def handle(stage, messages, state):
        if any(m.epoch == fail_on_epoch for m in messages):
            raise ValueError(f"cannot handle epoch {fail_on_epoch}")
        for m in messages:
            state.put(m.band_key, b"x")
        applied.append([m.epoch for m in messages])
        return [Output("audit", m.band_key, {"epoch": m.epoch}) for m in messages]

    async def deliver(produced):
        delivered.extend(produced)

    async def dead_letter(message, error, reason, *, value=None, key=None):
        letters.append((message.offset, error, reason, value))
        return asyncio.sleep(0)

    import asyncio

    pipeline.engine.handle = handle
    pipeline.deliver = deliver
    pipeline.dead_letter = dead_letter
    pipeline.tables["band"] = {}

    class Event:
        def __init__(self, offset, *epochs):
            (self.value,) = encode_batches([BandJoin(f"b{e}", "h", e) for e in epochs], max_bytes=1 << 20)
            self.message = SimpleNamespace(partition=0, offset=offset, topic="stage-band")

    return pipeline, Event, applied, delivered, letters


def test_a_handler_failure_dead_letters_one_message_and_applies_the_rest_of_its_batch(tmp_path):
    import asyncio

    pipeline, Event, applied, delivered, letters = _pipeline_with_fakes(tmp_path, fail_on_epoch=3)
    asyncio.run(pipeline.run_stage("band", [Event(10, 1, 2), Event(11, 3, 4), Event(12, 5)]))
    assert applied == [[1], [2], [4], [5]]  # the batch failed whole, then one at a time
    assert [o.value["epoch"] for o in delivered] == [1, 2, 4, 5]
    ((offset, error, reason, value),) = letters
    assert offset == 11 and reason == "stage" and "ValueError: cannot handle epoch 3" in error
    assert decode_batch(value) == [BandJoin("b3", "h", 3)]
    assert set(pipeline.tables["band"]) == {b"b1", b"b2", b"b4", b"b5"}  # nothing of the failed message


def test_a_kafka_failure_is_not_blamed_on_the_input(tmp_path):
    import asyncio

    from aiokafka.errors import KafkaTimeoutError

    pipeline, Event, _, _, letters = _pipeline_with_fakes(tmp_path, fail_on_epoch=-1)

    async def deliver(produced):
        raise KafkaTimeoutError()

    pipeline.deliver = deliver
    with pytest.raises(KafkaTimeoutError):
        asyncio.run(pipeline.run_stage("band", [Event(10, 1, 2)]))
    assert letters == [] and pipeline.tables["band"] == {}


@pytest.mark.parametrize("fails", [False, True])
def test_a_batch_is_acknowledged_only_after_it_was_handled(fails):
    import asyncio

    from streamdedup.kafka.app import _consume

    acked, crashed = [], []

    class Stream:
        async def noack_take(self, size, within):
            yield ["e1", "e2"]
            yield ["e3"]

        async def ack(self, event):
            acked.append(event)

    class App:
        async def crash(self, exc):
            crashed.append(exc)

    async def handle(events):
        if fails and "e3" in events:
            raise RuntimeError("broker gone")

    asyncio.run(_consume(App(), Stream(), 10, 0.1, handle))
    assert acked == (["e1", "e2"] if fails else ["e1", "e2", "e3"])
    assert [str(e) for e in crashed] == (["broker gone"] if fails else [])


def test_a_failing_table_is_not_blamed_on_the_input(tmp_path):
    import asyncio

    from streamdedup.errors import StateError

    pipeline, Event, _, delivered, letters = _pipeline_with_fakes(tmp_path, fail_on_epoch=-1)

    class BrokenTable(dict):
        def get(self, key, default=None):
            raise OSError("disk gone")

    pipeline.tables["band"] = BrokenTable()
    pipeline.engine.handle = lambda stage, messages, state: [state.get(m.band_key) for m in messages]
    with pytest.raises(StateError, match="disk gone"):
        asyncio.run(pipeline.run_stage("band", [Event(10, 1, 2)]))
    assert letters == [] and delivered == []
