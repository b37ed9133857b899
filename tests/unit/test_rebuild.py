"""``streamdedup run --state NEW --rebuild-from OLD --set ...``: a new generation of an embedded state, built from the
old state's retained record under other parameters, with no input read again."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.contract.codec import encode_event
from streamdedup.core.messages import Output
from streamdedup.core.output_view import View
from streamdedup.drivers.rebuild import RetainedFeed
from streamdedup.testing.random_feeds import (
    LINEAGE_RULES,
    ParagraphPool,
    lineage_feed,
    random_feed,
    with_decisions,
)

runner = CliRunner()
NEW = ("--set", "threshold=0.85", "--set", "shingle_size=3")


def run(*args: object) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def view_of(path: Path) -> bytes:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return View().apply_all(Output(**line) for line in lines).compacted(with_revision=False)


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, Path]:
    """A feed (with decisions) and a second part of it that arrives after the rebuild."""
    rng = random.Random(7)
    pool = ParagraphPool(rng, families=3)
    events = with_decisions(rng, random_feed(rng, sources=9, events=80, pool=pool), pool, count=12)
    first, later = tmp_path / "first.jsonl", tmp_path / "later.jsonl"
    first.write_bytes(b"".join(encode_event(e) + b"\n" for e in events[:60]))
    later.write_bytes(b"".join(encode_event(e) + b"\n" for e in events[60:]))
    return first, later


@pytest.mark.parametrize("workers", [1, 2])
def test_a_rebuild_under_new_parameters_is_a_run_of_the_history_under_them(tmp_path, history, workers):
    first, later = history
    old, new, ref = tmp_path / "old", tmp_path / "new", tmp_path / "ref"
    run("run", first, "--state", old, "--out", tmp_path / "old.jsonl", "--workers", workers)
    output = run(
        *NEW, "run", "--state", new, "--rebuild-from", old, "--out", tmp_path / "new.jsonl", "--batch-size", 5
    )
    assert "from the retained record of" in output
    run(*NEW, "run", first, "--state", ref, "--out", tmp_path / "ref.jsonl")
    assert view_of(tmp_path / "new.jsonl") == view_of(tmp_path / "ref.jsonl")
    # Both generations then take the same new input, each under its own parameters.
    run("run", later, "--state", old, "--out", tmp_path / "old.jsonl", "--workers", workers)
    run(*NEW, "run", later, "--state", new, "--out", tmp_path / "new.jsonl")
    run(*NEW, "run", later, "--state", ref, "--out", tmp_path / "ref.jsonl")
    assert view_of(tmp_path / "new.jsonl") == view_of(tmp_path / "ref.jsonl")
    assert view_of(tmp_path / "new.jsonl") != view_of(tmp_path / "old.jsonl")  # the parameters do matter here
    again = run(*NEW, "run", "--state", new, "--rebuild-from", old, "--out", tmp_path / "new.jsonl")
    assert "already built" in again


def test_a_rebuild_cut_short_goes_on_where_it_was(tmp_path, history, monkeypatch):
    first, _ = history
    old, new, ref = tmp_path / "old", tmp_path / "new", tmp_path / "ref"
    run("run", first, "--state", old, "--out", tmp_path / "old.jsonl")
    calls = {"n": 0}
    consumed = RetainedFeed.consumed

    def cut_after_three(self, items):
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt
        return consumed(self, items)

    monkeypatch.setattr(RetainedFeed, "consumed", cut_after_three)
    result = runner.invoke(
        app,
        [
            *NEW,
            "run",
            "--state",
            str(new),
            "--rebuild-from",
            str(old),
            "--out",
            str(tmp_path / "new.jsonl"),
            "--batch-size",
            "4",
        ],
    )
    assert result.exit_code != 0
    monkeypatch.setattr(RetainedFeed, "consumed", consumed)
    output = run(
        *NEW, "run", "--state", new, "--rebuild-from", old, "--out", tmp_path / "new.jsonl", "--batch-size", 4
    )
    assert "going on with the rebuild" in output and "after 12 of" in output
    run(*NEW, "run", first, "--state", ref, "--out", tmp_path / "ref.jsonl")
    assert view_of(tmp_path / "new.jsonl") == view_of(tmp_path / "ref.jsonl")


def test_a_rebuild_goes_into_a_new_state_only(tmp_path, history):
    first, _ = history
    old = tmp_path / "old"
    run("run", first, "--state", old, "--out", tmp_path / "old.jsonl")
    busy = tmp_path / "busy"
    run("run", first, "--state", busy, "--out", tmp_path / "busy.jsonl")
    for state, says in ((busy, "already holds a run"), (old, "names the state itself")):
        result = runner.invoke(app, ["run", "--state", str(state), "--rebuild-from", str(old), "--out", "-"])
        assert result.exit_code != 0 and says in " ".join(result.output.split())
    refused = runner.invoke(app, [*NEW, "run", str(first), "--state", str(old), "--out", "-"])
    assert refused.exit_code != 0 and "--rebuild-from" in " ".join(refused.output.split())


def test_a_rebuild_under_lineage_rules_marks_outdated_chunks_with_no_input_read_again(tmp_path):
    rng = random.Random(3)
    events = lineage_feed(rng, events=60, pool=ParagraphPool(rng, families=2))
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(b"".join(encode_event(e) + b"\n" for e in events))
    old, new, ref = tmp_path / "old", tmp_path / "new", tmp_path / "ref"
    rules = ("--set", f"lineage_rules={LINEAGE_RULES}")
    run("run", feed, "--state", old, "--out", tmp_path / "old.jsonl")
    run(*rules, "run", "--state", new, "--rebuild-from", old, "--out", tmp_path / "new.jsonl")
    run(*rules, "run", feed, "--state", ref, "--out", tmp_path / "ref.jsonl")
    assert view_of(tmp_path / "new.jsonl") == view_of(tmp_path / "ref.jsonl")
    rebuilt = [json.loads(line)["value"] for line in (tmp_path / "new.jsonl").read_text().splitlines()]
    assert any(v and v.get("current") is False for v in rebuilt)
    assert not any('"current"' in line for line in (tmp_path / "old.jsonl").read_text().splitlines())
