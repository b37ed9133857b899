"""Generations on the broker: a second generation under other parameters is built from the serving generation's
retained record while the first keeps serving and events keep arriving, with no event produced again. At lag 0 each
generation's view is an embedded run of every event under its own parameters; a worker of the new generation killed
during the build resumes it; readers switch, and the old generation is retired."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import lancedb
import pytest

from streamdedup.cli.topic_io import materialize
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGES
from streamdedup.core.model import InputEvent
from streamdedup.core.params import EngineParams
from streamdedup.drivers.kafka.admin import consumer_lag, partitions_of
from streamdedup.drivers.kafka.generations import generation_status, read_registry
from streamdedup.drivers.kafka.topics import TopicNames
from streamdedup.index.catalog import read_catalog, serving_table
from streamdedup.query.live_view import ViewWriter
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

        status = cli(deployment, "generations", "status", "--watch", "--timeout", "120")
        assert status.returncode == 0, status.stderr
        assert "generation 2: lag 0" in status.stderr
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


def serving_rows(into: Path) -> tuple[str, frozenset[str]]:
    """The table readers query now, and the chunk ids it holds (as a reader resolves it before each query)."""
    table = serving_table(into)
    ids = lancedb.connect(into).open_table(table).search().select(["chunk_id"]).limit(None).to_arrow()
    return table, frozenset(ids.column("chunk_id").to_pylist())


def until(condition, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.2)


def test_the_index_builds_the_new_generation_beside_the_serving_table_and_switches_at_lag_0(
    kafka_broker: str, tmp_path: Path
):
    deployment = Deployment(kafka_broker, tmp_path)
    events = history(5)[:300]
    into, log = tmp_path / "index", tmp_path / "embedded.jsonl"
    env = {
        **os.environ,
        **deployment.env,
        "STREAMDEDUP_EMBEDDER": "callable:tests.integration.embedder:embedder",
        "STREAMDEDUP_TEST_EMBED_LOG": str(log),
    }
    output = (tmp_path / "index.log").open("w")
    indexer: subprocess.Popen[bytes] | None = None
    try:
        deployment.start_worker(name="g1")
        deployment.produce(events)
        deployment.wait_until_idle(timeout=300)
        first = asyncio.run(materialize(deployment.settings.model_copy(update={"generation": 1})))
        indexer = subprocess.Popen(
            [sys.executable, "-m", "streamdedup.cli", "index", "--into", f"lancedb://{into}", "--follow"],
            env=env,
            cwd=REPO,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        until(
            lambda: (
                read_catalog(into).serving == "chunks"
                and serving_rows(into) == ("chunks", frozenset(first.chunks))
            ),
            "generation 1's table",
        )
        before = embedded_texts(log)

        # A reader queries every 100 ms while generation 2 is built, switched to and indexed.
        seen: list[tuple[str, frozenset[str]]] = []
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                seen.append(serving_rows(into))
                done.wait(0.1)

        reader = threading.Thread(target=read)
        reader.start()
        created = cli(deployment, "--set", "threshold=0.85", "generations", "create")
        assert created.returncode == 0, created.stderr
        deployment.start_worker(tmp_path / "g2", "g2", env={"STREAMDEDUP_GENERATION": "2"})
        wait_for_lag_0(deployment, (1, 2))
        second = asyncio.run(materialize(deployment.settings.model_copy(update={"generation": 2})))
        assert set(second.chunks) != set(first.chunks)

        def built() -> bool:
            try:
                table = lancedb.connect(into).open_table("chunks-2")
            except ValueError:  # not created yet
                return False
            ids = table.search().select(["chunk_id"]).limit(None).to_arrow().column("chunk_id").to_pylist()
            return set(ids) == set(second.chunks)

        until(built, "generation 2's table")
        assert serving_table(into) == "chunks"  # built, but readers switch only with the deployment
        switched = cli(deployment, "generations", "switch", "2")
        assert switched.returncode == 0, switched.stderr
        until(lambda: any(table == "chunks-2" for table, _ in seen[-3:]), "the readers' switch")
        done.set()
        reader.join()

        # Never a partial table: each query saw generation 1's whole table, then generation 2's.
        tables = [table for table, _ in seen]
        assert tables == sorted(tables) and set(tables) == {"chunks", "chunks-2"}
        assert {ids for table, ids in seen if table == "chunks"} == {frozenset(first.chunks)}
        assert {ids for table, ids in seen if table == "chunks-2"} == {frozenset(second.chunks)}

        indexer.send_signal(signal.SIGTERM)
        assert indexer.wait(timeout=120) == 0
        indexer = None
        # No text was embedded twice: generation 2's table took the vectors generation 1 had, by content hash.
        after = embedded_texts(log)[len(before) :]
        assert not set(after) & set(before) and len(after) == len(set(after))
        summary = (tmp_path / "index.log").read_text()
        reused = int(
            next(line for line in summary.splitlines() if "vectors reused from another table" in line)
            .split()[-2]
            .replace(",", "")
        )
        with ViewWriter(into / "_writer-chunks-2") as cache:
            needed = cache.extra_names("vector:")
        assert reused > 0 and reused + len(after) == len(needed)
        shared = {c["content_hash"] for c in first.chunks.values()} & {
            c["content_hash"] for c in second.chunks.values()
        }
        assert shared and len(shared) <= reused
    finally:
        if indexer is not None:
            indexer.kill()
        output.close()
        deployment.stop()


def embedded_texts(log: Path) -> list[str]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
