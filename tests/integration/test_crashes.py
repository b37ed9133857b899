"""Crashes: a worker killed at random moments and at each dangerous point, a wiped data directory, a broker
restart while producing, and a rebalance. After each, the view equals an embedded run of the same feed (revision
aside), every pair that run flags for review is flagged, and the group's lag drains to 0."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from streamdedup.core.messages import RefUpdate
from streamdedup.core.model import DeleteEvent, InputEvent
from streamdedup.drivers.kafka.admin import read_to_end
from streamdedup.drivers.kafka.batches import decode_batch, encode_batches
from streamdedup.testing.random_feeds import random_feed
from tests.helpers import embedded_review_keys, ref_updates, run_embedded, unflagged, upsert
from tests.integration.conftest import BROKER_SCRIPT, RESTART_PORTS, free_pair
from tests.integration.harness import Deployment
from tests.integration.test_service import example_events

pytestmark = pytest.mark.integration


def crash_feed(seed: int) -> list[InputEvent]:
    return example_events() + random_feed(random.Random(seed), sources=14, events=70)


def assert_recovered(deployment: Deployment, engine, feed: list[InputEvent]) -> None:
    deployment.wait_until_idle(timeout=240)
    embedded = run_embedded(engine, feed)
    assert deployment.view().compacted(with_revision=False) == embedded.compacted(with_revision=False)
    # Every pair the embedded run flags is accounted for; a run that saw intermediate versions may flag more pairs.
    assert unflagged(embedded_review_keys(engine, feed), deployment.review_keys()) == []


@pytest.mark.parametrize("point", ["changelog-sent", "state-committed", "outputs-partial"])
def test_a_worker_killed_at_a_dangerous_point_recovers(deployment, engine, tmp_path: Path, point: str):
    feed = crash_feed(21)
    data = tmp_path / "state"
    doomed = deployment.start_worker(data, "doomed", env={"STREAMDEDUP_FAULT_KILL_AT": f"{point}:4"})
    deployment.produce(feed[:50])
    assert doomed.wait_for_exit() == -9, doomed.tail()  # it killed itself at the point
    deployment.start_worker(data, "after")
    deployment.produce(feed[50:])
    assert_recovered(deployment, engine, feed)


def test_a_call_cut_after_its_outputs_is_applied_again_exactly_as_it_was(deployment, engine, tmp_path: Path):
    """A content call delivers a chunk and dies before its changelog; by the restart, the partition also holds
    the removal of that chunk's only source. Applied together, the two would change nothing and write nothing, and
    the delivered chunk would stay on the output topic for good: the cut call must be applied alone, again."""
    text = (
        "Payroll questions go to the people team: write to the payroll inbox with your employee number and the "
        "month concerned, and a payroll specialist answers within two working days with the corrected payslip"
    )
    added = upsert("space-hr", 1, [text], acl=("hr",))
    data = tmp_path / "state"
    doomed = deployment.start_worker(data, "doomed", env={"STREAMDEDUP_FAULT_KILL_AT": "outputs-sent:1"})
    deployment.produce([added])
    assert doomed.wait_for_exit() == -9, doomed.tail()
    chunks = [key for key, value in deployment.records("canonical-chunks") if value is not None]
    assert len(chunks) == 1, "the cut call delivered the chunk"

    async def content_messages() -> list[tuple[int, RefUpdate]]:
        topic = deployment.names.stage("content")
        found = []
        async for _, partition, _, _, value, _ in read_to_end(deployment.settings, [topic]):
            found += [(partition, m) for m in ref_updates(decode_batch(value))]
        return found

    ((partition, ref),) = asyncio.run(content_messages())
    assert ref.content_hash == chunks[0] and ref.positions == (0,)
    # The source stage's removal, as it sends it when the delete comes, right behind the cut call's input.
    removal = RefUpdate(ref.content_hash, ref.source_id, 2, (), attrs_seq=ref.attrs_seq)
    deployment.produce_stage("content", partition, encode_batches([removal], max_bytes=1 << 20))
    deleted = DeleteEvent(source_id="space-hr", version=2)
    deployment.produce([deleted])
    deployment.start_worker(data, "after")
    assert_recovered(deployment, engine, [added, deleted])
    assert deployment.view().chunks == {}


def test_a_worker_killed_at_random_moments_recovers_each_time(deployment, engine, tmp_path: Path):
    rng = random.Random(5)
    feed = crash_feed(22)
    data = tmp_path / "state"
    parts = [feed[i : i + 25] for i in range(0, len(feed), 25)]
    worker = deployment.start_worker(data, "w0")
    for i, part in enumerate(parts[:-1]):
        producing = threading.Thread(target=deployment.produce, args=(part,))
        producing.start()
        time.sleep(rng.uniform(0.2, 2.5))  # a random moment while the part is being produced and processed
        worker.kill()
        producing.join(120)
        worker = deployment.start_worker(data, f"w{i + 1}")
    deployment.produce(parts[-1])
    assert_recovered(deployment, engine, feed)


def test_a_worker_killed_and_restarted_on_a_wiped_data_directory_recovers(deployment, engine, tmp_path: Path):
    feed = crash_feed(23)
    data = tmp_path / "state"
    worker = deployment.start_worker(data, "first")
    deployment.produce(feed[:60])
    deployment.wait_until_idle(timeout=240)
    producing = threading.Thread(target=deployment.produce, args=(feed[60:80],))
    producing.start()
    time.sleep(1.0)
    worker.kill()
    producing.join(120)
    shutil.rmtree(data)  # nothing local: every partition store is rebuilt from its changelog
    deployment.start_worker(data, "wiped")
    deployment.produce(feed[80:])
    assert_recovered(deployment, engine, feed)


def test_a_rebalance_when_a_worker_dies_and_another_joins(deployment, engine, tmp_path: Path):
    feed = crash_feed(24)
    deployment.start_worker(name="a")
    b = deployment.start_worker(name="b")
    deployment.produce(feed[:40])
    producing = threading.Thread(target=deployment.produce, args=(feed[40:70],))
    producing.start()
    time.sleep(1.0)
    b.kill()  # its partitions go to the others once the group notices
    deployment.start_worker(name="c")
    producing.join(120)
    deployment.produce(feed[70:])
    assert_recovered(deployment, engine, feed)


def test_a_broker_restart_while_producing(engine, tmp_path: Path):
    port = free_pair(RESTART_PORTS + 100)
    env = {**os.environ, "KAFKA_PORT": str(port), "KAFKA_HOME_DIR": str(tmp_path / "kafka")}

    def script(command: str, **extra: str) -> None:
        result = subprocess.run(
            [str(BROKER_SCRIPT), command],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stderr

    script("start")
    (tmp_path / "deployment").mkdir()
    deployment = Deployment(f"kafka://127.0.0.1:{port}", tmp_path / "deployment")
    try:
        feed = crash_feed(25)
        deployment.start_worker(name="w")
        deployment.produce(feed[:40])
        deployment.wait_until_idle(timeout=240)  # the worker is running when the broker goes away
        failures: list[BaseException] = []

        def produce_rest() -> None:
            try:
                deployment.produce(feed[40:])
            except BaseException as exc:  # reported by the assertion below
                failures.append(exc)

        producing = threading.Thread(target=produce_rest)
        producing.start()
        time.sleep(0.5)
        script("stop", KAFKA_KEEP_DATA="1")
        script("start")  # the same storage: topics, offsets and changelogs are still there
        producing.join(300)
        assert failures == [] and not producing.is_alive()
        assert_recovered(deployment, engine, feed)
    finally:
        deployment.stop()
        script("stop")
