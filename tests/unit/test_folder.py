"""A folder as a feed: one-shot runs and --watch."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.core.messages import Output
from streamdedup.core.output_view import View

PARAGRAPH = (
    "The deployment guide explains how the service is rolled out to every region with a canary first and the "
    "rest of the fleet after an hour of clean metrics from the canary hosts"
)


def read_view(out: Path) -> View:
    lines = out.read_text().splitlines() if out.exists() else []
    return View().apply_all(Output(**json.loads(line)) for line in lines)


def run(folder: Path, state: Path, out: Path, *extra: str):
    return CliRunner().invoke(app, ["run", str(folder), "--state", str(state), "--out", str(out), *extra])


def test_a_folder_run_maps_every_text_file_and_follows_deletions(tmp_path):
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "guide" / "deploy.md").write_text(f"# Deploy\n\n{PARAGRAPH}\n")
    (docs / "guide" / "deploy.html").write_text(f"<h1>Deploy</h1><p>{PARAGRAPH}</p>")
    (docs / "notes.txt").write_text(f"Deploy\n\n{PARAGRAPH}\n")
    (docs / "notes.txt.acl.json").write_text(json.dumps({"acl": ["ops"], "authority": 2}))
    (docs / "image.png").write_bytes(b"\x89PNG")
    (docs / ".hidden.md").write_text("secret")
    (docs / "broken.txt").write_bytes(random.Random(7).randbytes(2000))  # no encoding explains these bytes
    state, out = tmp_path / "state", tmp_path / "out.jsonl"

    result = run(docs, state, out)
    assert result.exit_code == 0, result.output
    view = read_view(out)
    assert set(view.mappings) == {"guide/deploy.md", "guide/deploy.html", "notes.txt"}
    (chunk,) = view.chunks.values()  # one passage in three formats
    assert chunk["canonical"]["source_id"] == "notes.txt"  # authority 2 from its sidecar
    assert {tuple(s["acl"]) for s in chunk["sources"]} == {("*",), ("ops",)}
    (letter,) = [
        json.loads(line)["value"] for line in out.read_text().splitlines() if '"topic":"dlq"' in line
    ]
    assert letter["error"].startswith("data: not text") and letter["origin"]["source_id"] == "broken.txt"

    # Nothing changed: a second run sends nothing. Then a deletion is noticed on the next run.
    lines = len(out.read_text().splitlines())
    assert run(docs, state, out).exit_code == 0
    assert len(out.read_text().splitlines()) == lines
    (docs / "guide" / "deploy.html").unlink()
    assert run(docs, state, out).exit_code == 0
    view = read_view(out)
    assert "guide/deploy.html" not in view.mappings
    (chunk,) = view.chunks.values()
    assert {s["source_id"] for s in chunk["sources"]} == {"guide/deploy.md", "notes.txt"}


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the watcher's outputs")


def test_watch_follows_creations_edits_and_deletions(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(f"{PARAGRAPH}\n")
    state, out = tmp_path / "state", tmp_path / "out.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "streamdedup.cli", "run", str(docs), "--state", str(state), "--out", str(out),
         "--watch", "--batch-size", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    try:
        _wait_for(lambda: "a.md" in read_view(out).mappings)
        (docs / "b.md").write_text(f"{PARAGRAPH}\n")  # a copy appears
        _wait_for(lambda: "b.md" in read_view(out).mappings)
        assert len(read_view(out).chunks) == 1
        (docs / "b.md").write_text("A completely different paragraph about the canteen menu for next week.\n")
        _wait_for(lambda: len(read_view(out).chunks) == 2)
        (docs / "a.md").unlink()
        _wait_for(lambda: "a.md" not in read_view(out).mappings)
        tombstones = [json.loads(line) for line in out.read_text().splitlines()]
        assert {"topic": "source-mappings", "key": "a.md", "value": None} in tombstones
        assert len(read_view(out).chunks) == 1
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output.decode()
    assert b"canonical chunks" in output  # the summary is printed on the way out


def test_hostile_sidecars_are_dead_lettered_and_the_other_files_applied(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    sidecars = {
        "deep": "[" * 5000 + "]" * 5000,
        "huge-authority": json.dumps({"acl": ["ops"], "authority": 10**40}),
        "float-authority": '{"acl": ["ops"], "authority": 1e308}',
        "bad-acl": json.dumps({"acl": "ops"}),
        "not-json": "{acl",
    }
    for name, sidecar in sidecars.items():
        (docs / f"{name}.txt").write_text(PARAGRAPH)
        (docs / f"{name}.txt.acl.json").write_text(sidecar)
    (docs / "good.txt").write_text(PARAGRAPH)
    state, out = tmp_path / "state", tmp_path / "out.jsonl"
    result = run(docs, state, out)
    assert result.exit_code == 0, result.output
    view = read_view(out)
    assert set(view.mappings) == {"good.txt"}
    letters = [json.loads(line)["value"] for line in out.read_text().splitlines() if '"dlq"' in line]
    assert sorted(Path(letter["origin"]["file"]).name for letter in letters) == sorted(
        f"{n}.txt" for n in sidecars
    )


def test_a_file_uri_resolves_links_of_the_folder_and_of_the_file(tmp_path):
    from streamdedup.core.model import UpsertEvent
    from streamdedup.drivers.folder import FolderFeed

    real = tmp_path / "real"
    (real / "docs" / "guide").mkdir(parents=True)
    (real / "docs" / "guide" / "deploy.md").write_text(f"# Deploy\n\n{PARAGRAPH}\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "target.txt").write_text(PARAGRAPH)
    (real / "docs" / "linked.txt").symlink_to(tmp_path / "elsewhere" / "target.txt")
    (real / "docs" / "linked-folder").symlink_to(tmp_path / "elsewhere")  # not descended into
    (real / "docs" / "deploy.md.acl.json").write_text('{"acl": ["eng"], "authority": 2}')
    (real / "docs" / "deploy.md").write_text(PARAGRAPH)
    os.utime(real / "docs" / "deploy.md", ns=(1_000_000_000, 1_000_000_000))
    os.utime(real / "docs" / "deploy.md.acl.json", ns=(2_000_000_000, 2_000_000_000))
    (tmp_path / "link").symlink_to(real)
    feed = FolderFeed(tmp_path / "link" / "docs", "docs")
    items = {source_id: (version, event) for source_id, version, event in feed.sync()}
    assert sorted(items) == ["deploy.md", "guide/deploy.md", "linked.txt"]
    for source_id, (_, event) in items.items():
        assert isinstance(event, UpsertEvent)
        path = tmp_path / "link" / "docs" / source_id
        assert event.attrs.uri == path.resolve().as_uri()
    linked = items["linked.txt"][1]
    assert isinstance(linked, UpsertEvent)
    assert linked.attrs.uri == (tmp_path / "elsewhere" / "target.txt").as_uri()
    version, event = items["deploy.md"]
    assert version == 2_000_000_000  # the sidecar's time, the later one
    assert isinstance(event, UpsertEvent)
    assert event.attrs.acl == ("eng",) and event.attrs.authority == 2
    assert event.attrs.modified_at == 1_000_000  # the file's own time, in microseconds
