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
