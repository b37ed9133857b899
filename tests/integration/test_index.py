"""`streamdedup index` on the real broker, into a real LanceDB directory: the index follows the view."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamdedup.core.model import AclEvent, DeleteEvent
from streamdedup.core.output_view import View
from streamdedup.index.lancedb import LanceDBSink
from tests.helpers import upsert
from tests.integration.harness import REPO, Deployment
from tests.integration.test_service import example_events
from tests.unit.test_index_command import HOLIDAYS, HOLIDAYS_AGAIN

pytestmark = pytest.mark.integration

DIMENSIONS = 64  # tests/integration/embedder.py


def index(deployment: Deployment, into: Path, log: Path, *extra: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", "index", "--into", f"lancedb://{into}", *extra],
        env={
            **os.environ,
            **deployment.env,
            "STREAMDEDUP_EMBEDDER": "callable:tests.integration.embedder:embedder",
            "STREAMDEDUP_TEST_EMBED_LOG": str(log),
            **(env or {}),
        },
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def embedded(log: Path) -> list[str]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def rows_of(into: Path) -> dict[str, dict]:
    sink = LanceDBSink(into, DIMENSIONS)
    try:
        return {chunk_id: dataclasses.asdict(row) for chunk_id, row in sink.rows(sink.chunk_ids()).items()}
    finally:
        sink.close()


def assert_index_is_the_view(into: Path, view: View) -> None:
    rows = rows_of(into)
    assert sorted(rows) == sorted(view.chunks)
    sources: dict[str, set[str]] = {}
    for source_id, mapping in view.mappings.items():
        for entry in mapping["chunks"]:
            sources.setdefault(entry["chunk_id"], set()).add(source_id)
    for chunk_id, chunk in view.chunks.items():
        row = rows[chunk_id]
        assert row["text"] == chunk["text"] and row["content_hash"] == chunk["content_hash"]
        assert list(row["acl"]) == chunk["acl"]
        assert list(row["source_ids"]) == sorted(sources[chunk_id])


def test_the_index_holds_the_live_chunks_and_embeds_each_text_once(deployment: Deployment, tmp_path: Path):
    into, log = tmp_path / "index", tmp_path / "embedded.jsonl"
    deployment.start_worker()
    deployment.produce(example_events())
    deployment.wait_until_idle()
    first = index(deployment, into, log)
    assert first.returncode == 0, first.stderr
    assert_index_is_the_view(into, deployment.view())
    texts = embedded(log)
    assert sorted(texts) == sorted({row["text"] for row in rows_of(into).values()})

    # An ACL change and a replay of every event: rows change in place, nothing is embedded again.
    before = rows_of(into)
    deployment.produce([AclEvent(source_id="docs:ml/serving-guide", version=2, acl=("eng", "ml"))])
    deployment.produce(example_events())
    deployment.wait_until_idle()
    second = index(deployment, into, log)
    assert second.returncode == 0, second.stderr
    view = deployment.view()
    assert_index_is_the_view(into, view)
    assert embedded(log) == texts
    changed = [c for c, row in rows_of(into).items() if row["acl"] != before[c]["acl"]]
    assert changed and all("ml" in view.chunks[c]["acl"] for c in changed)
    assert "metadata-only updates" in second.stderr

    # The last source of a chunk is deleted: its row goes, and again nothing is embedded.
    gone = set(view.chunks)
    deployment.produce([DeleteEvent(source_id="wiki:ml/serving-notes", version=2)])
    deployment.wait_until_idle()
    third = index(deployment, into, log)
    assert third.returncode == 0, third.stderr
    view = deployment.view()
    assert_index_is_the_view(into, view)
    assert gone - set(view.chunks) and not (gone - set(view.chunks)) & set(rows_of(into))
    assert embedded(log) == texts


def test_a_writer_killed_mid_feed_ends_in_the_same_index_without_embedding_twice(
    deployment: Deployment, tmp_path: Path
):
    deployment.start_worker()
    deployment.produce(example_events())
    deployment.produce([DeleteEvent(source_id="wiki:ml/serving-notes", version=2)])
    deployment.wait_until_idle()
    whole, whole_log = tmp_path / "whole", tmp_path / "whole.jsonl"
    assert index(deployment, whole, whole_log).returncode == 0

    into, log = tmp_path / "index", tmp_path / "embedded.jsonl"
    small = {"STREAMDEDUP_FETCH_RECORDS": "3"}
    for point in ("index-sink-written:2", "index-sink-written:4"):
        killed = index(deployment, into, log, env={**small, "STREAMDEDUP_FAULT_KILL_AT": point})
        assert killed.returncode == -9, (point, killed.stderr)
    done = index(deployment, into, log, env=small)
    assert done.returncode == 0, done.stderr
    assert_index_is_the_view(into, deployment.view())
    texts = embedded(log)
    assert len(texts) == len(set(texts))  # no text embedded twice across the kills
    assert {c: r["text"] for c, r in rows_of(into).items()} == {
        c: r["text"] for c, r in rows_of(whole).items()
    }


def test_a_paraphrase_indexed_from_the_topics_is_flagged_on_the_review_topic(
    deployment: Deployment, tmp_path: Path
):
    deployment.start_worker()
    deployment.produce(
        [
            upsert("wiki:holidays", 1, [HOLIDAYS], acl=("*",)),
            upsert("helpdesk:holidays", 1, [HOLIDAYS_AGAIN], acl=("support",)),
        ]
    )
    deployment.wait_until_idle()
    # The default embedder: the offline ONNX model.
    result = subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", "index", "--into", f"lancedb://{tmp_path / 'index'}"],
        env={**os.environ, **deployment.env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    semantic = [key for reason, key in deployment.review_keys() if reason == "semantic"]
    assert len(semantic) == 1
    assert len(deployment.view().chunks) == 2  # flagged, never merged
