"""The service's commands as a user runs them: produce, worker, tail, materialize."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamdedup.core.messages import Output
from streamdedup.core.output_view import View
from streamdedup.query.live_view import View as LocalView
from tests.helpers import embedded_review_keys, run_embedded, unflagged
from tests.integration.test_service import EXAMPLE, example_events

pytestmark = pytest.mark.integration


def cli(deployment, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **deployment.env}
    return subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_produce_tail_and_materialize_commands(deployment, engine, tmp_path: Path):
    # Exact-copy merges are audited, and so counted, only when asked for.
    worker = deployment.start_worker(env={"STREAMDEDUP_AUDIT_EXACT_COPIES": "true"})
    produced = cli(deployment, "produce", str(EXAMPLE))
    assert produced.returncode == 0, produced.stderr
    assert "sent 20 lines" in " ".join(produced.stderr.split())
    deployment.events.extend(example_events())
    deployment.wait_until_idle()

    out = tmp_path / "view.jsonl"
    result = cli(deployment, "materialize", "--out", str(out))
    assert result.returncode == 0, result.stderr
    view = View().apply_all(Output(**json.loads(line)) for line in out.read_text().splitlines())
    embedded = run_embedded(engine, example_events())
    assert view.compacted(with_revision=False) == embedded.compacted(with_revision=False)

    letters = cli(deployment, "tail", "dlq", "--no-follow")
    (letter,) = [json.loads(line) for line in letters.stdout.splitlines()]
    assert letter["headers"]["error"] == "modified_at: is required"
    assert letter["headers"]["origin-topic"] == deployment.names.documents
    flags = [
        json.loads(line) for line in cli(deployment, "tail", "review", "--no-follow").stdout.splitlines()
    ]
    # Which pairs are flagged can depend on the order verifications arrive in (review is an event stream, design
    # §4): the flags must account for every pair the embedded run flags.
    flagged = sorted({(f["value"]["reason"], f["key"]) for f in flags})
    assert [reason for reason, _ in flagged] == ["acl_boundary", "fact_conflict", "fact_conflict"]
    assert unflagged(embedded_review_keys(engine, example_events()), flagged) == []
    assert len(cli(deployment, "tail", "review", "--no-follow", "--limit", "2").stdout.splitlines()) == 2

    samples = worker.metrics()
    lags = {k: v for k, v in samples.items() if k.startswith("streamdedup_consumer_lag{")}
    assert lags and all(v == 0 for v in lags.values())
    # Exact copies always merge; whether the near copy arrives as a merge or a swap depends on timing.
    assert samples['streamdedup_merges_total{kind="exact"}'] >= 1
    near = samples.get('streamdedup_merges_total{kind="near"}', 0)
    assert near + samples["streamdedup_canonical_changes_total"] >= 1
    # The content stage's partition stores read through the worker's record cache, which reports itself.
    assert samples["streamdedup_state_cache_bytes"] > 0
    assert samples["streamdedup_state_cache_capacity_bytes"] == 1024 * 1024 * 1024
    cache_reads = [
        samples[f'streamdedup_state_cache_reads_total{{from="{where}"}}'] for where in ("cache", "store")
    ]
    assert sum(cache_reads) > 0


def folded(view: LocalView) -> View:
    found = View()
    view.refresh()
    found.chunks = {c: value for c in view.chunk_ids() if (value := view.chunk(c)) is not None}
    found.mappings = {s: value for s in view.source_ids() if (value := view.mapping(s)) is not None}
    return found


def test_materialize_into_a_directory_follows_the_topics(deployment, engine, tmp_path: Path):
    deployment.start_worker()
    into = tmp_path / "view"
    follower = subprocess.Popen(
        [sys.executable, "-m", "streamdedup.cli", "materialize", "--into", str(into), "--follow"],
        env={**os.environ, **deployment.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert cli(deployment, "produce", str(EXAMPLE)).returncode == 0
        deployment.events.extend(example_events())
        deployment.wait_until_idle()
        expected = run_embedded(engine, example_events()).compacted(with_revision=False)
        deadline = time.monotonic() + 180
        while not (into / "db" / "CURRENT").exists():
            assert follower.poll() is None and time.monotonic() < deadline, "the view was never created"
            time.sleep(0.1)
        with LocalView.open(into) as view:
            while folded(view).compacted(with_revision=False) != expected:
                assert follower.poll() is None, follower.stderr.read() if follower.stderr else ""
                assert time.monotonic() < deadline, "the followed view never matched the embedded run's"
                time.sleep(0.2)
    finally:
        follower.send_signal(signal.SIGTERM)
        _, said = follower.communicate(timeout=120)
    assert follower.returncode == 0, said
    # Everything is applied: a second run reads from where the follower stopped and finds nothing new.
    again = cli(deployment, "materialize", "--into", str(into))
    assert again.returncode == 0, again.stderr
    assert ": 0 records applied" in " ".join(again.stderr.split())
    with LocalView.open(into) as view:
        assert folded(view).compacted(with_revision=False) == expected


def test_a_worker_refuses_other_dedup_parameters(deployment):
    deployment.start_worker()
    deployment.wait_until_idle()  # the first worker has recorded the parameters
    result = cli(deployment, "--set", "threshold=0.9", "worker", "--data-dir", str(deployment.root / "other"))
    assert result.returncode == 1
    assert "threshold=0.8 (settings say 0.9)" in " ".join(result.stderr.split())


def test_a_worker_refuses_topics_with_another_partition_count(deployment):
    # The deployment created every topic with 4 partitions, the tables' changelogs included.
    env_two = {**deployment.env, "STREAMDEDUP_PARTITIONS": "2"}
    result = subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", "worker", "--data-dir", str(deployment.root / "two")],
        env={**os.environ, **env_two},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    said = " ".join(result.stderr.split())
    assert "has 4 partitions but STREAMDEDUP_PARTITIONS is 2" in said
