"""The LanceDB sink on a real LanceDB directory: rows by chunk id, metadata updates, filters, versions."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from streamdedup.errors import ConfigurationError, StateMismatchError
from streamdedup.index import lancedb as lancedb_sink
from streamdedup.index import open_sink
from streamdedup.index.lancedb import TABLE, LanceDBSink
from streamdedup.index.sink import Row, Sink

D = 8
# Principals and ids that a SQL literal written carelessly would end early, escape, or widen.
HOSTILE = [
    "o'k", "'", "''", "a''b", "x\\y", "\\", "\\'", 'q"q', "new\nline", "\t", "%_", "é", "]", "*x",
    "'); DELETE FROM chunks; --",
]  # fmt: skip


def row(chunk_id: str, acl: tuple[str, ...] = ("*",), *, text: str = "", model: str = "m") -> Row:
    return Row(
        chunk_id=chunk_id,
        text=text or f"text of {chunk_id}",
        content_hash=f"hash of {chunk_id}",
        source_ids=(f"src:{chunk_id}",),
        acl=acl,
        modified_at="2024-01-01T00:00:00Z",
        model=model,
    )


def unit(n: int) -> np.ndarray:
    vector = np.zeros(D, dtype=np.float32)
    vector[n % D] = 1.0
    return vector


def snapshot(sink: Sink) -> dict[str, tuple[Row, list[float]]]:
    ids = sink.chunk_ids()
    vectors = sink.vectors(ids)
    return {chunk_id: (found, vectors[chunk_id].tolist()) for chunk_id, found in sink.rows(ids).items()}


@pytest.fixture
def sink(tmp_path: Path) -> LanceDBSink:
    return LanceDBSink(tmp_path / "lance", D, optimize_every=0)


def test_upserts_replace_by_chunk_id_and_are_idempotent(sink: LanceDBSink):
    rows = [row("a"), row("b", ("eng",)), row(HOSTILE[0], ("hr",))]
    vectors = np.stack([unit(0), unit(1), unit(2)])
    sink.upsert(rows, vectors)
    first = snapshot(sink)
    sink.upsert(rows, vectors)
    assert snapshot(sink) == first and sink.count() == 3
    sink.upsert([row("a", text="other text")], unit(5)[None, :])
    assert sink.rows(["a"])["a"].text == "other text"
    assert sink.vectors(["a"])["a"].tolist() == unit(5).tolist()
    assert sink.count() == 3
    # Of one chunk id given twice, the last wins, as if applied in order.
    sink.upsert([row("c", text="first"), row("c", text="last")], np.stack([unit(0), unit(1)]))
    assert sink.rows(["c"])["c"].text == "last" and sink.vectors(["c"])["c"].tolist() == unit(1).tolist()


def test_a_metadata_update_leaves_the_vector_and_skips_unknown_ids(sink: LanceDBSink):
    sink.upsert([row("a")], unit(3)[None, :])
    version = sink.table.version
    changed = Row("a", "new text", "hash of a", ("s1", "s2"), ("eng", "hr"), "2025-01-01T00:00:00Z", "m")
    sink.update_metadata([changed, row("nobody")])
    assert sink.rows(["a", "nobody"]) == {"a": changed}
    assert sink.vectors(["a"])["a"].tolist() == unit(3).tolist()
    assert sink.table.version == version + 1
    sink.update_metadata([changed])
    assert sink.rows(["a"]) == {"a": changed}


def test_deletes_match_ids_exactly_whatever_they_hold(sink: LanceDBSink):
    ids = ["a", "b", *HOSTILE]
    sink.upsert([row(i) for i in ids], np.stack([unit(n) for n in range(len(ids))]))
    sink.delete([HOSTILE[0], HOSTILE[-3], "never-there"])
    assert sink.chunk_ids() == sorted(set(ids) - {HOSTILE[0], HOSTILE[-3]})
    version = sink.table.version
    sink.delete([])
    assert sink.table.version == version  # nothing to delete: no version


@pytest.mark.parametrize("principal", HOSTILE)
def test_the_readers_filter_treats_a_principal_as_data(sink: LanceDBSink, principal: str):
    sink.upsert(
        [row("theirs", (principal,)), row("public", ("*",)), row("other", ("eng",))],
        np.stack([unit(0), unit(0), unit(0)]),
    )
    found = sink.search(unit(0), 10, principals=[principal])
    assert sorted(m.chunk_id for m in found) == ["public", "theirs"]
    assert sink.count() == 3


def test_search_is_by_cosine_and_filtered_before_the_limit(sink: LanceDBSink):
    rows = [row(f"eng-{n}", ("eng",)) for n in range(5)] + [row("hr", ("hr", "legal")), row("public")]
    vectors = np.stack([unit(0) + 0.1 * (n + 1) * unit(1) for n in range(5)] + [unit(0), unit(0) * 3])
    sink.upsert(rows, vectors)
    everyone = sink.search(unit(0), 3)
    assert [m.chunk_id for m in everyone][:2] in (["hr", "public"], ["public", "hr"])
    assert everyone[0].score == pytest.approx(1.0)  # cosine: the length of a vector does not count
    # Five eng rows are nearer than "hr" for nobody: a reader of legal gets hr and public, then nothing else.
    assert {m.chunk_id for m in sink.search(unit(1), 3, principals=["legal"])} == {"hr", "public"}
    assert [m.chunk_id for m in sink.search(unit(1), 2, principals=["eng"])] == ["eng-4", "eng-3"]
    # A caller with only "*", or none, reads public rows only.
    assert [m.chunk_id for m in sink.search(unit(0), 5, principals=["*"])] == ["public"]
    assert [m.chunk_id for m in sink.search(unit(0), 5, principals=[])] == ["public"]
    with pytest.raises(ConfigurationError, match="not the string"):
        sink.search(unit(0), 5, principals="eng")
    with pytest.raises(ConfigurationError, match="dimensions"):
        sink.search(np.ones(D + 1, dtype=np.float32), 5)


@pytest.mark.parametrize("principals", [None, ["eng"], ["hr", "legal"]])
def test_a_search_of_many_vectors_finds_what_a_search_of_each_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, principals: list[str] | None
):
    # Few directions, each held by several rows (ties), written in several fragments, some deleted, compacted
    # half way; the queries are groups of 4 and a last group of 1.
    monkeypatch.setattr(lancedb_sink, "_QUERIES_PER_SEARCH", 4)
    sink = LanceDBSink(tmp_path / "lance", D, optimize_every=7)
    rng = np.random.default_rng(5)
    directions = rng.normal(size=(6, D)).astype(np.float32)
    acls = [("*",), ("eng",), ("hr", "legal"), ("eng", "hr")]
    for start in range(0, 60, 6):
        rows = [row(f"c{n}", acls[n % len(acls)]) for n in range(start, start + 6)]
        vectors = directions[[(n * 7) % len(directions) for n in range(start, start + 6)]]
        sink.upsert(rows, vectors + (rng.random((6, 1)) < 0.3) * 0.01 * unit(start))
        sink.delete([f"c{n}" for n in range(start, start + 6, 5)])
    queries = np.concatenate([directions, rng.normal(size=(3, D)).astype(np.float32)])
    for k in (1, 5, 100):
        each = [sink.search(q, k, principals=principals) for q in queries]
        assert k == 1 or any(len({m.score for m in found}) < len(found) for found in each)  # ties
        assert sink.search_many(queries, k, principals=principals) == each
    assert sink.search_many(queries[:1], 3) == [sink.search(queries[0], 3)]
    assert sink.search_many(queries, 0) == [[]] * len(queries)
    assert sink.search_many(np.empty((0, D), dtype=np.float32), 3) == []
    with pytest.raises(ConfigurationError, match="shape"):
        sink.search_many(queries[:, :-1], 3)
    with pytest.raises(ConfigurationError, match="not the string"):
        sink.search_many(queries, 3, principals="eng")


def test_a_table_of_other_dimensions_or_another_model_is_refused(tmp_path: Path):
    sink = LanceDBSink(tmp_path / "lance", D, model="m")
    with pytest.raises(StateMismatchError, match="model"):
        sink.upsert([row("a", model="other")], unit(0)[None, :])
    sink.upsert([row("a")], unit(0)[None, :])
    with pytest.raises(StateMismatchError, match="model"):
        sink.upsert([row("b", model="other")], unit(0)[None, :])
    with pytest.raises(ConfigurationError, match="shape"):
        sink.upsert([row("b")], np.ones((1, D + 1), dtype=np.float32))
    assert LanceDBSink(tmp_path / "lance", D, model="m").model == "m"
    with pytest.raises(StateMismatchError, match=f"{D} dimensions, not {D * 2}"):
        LanceDBSink(tmp_path / "lance", D * 2)
    with pytest.raises(StateMismatchError, match="'m', not 'other'"):
        LanceDBSink(tmp_path / "lance", D, model="other")


def test_a_table_that_is_not_an_index_is_refused(tmp_path: Path):
    db = lancedb.connect(tmp_path / "lance")
    db.create_table(TABLE, schema=pa.schema([pa.field("chunk_id", pa.string())]))
    with pytest.raises(StateMismatchError, match="not a streamdedup index"):
        LanceDBSink(tmp_path / "lance", D)


def test_open_sink_takes_lancedb_uris_only(tmp_path: Path):
    sink = open_sink(f"lancedb://{tmp_path / 'lance'}", D)
    assert isinstance(sink, LanceDBSink) and isinstance(sink, Sink)
    assert sink.dimensions == D and sink.model is None and sink.count() == 0
    for uri in ("qdrant://localhost:6333", str(tmp_path), "lancedb:/x"):
        with pytest.raises(ConfigurationError, match="expected lancedb://DIR"):
            open_sink(uri, D)
    with pytest.raises(ConfigurationError, match="names no directory"):
        open_sink("lancedb://", D)
    with pytest.raises(ConfigurationError, match="at least 1 dimension"):
        open_sink(f"lancedb://{tmp_path / 'lance'}", 0)


def test_optimize_compacts_and_writes_keep_versions_in_check(tmp_path: Path):
    sink = LanceDBSink(tmp_path / "lance", D, optimize_every=5, keep_versions=timedelta(milliseconds=1))
    counts = []
    for n in range(30):
        sink.upsert([row(f"r{n}")], unit(n)[None, :])
        if n % 3 == 0:
            sink.update_metadata([row(f"r{n}", ("eng",))])
        time.sleep(0.002)
        counts.append(len(sink.table.list_versions()))
    expected = snapshot(sink)
    assert max(counts) <= 12  # without optimize, 41 writes would leave 42 versions
    assert sink.table.stats()["fragment_stats"]["num_fragments"] <= 5
    time.sleep(0.002)
    sink.optimize()
    assert sink.table.stats()["fragment_stats"]["num_fragments"] == 1
    assert snapshot(sink) == expected and sink.count() == 30
    assert sink.rows(["r3"])["r3"].acl == ("eng",)


@pytest.mark.parametrize("value", [0, -1])
def test_settings_that_would_break_a_reader_are_refused(tmp_path: Path, value: int):
    with pytest.raises(ConfigurationError):
        LanceDBSink(tmp_path / "lance", D, keep_versions=timedelta(seconds=value))
