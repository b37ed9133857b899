"""Parts of the Kafka driver that need no broker."""

import pytest

from streamdedup.core._native import RecordCache
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


def test_each_generation_has_its_own_topics_group_and_stores_and_shares_the_input(tmp_path):
    first, second = TopicNames("acme.", 1), TopicNames("acme.", 2)
    assert first.documents == second.documents and first.registry == second.registry
    assert not set(first.own()) & set(second.own())
    assert first.group != second.group and first.changelog("source") != second.changelog("source")
    assert second.documents not in second.own() and second.registry not in second.own()
    settings = Settings(data_dir=tmp_path, generation=2, topic_prefix="acme.")
    assert settings.topic_names() == second and settings.worker_data_dir() == tmp_path / "generation-2"
    assert Settings(data_dir=tmp_path).worker_data_dir() == tmp_path


def test_a_generation_runs_under_the_parameters_it_recorded():
    recorded = Settings(threshold=0.85, shingle_size=3, canonical_policy=("modified_at", "source_id"))
    params = recorded.engine_params()
    assert Settings().with_params(params.fingerprint()).engine_params() == params


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
            Output("audit", "a:b", {"action": "decision", "reason": "keep_separate"}),
            Output("audit", "a:b", {"action": "decision_refused", "reason": "merge"}),
        ]
    )
    text = metrics.render().decode()
    assert 'streamdedup_merges_total{kind="near"} 1.0' in text
    assert "streamdedup_canonical_changes_total 1.0" in text
    assert 'streamdedup_review_flags_total{reason="fact_conflict"} 1.0' in text
    assert 'streamdedup_outputs_total{topic="canonical-chunks"} 1.0' in text
    assert 'streamdedup_decisions_total{decision="keep_separate"} 1.0' in text
    assert 'streamdedup_decisions_total{decision="refused"} 1.0' in text


def test_metrics_report_the_record_cache():
    from prometheus_client.parser import text_string_to_metric_families

    cache = RecordCache(1 << 20)
    metrics = Metrics()
    metrics.watch_state_cache(cache)
    cache.update(b"ns", {"a": b"x" * 100})
    cache.get_many(b"ns", 2, ["a", "b"], lambda addresses: [None] * len(addresses), 10)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }
    assert samples[("streamdedup_state_cache_bytes", ())] == cache.used > 100
    assert samples[("streamdedup_state_cache_capacity_bytes", ())] == 1 << 20
    assert samples[("streamdedup_state_cache_reads_total", (("from", "cache"),))] == 1
    assert samples[("streamdedup_state_cache_reads_total", (("from", "store"),))] == 1


def test_the_worker_leaves_the_log_level_alone(tmp_path):
    # Faust's terminal spinner would turn the root logger to DEBUG, making every producer send build a record.
    import logging

    from streamdedup.drivers.kafka.app import build_app, make_worker

    app, _ = build_app(Settings(data_dir=tmp_path))
    worker = make_worker(app, "warning")
    probe = logging.Logger("probe", logging.WARNING)
    probe.addHandler(logging.NullHandler())
    worker.on_setup_root_logger(probe, logging.WARNING)
    assert probe.level == logging.WARNING and not probe.isEnabledFor(logging.DEBUG)


class _Builder:
    def append(self, **record):
        return object()  # room left: every record fits


class _SlowBroker:
    """A producer whose first queueing attempts time out, as while the broker restarts."""

    def __init__(self, timeouts: int) -> None:
        self.timeouts, self.attempts = timeouts, 0

    def create_batch(self):
        return _Builder()

    async def send_batch(self, builder, topic, *, partition):
        import asyncio
        from types import SimpleNamespace

        from aiokafka.errors import KafkaTimeoutError

        self.attempts += 1
        if self.attempts <= self.timeouts:
            raise KafkaTimeoutError()
        future = asyncio.get_running_loop().create_future()
        future.set_result(SimpleNamespace(offset=41))
        return future


def test_a_batch_the_producer_could_not_queue_in_time_is_queued_again():
    import asyncio

    from aiokafka.errors import KafkaTimeoutError

    from streamdedup.drivers.kafka.delivery import SEND_ATTEMPTS, FaultPoints, Sends

    producer = _SlowBroker(timeouts=2)
    sends = Sends(producer, Metrics(), FaultPoints(None))
    sends.add("out", 0, b"k", b"v")
    sends.add("out", 0, b"k2", b"v2")
    assert asyncio.run(sends.send()) == {("out", 0): 42}  # two records from offset 41
    assert producer.attempts == 3
    gone = _SlowBroker(timeouts=SEND_ATTEMPTS)
    sends = Sends(gone, Metrics(), FaultPoints(None))
    sends.add("out", 0, b"k", b"v")
    with pytest.raises(KafkaTimeoutError):
        asyncio.run(sends.send())
    assert gone.attempts == SEND_ATTEMPTS


def test_the_failover_settings_are_read_from_the_environment_and_checked(monkeypatch):
    monkeypatch.setenv("STREAMDEDUP_SESSION_TIMEOUT", "9")
    monkeypatch.setenv("STREAMDEDUP_HEARTBEAT_INTERVAL", "3")
    monkeypatch.setenv("STREAMDEDUP_DELIVERY_TIMEOUT", "300")
    monkeypatch.setenv("STREAMDEDUP_REBALANCE_TIMEOUT", "30")
    found = Settings()
    assert (found.session_timeout, found.heartbeat_interval) == (9.0, 3.0)
    assert (found.delivery_timeout, found.rebalance_timeout) == (300.0, 30.0)
    defaults = Settings.model_fields
    assert defaults["heartbeat_interval"].default * 3 <= defaults["session_timeout"].default
    with pytest.raises(ValueError, match="at most a third of session_timeout"):
        Settings(session_timeout=6, heartbeat_interval=2.5)
    with pytest.raises(ValueError):
        Settings(delivery_timeout=1)
