"""Files handed over as their bytes: base64 upserts through `produce` and a worker on the real broker give the view
of `run` on the folder, dead letters and their reasons included (streamdedup.convert)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.contract.codec import encode_event
from streamdedup.convert.office import PDF
from streamdedup.core.messages import Output
from streamdedup.core.output_view import View
from streamdedup.drivers.folder import FolderFeed
from streamdedup.testing.hostile_files import pdf_bomb, write_hostile
from streamdedup.testing.share_files import write_corpus
from tests.integration.test_commands import cli

pytestmark = pytest.mark.integration


def outputs(path: Path) -> list[Output]:
    return [Output(**json.loads(line)) for line in path.read_text().splitlines()]


def test_files_as_base64_upserts_through_produce_and_a_worker(deployment, tmp_path: Path):
    corpus = write_corpus(tmp_path / "share")
    write_hostile(corpus.folder / "hostile", bomb_mebibytes=512)
    folder_out = tmp_path / "folder.jsonl"
    bounds = {
        "STREAMDEDUP_CONVERT_MEMORY_MB": "128"
    }  # the worker's below, so that both give the same reasons
    result = CliRunner().invoke(
        app,
        ["run", str(corpus.folder), "--state", str(tmp_path / "state"), "--out", str(folder_out)],
        env=bounds,
    )
    assert result.exit_code == 0, result.output
    folder = outputs(folder_out)

    # The folder feed's own upserts, each holding its file's bytes in `data`, as a file `produce` sends.
    events = [item for _, _, item in FolderFeed(corpus.folder, corpus.folder.name).sync()]
    assert all(not isinstance(e, Output) and e.data is not None for e in events)
    lines = tmp_path / "events.jsonl"
    lines.write_bytes(b"".join(encode_event(e) + b"\n" for e in events))
    # Beside them, a PDF whose page inflates to 1 GiB: past the worker's memory bound, its conversion process dies
    # or fails and the worker dead-letters it and goes on.
    bomb = msgspec.structs.replace(events[0], source_id="bomb.pdf", content_type=PDF, data=pdf_bomb(1024))
    lines.write_bytes(lines.read_bytes() + encode_event(bomb) + b"\n")
    deployment.start_worker(env=bounds)
    produced = cli(deployment, "produce", str(lines))
    assert produced.returncode == 0, produced.stderr
    deployment.wait_until_idle(timeout=180)

    tailed = cli(deployment, "tail", "dlq", "--no-follow")
    letters = [json.loads(line) for line in tailed.stdout.splitlines()]
    (memory,) = [letter for letter in letters if letter["key"] == "bomb.pdf"]
    assert "memory bound of 128 MB" in memory["headers"]["error"]
    assert sorted(letter["headers"]["error"] for letter in letters if letter is not memory) == sorted(
        line.value["error"] for line in folder if line.topic == "dlq"
    )
    assert len(letters) == 7  # the six hostile files and the bomb, each with its reason

    out = tmp_path / "view.jsonl"
    materialized = cli(deployment, "materialize", "--out", str(out))
    assert materialized.returncode == 0, materialized.stderr
    view = View().apply_all(outputs(out))
    expected = View().apply_all(folder)
    assert view.compacted(with_revision=False) == expected.compacted(with_revision=False)
    assert len(expected.chunks) > 20 and any(
        "page_furniture" in json.dumps(c) for c in expected.chunks.values()
    )
