"""The streaming service on a real Apache Kafka broker (started by deploy/kafka/broker.sh)."""

from __future__ import annotations

import json
import random
import shutil
import urllib.request
from pathlib import Path

import pytest

from streamdedup.contract.codec import decode_event
from streamdedup.core import kernels
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGES
from streamdedup.core.model import DeleteEvent
from streamdedup.core.params import EngineParams
from streamdedup.testing.invariants import check_invariants
from streamdedup.testing.random_feeds import LINEAGE_RULES, ParagraphPool, lineage_feed, random_feed
from streamdedup.testing.reference import Reference, live_sources
from tests.helpers import run_embedded, upsert
from tests.integration.harness import Deployment

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "feed.jsonl"


def example_events():
    events = []
    for line in EXAMPLE.read_text().splitlines():
        try:
            events.append(decode_event(line))
        except Exception:
            continue  # the malformed line of the example
    return events


def assert_view_is_the_reference(deployment: Deployment, engine) -> None:
    view = deployment.view()
    live = live_sources(deployment.events)
    assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
    assert view.compacted(with_revision=False) == Reference(engine, live).compacted()


def test_example_view_equals_the_embedded_run(deployment, engine):
    worker = deployment.start_worker()
    events = example_events()
    deployment.produce(events)
    deployment.wait_until_idle()
    view = deployment.view()
    embedded = run_embedded(engine, events)
    assert view.compacted(with_revision=False) == embedded.compacted(with_revision=False)
    assert len(view.chunks) == 12
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.web_port}/health", timeout=10) as response:
        health = json.loads(response.read())
    # The worker runs the kernels the test run chose (STREAMDEDUP_KERNELS, which it inherits).
    assert health == {"status": "ok", "assigned": 4 * len(STAGES), "kernels": kernels.kind()}


def test_deletion_propagates_and_replays_change_nothing(deployment, engine):
    deployment.start_worker()
    text = (
        "If you forgot your password open the sign-in page and choose forgot password then enter the email "
        "address you use for your account and we will send you a link that lets you choose a new password"
    )
    copies = [
        upsert(f"space-{s}", 1, [text], acl=(s,), day=d) for d, s in enumerate(("sales", "eng", "hr"), 1)
    ]
    deployment.produce(copies)
    deployment.wait_until_idle()
    assert_view_is_the_reference(deployment, engine)
    (chunk,) = deployment.view().chunks.values()
    assert chunk["canonical"]["source_id"] == "space-hr" and chunk["acl"] == ["eng", "hr", "sales"]

    deployment.produce([DeleteEvent(source_id="space-eng", version=2)])  # one copy of three
    deployment.wait_until_idle()
    assert_view_is_the_reference(deployment, engine)
    view = deployment.view()
    (chunk,) = view.chunks.values()
    assert chunk["acl"] == ["hr", "sales"] and "space-eng" not in view.mappings

    deployment.produce([DeleteEvent(source_id="space-hr", version=2)])  # the canonical's own source
    deployment.wait_until_idle()
    assert_view_is_the_reference(deployment, engine)
    (chunk,) = deployment.view().chunks.values()
    assert chunk["canonical"]["source_id"] == "space-sales" and chunk["acl"] == ["sales"]

    # Replay: the same events again, and older versions after newer ones: the view does not change.
    before = deployment.view().compacted()
    deployment.produce(
        [*copies, upsert("space-hr", 1, ["a stale version"]), upsert("space-sales", 0, ["older"])]
    )
    deployment.wait_until_idle()
    assert deployment.view().compacted() == before


def test_restarts_with_kept_and_with_wiped_state_match_an_uninterrupted_run(deployment, engine, tmp_path):
    feed = random_feed(random.Random(7), sources=12, events=90)
    data = tmp_path / "state"
    parts = (feed[:30], feed[30:60], feed[60:])

    worker = deployment.start_worker(data, "first")
    deployment.produce(parts[0])
    deployment.wait_until_idle()
    worker.stop()

    worker = deployment.start_worker(data, "kept")  # restart with the RocksDB directory kept
    deployment.produce(parts[1])
    deployment.wait_until_idle()
    worker.stop()

    shutil.rmtree(data)  # restart with nothing local: the state comes back from the changelog topics
    worker = deployment.start_worker(data, "wiped")
    deployment.produce(parts[2])
    deployment.wait_until_idle()
    assert_view_is_the_reference(deployment, engine)
    uninterrupted = run_embedded(engine, feed, batch=10)
    assert deployment.view().compacted(with_revision=False) == uninterrupted.compacted(with_revision=False)


