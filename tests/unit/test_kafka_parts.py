"""Parts of the Kafka driver that need no broker."""

import pytest

from streamdedup.core.messages import BandJoin, Output, RefUpdate
from streamdedup.drivers.kafka.batches import decode_batch, encode_batches
from streamdedup.drivers.kafka.metrics import Metrics
from streamdedup.drivers.kafka.topics import TopicNames, topic_config
from streamdedup.settings import Settings


def test_batches_round_trip_and_split_by_size():
    messages = [BandJoin("h" * 64, i, (f"band-{i:04d}",)) for i in range(200)]
    parts = list(encode_batches(messages, max_bytes=2000))
    assert len(parts) > 1 and all(len(p) <= 2000 for p in parts)
    assert [m for p in parts for m in decode_batch(p)] == messages  # order kept across the split


def test_an_oversized_message_travels_alone():
    big = RefUpdate("h", "s", 1, (0,), ("x" * 5000,), "x" * 5000)
    parts = list(encode_batches([BandJoin("h", 1, ("k",)), big, BandJoin("h", 2, ("k",))], max_bytes=1000))
    assert [len(decode_batch(p)) for p in parts] == [1, 1, 1]


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
    from streamdedup.drivers.kafka.app import build_app

    app, _ = build_app(Settings(data_dir=tmp_path))
    worker = make_worker(app, "warning")
    probe = logging.Logger("probe", logging.WARNING)
    probe.addHandler(logging.NullHandler())
    worker.on_setup_root_logger(probe, logging.WARNING)
    assert probe.level == logging.WARNING and not probe.isEnabledFor(logging.DEBUG)
