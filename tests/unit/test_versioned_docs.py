"""Several releases of one public documentation, as a user runs them: ``streamdedup eval``'s outdated passages,
with and without ``current_only``, and the review queue ``streamdedup index`` leaves with a lineage rule.

The feed is Click's documentation (``docs/*.rst``) from the sdists of three releases, downloaded from PyPI with
pip once per cache (the pytest cache when it is on, a session temporary folder otherwise), laid out as
``<release>/<page>.rst``: a lineage per page under the rule ``{version}/{path...}``.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from streamdedup.cli.evaluate import eval_command
from streamdedup.cli.main import app
from streamdedup.settings import Settings

CLICK_RELEASES = ("7.1.2", "8.0.4", "8.1.7")
NEWEST = CLICK_RELEASES[-1]
COLLECTION = "default"
RULES = {COLLECTION: ["{version}/{path...}"]}


def _sdist(folder: Path, version: str) -> Path:
    sdist = folder / f"click-{version}.tar.gz"
    if not sdist.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", f"click=={version}",
             "-d", str(folder), "-q"],
            check=True,
        )  # fmt: skip
    return sdist


@pytest.fixture(scope="session")
def click_docs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of ``<release>/<page>.rst``: the top-level docs pages of each release's sdist."""
    cache = getattr(request.config, "cache", None)
    sdists = cache.mkdir("click-sdists") if cache is not None else tmp_path_factory.mktemp("click-sdists")
    root = tmp_path_factory.mktemp("click-docs")
    for version in CLICK_RELEASES:
        with tarfile.open(_sdist(sdists, version)) as archive:
            for member in archive.getmembers():
                parts = Path(member.name).parts
                if (
                    len(parts) != 3
                    or parts[1] != "docs"
                    or not parts[2].endswith(".rst")
                    or not member.isfile()
                ):
                    continue
                data = archive.extractfile(member)
                assert data is not None
                (root / version).mkdir(exist_ok=True)
                (root / version / parts[2]).write_bytes(data.read())
    assert all(len(list((root / v).glob("*.rst"))) >= 10 for v in CLICK_RELEASES)
    return root


def _eval(tmp_path: Path, docs: Path, settings: Settings) -> tuple[dict[str, Any], str]:
    out = tmp_path / "figures.json"
    console = Console(file=io.StringIO(), width=140)
    eval_command(settings, docs, None, 5, out, console, collection=COLLECTION)
    return json.loads(out.read_text()), console.file.getvalue()


def test_current_only_leaves_no_outdated_passage_in_any_top_5(tmp_path, click_docs):
    data, printed = _eval(tmp_path, click_docs, Settings(lineage_rules=RULES))
    with_dedup, current = data["with_dedup"], data["current_only"]
    assert data["k"] == 5 and data["queries"] >= 50  # the pages' headings
    # Without the filter, outdated passages (text only older releases hold) reach the top-5 of some queries ...
    assert with_dedup["outdated_results"] > 0 and with_dedup["queries_with_outdated"] > 0
    assert data["outdated_share"]["without_filter"] == with_dedup["outdated_share"] > 0
    assert data["without_dedup"]["outdated_results"] > 0
    # ... with it, none reaches any top-5, and the queries still find current passages.
    assert current["outdated_results"] == 0 and current["queries_with_outdated"] == 0
    assert data["outdated_share"]["with_filter"] == current["outdated_share"] == 0.0
    assert current["results"] > 0
    assert (
        current["queries_with_results"]
        >= with_dedup["queries_with_results"] - with_dedup["queries_with_outdated"]
    )
    # The filter removes the outdated chunks from the index, nothing else.
    assert 0 < current["entries"] < with_dedup["entries"]
    for label in ("outdated results", "outdated share (mean)", "current only"):
        assert label in printed


def test_without_lineage_rules_nothing_is_outdated(tmp_path, click_docs):
    data, _ = _eval(tmp_path, click_docs, Settings())
    assert data["with_dedup"]["outdated_results"] == data["without_dedup"]["outdated_results"] == 0
    assert data["outdated_share"]["without_filter"] == data["outdated_share"]["with_filter"] == 0.0
    same = ("entries", "results", "redundant_results", "unique_sources")
    assert {n: data["current_only"][n] for n in same} == {n: data["with_dedup"][n] for n in same}


def _review_queue(tmp_path: Path, docs: Path, rules: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
    """Run and index ``docs`` as a user would (``streamdedup run``, then ``streamdedup index`` with the default
    embedder); return the canonical chunks and the last value of each review key (the queue, resolved ones null)."""
    settings = ["--set", f"lineage_rules={json.dumps(rules)}"] if rules else []
    out, reviews = tmp_path / "out.jsonl", tmp_path / "reviews.jsonl"
    for command in (
        ["run", str(docs), "--state", str(tmp_path / "state"), "--out", str(out), "--collection", COLLECTION],
        ["index", "--into", f"lancedb://{tmp_path / 'index'}", "--from", str(out), "--reviews", str(reviews)],
    ):
        result = CliRunner().invoke(app, [*settings, *command])
        assert result.exit_code == 0, result.output
    chunks: dict[str, Any] = {}
    queue: dict[str, Any] = {}
    for line in [*out.read_text().splitlines(), *reviews.read_text().splitlines()]:
        record = json.loads(line)
        if record["topic"] == "canonical-chunks":
            chunks[record["key"]] = record["value"]
        elif record["topic"] == "review":
            queue[record["key"]] = record["value"]
    return sum(v is not None for v in chunks.values()), queue


def test_semantic_flags_are_at_most_2_percent_of_the_canonical_chunks(tmp_path, click_docs):
    canonical, queue = _review_queue(tmp_path / "with", click_docs, RULES)
    semantic = [v for v in queue.values() if v is not None and v["reason"] == "semantic"]
    assert canonical > 1000 and len(semantic) <= 0.02 * canonical, (len(semantic), canonical)
    # Not by flagging nothing: without the rule, pairs between versions of one page are flagged too.
    _, unresolved = _review_queue(tmp_path / "without", click_docs, None)
    flagged = [v for v in unresolved.values() if v is not None and v["reason"] == "semantic"]
    assert len(flagged) > len(semantic) > 0