def test_two_workers_on_four_partitions(kafka_broker, tmp_path, engine):
    deployment = Deployment(kafka_broker, tmp_path, partitions=4)
    try:
        deployment.start_worker(name="a")
        deployment.start_worker(name="b")
        events = example_events() + random_feed(random.Random(3), sources=15, events=80)
        deployment.produce(events)
        deployment.wait_until_idle(timeout=150)
        assert_view_is_the_reference(deployment, engine)
        embedded = run_embedded(engine, events)
        assert deployment.view().compacted(with_revision=False) == embedded.compacted(with_revision=False)
        assert all(w.process.poll() is None for w in deployment.workers)
    finally:
        deployment.stop()


def test_poison_inputs_go_to_the_dlq_and_the_rest_is_processed(deployment, engine):
    worker = deployment.start_worker()
    good = example_events()[:6]
    big = {
        "schema": "streamdedup.document/v1",
        "op": "upsert",
        "source_id": "huge",
        "version": 1,
        "modified_at": "2024-01-01T00:00:00Z",
        "acl": ["*"],
        "text": "x " * 5_000_000,
    }
    poison = [
        (b"bad-json", b"{not json"),
        (b"not-utf8", b"\xff\xfe\x00garbage"),
        (b"no-schema", json.dumps({"op": "delete", "source_id": "a", "version": 1}).encode()),
        (
            b"wrong-type",
            json.dumps(
                {"schema": "streamdedup.document/v1", "op": "delete", "source_id": "a", "version": "seven"}
            ).encode(),
        ),
        (b"array", b"[1, 2, 3]"),
        (b"null-value", None),
        (b"huge", json.dumps(big).encode()),
    ]
    records = [(e.source_id.encode(), None) for e in good]
    mixed = []
    for i, event in enumerate(good):
        from streamdedup.contract.codec import encode_event

        mixed.append((records[i][0], encode_event(event)))
        if i < len(poison):
            mixed.append(poison[i])
    mixed.extend(poison[len(good) :])
    deployment.produce_raw(mixed)
    deployment.events.extend(good)
    deployment.wait_until_idle()
    assert_view_is_the_reference(deployment, engine)
    letters = deployment_dlq = __import__("tests.integration.harness", fromlist=["dlq_records"]).dlq_records(
        deployment
    )
    assert len(letters) == len(poison)
    for record in letters:
        headers = record["headers"]
        assert headers["origin-topic"] == deployment.names.documents
        assert int(headers["origin-partition"]) >= 0 and int(headers["origin-offset"]) >= 0
        assert headers["error"]
    by_key = {r["key"]: r for r in deployment_dlq}
    assert by_key[b"bad-json"]["value"] == b"{not json"  # the original bytes
    assert "version: must be an integer" in by_key[b"wrong-type"]["headers"]["error"]
    assert "exceeds the limit" in by_key[b"huge"]["headers"]["error"]
    samples = worker.metrics()
    assert samples["streamdedup_events_in_total"] == len(mixed)
    dead = sum(v for k, v in samples.items() if k.startswith("streamdedup_dead_letters_total"))
    assert samples["streamdedup_events_processed_total"] + dead == samples["streamdedup_events_in_total"]
    assert dead == len(poison)


def test_lineages_on_the_broker_reach_the_reference(deployment):
    # Versions of documents arrive in any order, the newest are deleted, members move between lineages: the
    # collection stage elects on its partition and tells the source partitions through the stage topics.
    engine = Engine(EngineParams(lineage_rules=LINEAGE_RULES))
    rng = random.Random(11)
    events = lineage_feed(rng, events=60, pool=ParagraphPool(rng, families=2))
    deployment.start_worker(env={"STREAMDEDUP_LINEAGE_RULES": LINEAGE_RULES})
    deployment.produce(events)
    deployment.wait_until_idle()
    view = deployment.view()
    live = live_sources(events, engine.params)
    assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
    assert view.compacted(with_revision=False) == Reference(engine, live).compacted()
    assert any(chunk.get("current") is False for chunk in view.chunks.values())
