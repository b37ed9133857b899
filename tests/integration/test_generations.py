"""Generations on the broker: a second generation under other parameters is built from the serving generation's
retained record while the first keeps serving and events keep arriving, with no event produced again. At lag 0 each
generation's view is an embedded run of every event under its own parameters; a worker of the new generation killed
during the build resumes it; readers switch, and the old generation is retired."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from streamdedup.cli.topic_io import materialize
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGES
from streamdedup.core.model import InputEvent
from streamdedup.core.params import EngineParams
from streamdedup.drivers.kafka.admin import consumer_lag, partitions_of
from streamdedup.drivers.kafka.generations import generation_status, read_registry
from streamdedup.drivers.kafka.topics import TopicNames
from streamdedup.testing.random_feeds import ParagraphPool, random_feed, with_decisions
from tests.helpers import run_embedded
from tests.integration.harness import REPO, Deployment

pytestmark = pytest.mark.integration


def history(seed: int) -> list[InputEvent]:
    rng = random.Random(seed)
    pool = ParagraphPool(rng, families=5)
    return with_decisions(rng, random_feed(rng, sources=60, events=420, pool=pool), pool, count=20)


def cli(deployment: Deployment, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", *args],
        env={**os.environ, **deployment.env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def lag(deployment: Deployment, generation: int) -> int:
    settings = deployment.settings.model_copy(update={"generation": generation})
    names = settings.topic_names()
    return int(asyncio.run(consumer_lag(settings, [names.documents, *(names.stage(s) for s in STAGES)])))


def wait_for_lag_0(deployment: Deployment, generations: tuple[int, ...], timeout: float = 360.0) -> None:
    deadline = time.monotonic() + timeout
    quiet = 0
    while time.monotonic() < deadline:
        for worker in deployment.workers:
            if not worker.stopped and worker.process.poll() is not None and worker.process.returncode != -9:
                raise AssertionError(f"a worker exited with {worker.process.returncode}:\n{worker.tail()}")
        quiet = quiet + 1 if all(lag(deployment, g) == 0 for g in generations) else 0
        if quiet >= 3:
            return
        time.sleep(0.5)
    raise AssertionError(f"generations {generations} did not reach lag 0 within {timeout} s")


def view(deployment: Deployment, generation: int | None) -> bytes:
    settings = deployment.settings.model_copy(update={"generation": generation})
    return asyncio.run(materialize(settings)).compacted(with_revision=False)


@pytest.mark.parametrize(
    ("setting", "params"),
    [("threshold=0.85", EngineParams(threshold=0.85)), ("shingle_size=3", EngineParams(shingle_size=3))],
    ids=["threshold", "shingles"],
)
def test_a_new_generation_is_built_beside_the_serving_one_with_no_event_sent_again(
    kafka_broker: str, tmp_path: Path, setting: str, params: EngineParams
):
    deployment = Deployment(kafka_broker, tmp_path)
    events = history(11)
    before, during, after = events[:250], events[250:340], events[340:]
    try:
        deployment.start_worker(name="g1")
        deployment.produce(before)
        deployment.wait_until_idle(timeout=300)

        # Events keep arriving while generation 2 is created.
        arriving = threading.Thread(target=deployment.produce, args=(during,))
        arriving.start()
        created = cli(deployment, "--set", setting, "generations", "create")
        arriving.join()
        assert created.returncode == 0, created.stderr
        assert "generation 2 created" in " ".join(created.stderr.split())

        # Its first worker dies during the build; the next one resumes it.
        data = tmp_path / "g2"
        doomed = deployment.start_worker(
            data,
            "g2-doomed",
            env={"STREAMDEDUP_GENERATION": "2", "STREAMDEDUP_FAULT_KILL_AT": "state-committed:12"},
        )
        deployment.produce(after)
        assert doomed.wait_for_exit() == -9, doomed.tail()
        assert lag(deployment, 2) > 0  # it died with the build unfinished
        resumed = deployment.start_worker(data, "g2-resumed", env={"STREAMDEDUP_GENERATION": "2"})
        wait_for_lag_0(deployment, (1, 2))

        first = view(deployment, 1)
        second = view(deployment, 2)
        assert first == run_embedded(Engine(EngineParams()), events).compacted(with_revision=False)
        assert second == run_embedded(Engine(params), events).compacted(with_revision=False)
        assert first != second  # the parameters matter on this feed
        # Nothing was produced again: the documents topic holds each event once.
        assert len(deployment.records("documents")) == len(events)
        # The resumed worker did not start over: of the input events generation 2 was given (its seed and every
        # event from its cut on), it applied only those its first worker had not.
        applied = resumed.metrics()["streamdedup_events_processed_total"]
        seeded = asyncio.run(read_registry(deployment.settings)).generations[2].seeded
        assert seeded > 0
        assert applied < seeded + len(during) + len(after)

        status = cli(deployment, "generations", "status")
        assert status.returncode == 0, status.stderr
        rows = {r.generation: r for r in asyncio.run(generation_status(deployment.settings))}
        assert (rows[1].serving, rows[1].lag, rows[2].serving, rows[2].lag) == (True, 0, False, 0)

        # Readers switch at lag 0; the old generation is retired, its topics deleted.
        assert view(deployment, None) == first
        switched = cli(deployment, "generations", "switch", "2")
        assert switched.returncode == 0, switched.stderr
        assert view(deployment, None) == second
        refused = cli(deployment, "generations", "retire", "2")
        assert refused.returncode == 1 and "serves the readers" in refused.stderr
        running = cli(deployment, "generations", "retire", "1")
        assert running.returncode == 1 and "still has 1 worker(s) running" in " ".join(running.stderr.split())
        deployment.workers[0].stop()
        retired = cli(deployment, "generations", "retire", "1")
        assert retired.returncode == 0, retired.stderr
        old = TopicNames(deployment.prefix, 1)
        assert asyncio.run(partitions_of(deployment.settings, old.own())) == {}
        assert view(deployment, None) == second
        again = deployment.start_worker(name="g1-again")
        assert again.wait_for_exit() == 1 and "generation 1 was retired" in again.tail()
    finally:
        deployment.stop()
