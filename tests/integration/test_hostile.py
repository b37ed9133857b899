"""Hostile input on the real broker: the worker dead-letters exactly the bad lines and loses no valid event."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from streamdedup.contract.codec import EventLimits, decode_event, encode_event
from streamdedup.core.engine import Engine
from streamdedup.core.params import EngineParams
from streamdedup.testing.hostile import HOSTILE_KINDS, mixed_feed
from tests.helpers import run_embedded, upsert
from tests.integration.harness import Deployment, dlq_records
from tests.integration.test_commands import cli

pytestmark = pytest.mark.integration


def _dead_letters(samples: dict[str, float]) -> float:
    return sum(v for k, v in samples.items() if k.startswith("streamdedup_dead_letters_total"))


def test_a_mixed_feed_through_produce_and_a_worker(deployment: Deployment, engine, tmp_path: Path):
    limits = EventLimits(bytes=256 * 1024)
    deployment.env["STREAMDEDUP_MAX_EVENT_BYTES"] = str(limits.bytes)
    feed = mixed_feed(12, limits=limits)
    hostile = [line.raw for line in feed if line.hostile]
    assert len(feed) == 600 and {line.kind for line in feed if line.hostile} == set(HOSTILE_KINDS)
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join(line.raw + b"\n" for line in feed))
    worker = deployment.start_worker()

    produced = cli(deployment, "produce", str(path))
    assert produced.returncode == 0, produced.stderr
    said = " ".join(produced.stderr.split())
    assert f"sent 600 lines to {deployment.names.documents}" in said
    assert f"{len(hostile)} not valid events" in said

    valid = [decode_event(line.raw, limits) for line in feed if not line.hostile]
    deployment.events.extend(valid)
    deployment.wait_until_idle(timeout=240)
    view = deployment.view()
    assert view.compacted(with_revision=False) == run_embedded(engine, valid).compacted(with_revision=False)
    letters = dlq_records(deployment)
    assert Counter(r["value"] for r in letters) == Counter(hostile)  # the original bytes, each bad line once
    assert all(r["headers"]["origin-topic"] == deployment.names.documents for r in letters)
    samples = worker.metrics()
    assert samples["streamdedup_events_in_total"] == 600
    assert samples["streamdedup_events_processed_total"] == len(valid)
    assert _dead_letters(samples) == len(hostile)
    lags = {k: v for k, v in samples.items() if k.startswith("streamdedup_consumer_lag{")}
    assert lags and all(v == 0 for v in lags.values())


def test_produce_skips_invalid_lines_when_asked(deployment: Deployment, tmp_path: Path):
    good = upsert("kept", 1, ["a paragraph that is kept"])
    path = tmp_path / "feed.jsonl"
    path.write_bytes(b"[" * 5000 + b"]" * 5000 + b"\n" + encode_event(good) + b"\n{broken\n")
    produced = cli(deployment, "produce", "--skip-invalid", str(path))
    assert produced.returncode == 0, produced.stderr
    said = " ".join(produced.stderr.split())
    assert "sent 1 lines" in said and "2 not valid events (2 skipped)" in said
    deployment.start_worker()
    deployment.events.append(good)
    deployment.wait_until_idle()
    assert set(deployment.view().mappings) == {"kept"}
    assert dlq_records(deployment) == []


def test_a_worker_dead_letters_the_event_a_handler_fails_on_and_applies_the_rest(
    kafka_broker, tmp_path: Path
):
    deployment = Deployment(kafka_broker, tmp_path, partitions=1)  # one source partition: one batch
    deployment.env["STREAMDEDUP_FAULT_SOURCE_ID"] = "src-200"
    try:
        texts = ("open the settings page and choose reset password", "the refund window is thirty days")
        events = [
            upsert(f"src-{i}", 1, [f"{texts[i % 2]} for team {i // 2} of the company"]) for i in range(256)
        ]
        path = tmp_path / "feed.jsonl"
        path.write_bytes(b"".join(encode_event(e) + b"\n" for e in events))
        produced = cli(deployment, "produce", str(path))
        assert produced.returncode == 0, produced.stderr
        worker = deployment.start_worker()  # after producing, so that the events arrive together
        others = [e for e in events if e.source_id != "src-200"]
        deployment.events.extend(others)
        deployment.wait_until_idle(timeout=240)

        (letter,) = dlq_records(deployment)
        assert "InjectedFault" in letter["headers"]["error"]
        assert letter["headers"]["origin-topic"] == deployment.names.stage("source")
        assert letter["key"] == b"src-200"
        assert decode_event(letter["value"]) == events[200]  # the event as contract JSON, to send again
        view = deployment.view()
        alone = run_embedded(Engine(EngineParams()), others)
        assert view.compacted(with_revision=False) == alone.compacted(with_revision=False)
        samples = worker.metrics()
        assert samples["streamdedup_events_in_total"] == 256
        assert samples["streamdedup_events_processed_total"] == 255
        assert samples['streamdedup_dead_letters_total{reason="failed"}'] == 1
        # The failing event shared its handler call with others, which were applied one at a time.
        assert samples['streamdedup_isolated_messages_total{stage="source"}'] > 1
        assert json.loads(letter["value"])["source_id"] == "src-200"
    finally:
        deployment.stop()


def test_produce_reports_lines_it_cannot_send(deployment: Deployment, tmp_path: Path):
    path = tmp_path / "feed.jsonl"
    too_large = b'{"x": "' + b"y" * (17 * 1024 * 1024) + b'"}'
    long_key = b'{"source_id": "' + b"k" * (9 * 1024 * 1024) + b'"}'  # sent without a key: Kafka takes it
    path.write_bytes(b" " + too_large + b"\n" + b"null\n" + long_key + b"\n")
    produced = cli(deployment, "produce", str(path))
    assert produced.returncode == 0, produced.stderr
    said = " ".join(produced.stderr.split())
    assert "sent 2 lines" in said and "3 not valid events" in said and "1 over" in said
