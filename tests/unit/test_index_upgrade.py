"""A LanceDB table of layout 1 (rows without ``current`` and ``outdated_by``) is upgraded to layout 2 when opened."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
import pytest
from lancedb.index import BTree
from lancedb.table import LanceTable

from streamdedup.errors import StateError, StateMismatchError
from streamdedup.index.lancedb import TABLE, LanceDBSink, schema
from tests.unit.test_index_writer import (  # noqa: F401 - records and steps are fixtures
    FakeEmbedder,
    Record,
    open_writer,
    records,
    run,
    steps,
    table,
    uninterrupted,
)

D = 8
LAYOUT_KEY = b"streamdedup.index"
ADDED = ["current", "outdated_by"]


def layout_1(directory: Path, data: pa.Table, name: str = TABLE, layout: bytes = b"1") -> LanceTable:
    """Write ``data`` (the columns of layout 1) as a table of layout 1, as the versions before layout 2 did."""
    new = schema(data.schema.field("vector").type.list_size)
    old = pa.schema(
        [field for field in new if field.name not in ADDED],
        metadata={LAYOUT_KEY: layout, b"other.key": b"kept"},
    )
    created = lancedb.connect(directory).create_table(name, schema=old, mode="overwrite")
    created.create_index("chunk_id", config=BTree())
    created.add(data.select(old.names).cast(old))
    assert isinstance(created, LanceTable)
    return created


def old_rows(n: int) -> pa.Table:
    vectors = np.random.default_rng(7).random((n, D), dtype=np.float32)
    return pa.table(
        {
            "chunk_id": [f"c{i}" for i in range(n)],
            "text": [f"text {i}" for i in range(n)],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), D),
            "content_hash": [f"hash {i}" for i in range(n)],
            "source_ids": [[f"src:{i}"] for i in range(n)],
            "acl": [["*"] if i % 2 else ["eng"] for i in range(n)],
            "modified_at": ["2024-01-01T00:00:00Z"] * n,
            "model": ["m"] * n,
        }
    )


def test_a_layout_1_table_is_upgraded_in_place(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    directory = tmp_path / "lance"
    data = old_rows(10)
    layout_1(directory, data)
    with caplog.at_level(logging.INFO, logger="streamdedup.index.lancedb"):
        sink = LanceDBSink(directory, D, model="m", optimize_every=0)
    upgrades = [r.getMessage() for r in caplog.records if "upgraded" in r.getMessage()]
    assert len(upgrades) == 1 and TABLE in upgrades[0] and "from layout 1 to 2" in upgrades[0]

    found = sink.table.schema
    assert found.metadata == {LAYOUT_KEY: b"2", b"other.key": b"kept"}
    assert found.remove_metadata().equals(schema(D).remove_metadata())
    assert [(i.columns, i.index_type) for i in sink.table.list_indices()] == [(["chunk_id"], "BTree")]
    assert sink.model == "m" and sink.count() == 10
    # Every row is there as it was, current and outdated by none; the vectors are the same floats.
    held = sink.table.to_arrow().sort_by("chunk_id")
    assert held.select(data.column_names).equals(
        data.sort_by("chunk_id").cast(held.select(data.column_names).schema)
    )
    assert held.column("current").to_pylist() == [True] * 10
    assert held.column("outdated_by").to_pylist() == [None] * 10
    ids = data.column("chunk_id").to_pylist()
    rows = sink.rows(ids)
    assert all(row.current and row.outdated_by is None for row in rows.values()) and sorted(rows) == sorted(
        ids
    )
    vectors = sink.vectors(ids)
    for n, chunk_id in enumerate(ids):
        assert vectors[chunk_id].tolist() == data.column("vector")[n].as_py()
    # Searches find them, current_only ones too.
    query = np.asarray(data.column("vector")[3].as_py(), dtype=np.float32)
    for current_only in (False, True):
        matches = sink.search(query, 10, current_only=current_only)
        assert matches[0].row.chunk_id == "c3" and len(matches) == 10
        readable = sink.search(query, 10, principals=["hr"], current_only=current_only)
        assert sorted(m.row.chunk_id for m in readable) == [f"c{i}" for i in range(1, 10, 2)]
    # The sink writes the table as any of layout 2.
    sink.update_metadata([dataclasses.replace(rows["c1"], outdated_by="src:new")])
    assert not sink.rows(["c1"])["c1"].current
    assert sink.search(query, 10, current_only=True)[0].row.chunk_id == "c3"
    assert len(sink.search(query, 10, current_only=True)) == 9

    # A second open does nothing more.
    version = sink.table.version
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="streamdedup.index.lancedb"):
        again = LanceDBSink(directory, D, model="m")
    assert again.table.version == version and not caplog.records
    assert again.table.schema.equals(sink.table.schema, check_metadata=True)


def test_a_table_of_another_layout_or_dimensions_is_refused_and_left_as_it_is(tmp_path: Path):
    layout_1(tmp_path / "nine", old_rows(3), layout=b"9")
    with pytest.raises(StateMismatchError, match="not a streamdedup index of layout 2 \\(its layout: '9'\\)"):
        LanceDBSink(tmp_path / "nine", D)
    older = layout_1(tmp_path / "lance", old_rows(3))
    version = older.version
    with pytest.raises(StateMismatchError, match=f"{D} dimensions, not {D * 2}"):
        LanceDBSink(tmp_path / "lance", D * 2)
    with pytest.raises(StateMismatchError, match="'m', not 'other'"):
        LanceDBSink(tmp_path / "lance", D, model="other")
    older.checkout_latest()
    assert older.version == version and older.schema.metadata[LAYOUT_KEY] == b"1"
    # A table that says layout 1 but does not hold its columns is no index this sink knows.
    db = lancedb.connect(tmp_path / "odd")
    db.create_table(TABLE, schema=pa.schema([pa.field("chunk_id", pa.string())], metadata={LAYOUT_KEY: b"1"}))
    with pytest.raises(StateMismatchError, match="not a streamdedup index"):
        LanceDBSink(tmp_path / "odd", D)


def test_an_upgrade_that_stops_midway_is_finished_by_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    directory = tmp_path / "lance"
    layout_1(directory, old_rows(5))

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("killed")

    # Killed before the overwrite commits: the table is still of layout 1, and the next open upgrades it.
    with monkeypatch.context() as patched:
        patched.setattr(LanceTable, "add", crash)
        with pytest.raises(StateError, match="could not upgrade the index"):
            LanceDBSink(directory, D)
    assert lancedb.connect(directory).open_table(TABLE).schema.metadata[LAYOUT_KEY] == b"1"
    sink = LanceDBSink(directory, D)
    assert sink.count() == 5 and sink.table.schema.metadata[LAYOUT_KEY] == b"2"
    # Killed after it commits but before the chunk_id index is built again: the next open builds it.
    sink.table.drop_index(sink.table.list_indices()[0].name)
    assert LanceDBSink(directory, D).table.list_indices()[0].columns == ["chunk_id"]


def test_the_index_writer_goes_on_over_an_upgraded_table(records: list[Record], tmp_path: Path):  # noqa: F811
    size = 3
    expected, totals, _ = uninterrupted(records, tmp_path / "clean", size)
    embedder = FakeEmbedder()
    half = len(records) // (2 * size) * size
    with open_writer(tmp_path, embedder) as writer:
        run(writer, records[:half], size)
        assert isinstance(writer.sink, LanceDBSink)
        assert all(row.current for row in writer.sink.rows(writer.sink.chunk_ids()).values())
        data = writer.sink.table.to_arrow()
    # What a version before layout 2 would have left: the same rows, without the two columns.
    layout_1(tmp_path / "lance", data.drop_columns(ADDED))
    with open_writer(tmp_path, embedder) as writer:
        assert isinstance(writer.sink, LanceDBSink) and writer.sink.table.schema.metadata[LAYOUT_KEY] == b"2"
        run(writer, records, size)
        assert table(writer.sink) == expected
        assert writer.totals == totals
    assert sorted(embedder.hashes()) == sorted(set(embedder.hashes()))  # nothing embedded again
