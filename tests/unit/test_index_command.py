"""`streamdedup index --from` and `run --index` as a user runs them, with the offline ONNX model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.core.normalize import normalize
from streamdedup.core.shingles import jaccard_of_sets, shingle_set
from streamdedup.index.catalog import serving_table
from streamdedup.index.lancedb import LanceDBSink
from streamdedup.query.live_view import View

runner = CliRunner()
# Two ways to say one thing: few shared 5-word shingles, nearly the same meaning.
HOLIDAYS = (
    "The office is closed on public holidays, and support tickets filed on those days are answered on the next "
    "working day."
)
HOLIDAYS_AGAIN = (
    "On public holidays the office is closed, so support tickets filed that day are answered on the next working "
    "day."
)
OTHER = "Invoices are sent on the first day of each month and list every seat that was active in the month before."


def upsert(source_id: str, text: str, acl: list[str]) -> str:
    return json.dumps(
        {"schema": "streamdedup.document/v1", "op": "upsert", "source_id": source_id, "version": 1,
         "modified_at": "2024-05-01T10:00:00Z", "acl": acl, "text": text}
    )  # fmt: skip


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("feed") / "feed.jsonl"
    lines = [
        upsert("wiki:holidays", HOLIDAYS, ["*"]),
        upsert("helpdesk:holidays", HOLIDAYS_AGAIN, ["support"]),
        upsert("wiki:invoices", OTHER, ["*"]),
        upsert("wiki:invoices-copy", OTHER, ["finance"]),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_paraphrase_is_flagged_semantic_and_stays_two_chunks(feed: Path, tmp_path: Path):
    shingles = [shingle_set(normalize(t), 5) for t in (HOLIDAYS, HOLIDAYS_AGAIN)]
    assert jaccard_of_sets(*shingles) < 0.2  # far below any near-copy threshold
    out, into = tmp_path / "out.jsonl", tmp_path / "index"
    ran = runner.invoke(app, ["run", str(feed), "--state", str(tmp_path / "state"), "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    indexed = runner.invoke(app, ["index", "--into", f"lancedb://{into}", "--from", str(out)])
    assert indexed.exit_code == 0, indexed.output
    written = records(out)
    flags = [r for r in written if r["topic"] == "review" and r["value"]["reason"] == "semantic"]
    [flag] = flags
    assert {flag["value"]["a"]["text"], flag["value"]["b"]["text"]} == {HOLIDAYS, HOLIDAYS_AGAIN}
    assert float(flag["value"]["detail"].split()[-1]) >= 0.92 and flag["value"]["jaccard"] < 0.2
    assert sorted(map(tuple, (flag["value"]["a"]["acl"], flag["value"]["b"]["acl"]))) == [
        ("*",),
        ("support",),
    ]
    with View.open(into / "_writer") as view:
        texts = sorted(view.chunk(c)["text"] for c in view.chunk_ids())
    assert texts == sorted([HOLIDAYS, HOLIDAYS_AGAIN, OTHER])  # flagged, never merged
    sink = LanceDBSink(into, 384)
    try:
        assert sink.count() == 3
    finally:
        sink.close()
    for label in ("embedding calls made", "embedding calls saved by dedup", "metadata-only updates"):
        assert label in indexed.output
    # Again: nothing new, no embedding, no flag repeated.
    again = runner.invoke(app, ["index", "--into", f"lancedb://{into}", "--from", str(out)])
    assert again.exit_code == 0, again.output
    assert len(records(out)) == len(written)


def test_run_with_index_writes_the_index_after_the_run(feed: Path, tmp_path: Path):
    out, into = tmp_path / "out.jsonl", tmp_path / "index"
    args = [
        "run",
        str(feed),
        "--state",
        str(tmp_path / "state"),
        "--out",
        str(out),
        "--index",
        f"lancedb://{into}",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    sink = LanceDBSink(into, 384)
    try:
        rows = sink.rows(sink.chunk_ids())
    finally:
        sink.close()
    invoices = [row for row in rows.values() if row.text == OTHER]
    assert len(rows) == 3 and [r.source_ids for r in invoices] == [("wiki:invoices", "wiki:invoices-copy")]
    refused = runner.invoke(
        app, ["run", str(feed), "--state", str(tmp_path / "s2"), "--index", "lancedb://x"]
    )
    assert refused.exit_code == 2 and "--index needs --out FILE" in " ".join(refused.output.split())


def test_the_metrics_count_what_each_batch_did():
    from prometheus_client import generate_latest

    from streamdedup.cli.indexing import IndexMetrics
    from streamdedup.index.writer import IndexCounters

    metrics = IndexMetrics(None)
    metrics.observe(IndexCounters(), IndexCounters(embedded=3, rows_written=3, positions=5, rows=3))
    metrics.observe(
        IndexCounters(embedded=3, rows_written=3, positions=5, rows=3),
        IndexCounters(embedded=3, rows_written=3, metadata_updates=2, positions=6, rows=3),
    )
    exposed = generate_latest(metrics.registry).decode()
    for line in (
        "streamdedup_index_embedding_calls_total 3.0",
        "streamdedup_index_metadata_updates_total 2.0",
        "streamdedup_index_embedding_calls_saved 3.0",
        "streamdedup_index_rows 3.0",
    ):
        assert line in exposed


def test_another_embedding_model_builds_a_table_beside_the_serving_one(feed: Path, tmp_path: Path):
    """A change of model alone: a new table from the live chunks, each distinct text embedded once, serving once
    complete; the old table is kept, and the old model's writer never takes the readers back."""
    out, into, log = tmp_path / "out.jsonl", tmp_path / "index", tmp_path / "embedded.jsonl"
    assert (
        runner.invoke(
            app, ["run", str(feed), "--state", str(tmp_path / "state"), "--out", str(out)]
        ).exit_code
        == 0
    )
    first = runner.invoke(app, ["index", "--into", f"lancedb://{into}", "--from", str(out)])
    assert first.exit_code == 0, first.output
    assert serving_table(into) == "chunks"
    hashed = {
        "STREAMDEDUP_EMBEDDER": "callable:tests.integration.embedder:embedder",
        "STREAMDEDUP_TEST_EMBED_LOG": str(log),
    }
    second = runner.invoke(app, ["index", "--into", f"lancedb://{into}", "--from", str(out)], env=hashed)
    assert second.exit_code == 0, second.output
    assert serving_table(into) == "chunks-2"
    embedded = [json.loads(line) for line in log.read_text().splitlines()]
    old = LanceDBSink(into, 384)
    new = LanceDBSink(into, 64, table="chunks-2")
    try:
        assert sorted(new.chunk_ids()) == sorted(old.chunk_ids()) and new.count() == 3
        assert sorted(embedded) == sorted({row.text for row in new.rows(new.chunk_ids()).values()})
    finally:
        old.close()
        new.close()
    again = runner.invoke(app, ["index", "--into", f"lancedb://{into}", "--from", str(out)])
    assert again.exit_code == 0, again.output
    assert serving_table(into) == "chunks-2"


@pytest.mark.parametrize(("setting", "threads"), [(0, None), (3, 3)])
def test_the_index_command_gives_the_embedder_its_thread_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: int, threads: int | None
):
    from rich.console import Console

    from streamdedup.cli import indexing
    from streamdedup.settings import Settings

    asked: list[dict[str, object]] = []

    class Stop(Exception):
        pass

    def embedder_from_spec(spec: str, **options: object) -> None:
        asked.append({"spec": spec, **options})
        raise Stop

    monkeypatch.setattr(indexing, "embedder_from_spec", embedder_from_spec)
    with pytest.raises(Stop):
        indexing.index_command(
            Settings(embedder_threads=setting), f"lancedb://{tmp_path}", None, None, False, None, Console()
        )
    assert asked == [{"spec": "onnx", "threads": threads}]
