"""Chunks only outdated versions of a document hold: the safety net's ``current_only``, its default, what a kept
outdated chunk says, and the index rows' ``current`` and ``outdated_by``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from streamdedup.core.engine import Engine
from streamdedup.core.params import EngineParams
from streamdedup.index import open_sink
from streamdedup.index.sink import Row
from streamdedup.query.outdated import outdated_by
from streamdedup.query.safety_net import Hit, MemoryLookup, SafetyNet
from streamdedup.view import ViewWriter
from tests.helpers import upsert
from tests.unit.test_index_writer import batches, corpus_records, open_writer, paraphrase_embedder

OLD, NEW = "docs/1.0/intro.txt", "docs/2.0/intro.txt"
RULES = {"default": ["docs/{version}/{page...}"]}


def _chunk(chunk_id: str, source_id: str, **flags: Any) -> dict[str, Any]:
    return {
        "chunk_id": chunk_id,
        "text": f"text of {chunk_id}",
        "content_hash": chunk_id,
        "acl": ["*"],
        "canonical": {"source_id": source_id, "position": 0},
        "source_count": 1,
        "sources": [{"source_id": source_id, "acl": ["*"]}],
        **flags,
    }


def _mapping(*chunk_ids: str) -> dict[str, Any]:
    return {
        "acl": ["*"],
        "uri": None,
        "modified_at": "2026-01-01T00:00:00Z",
        "chunks": [{"position": n, "chunk_id": c} for n, c in enumerate(chunk_ids)],
    }


# "gone" is the passage 2.0 dropped; "kept" is in both releases; "added" only in 2.0.
LOOKUP = MemoryLookup(
    {
        "gone": _chunk("gone", OLD, current=False, outdated_by=NEW),
        "kept": _chunk("kept", NEW),
        "added": _chunk("added", NEW),
    },
    {OLD: _mapping("gone", "kept"), NEW: _mapping("kept", "added")},
)
HITS = [Hit("gone", "gone", 0.9), Hit("kept", "kept", 0.8), Hit("added", "added", 0.7)]


def test_outdated_by_reads_the_records_flag():
    assert outdated_by(LOOKUP.chunk("gone")) == NEW
    assert outdated_by(LOOKUP.chunk("kept")) is None and outdated_by(None) is None
    assert outdated_by({"current": True, "outdated_by": NEW}) is None


def test_current_only_drops_outdated_chunks():
    net = SafetyNet(LOOKUP, current_only=True)
    assert [k.item for k in net.apply(HITS, ["*"])] == ["kept", "added"]
    assert [k.item for k in net.apply(HITS, ["*"], current_only=False)] == ["gone", "kept", "added"]


def test_a_kept_outdated_chunk_names_the_newest_version_in_its_citations_and_metadata():
    gone, kept, _ = SafetyNet(LOOKUP, current_only=False).apply(HITS, ["*"])
    assert gone.outdated_by == NEW
    assert gone.metadata()["current"] is False and gone.metadata()["outdated_by"] == NEW
    assert [c["outdated_by"] for c in gone.metadata()["citations"]] == [NEW]
    assert gone.citations[0].source_id == OLD and gone.citations[0].outdated_by == NEW
    # A current chunk says nothing of it: absent means current, as in its record.
    assert kept.outdated_by is None
    assert "current" not in kept.metadata() and "outdated_by" not in kept.metadata()
    assert all("outdated_by" not in c for c in kept.metadata()["citations"])


def test_the_default_drops_outdated_chunks_and_nothing_where_no_lineage_is_in_use(monkeypatch):
    monkeypatch.delenv("STREAMDEDUP_LINEAGE_RULES", raising=False)
    assert SafetyNet(LOOKUP).current_only is True
    assert [k.item for k in SafetyNet(LOOKUP).apply(HITS, ["*"])] == ["kept", "added"]
    assert SafetyNet(LOOKUP, current_only=False).current_only is False
    # Where no lineage is in use no chunk says it is outdated: on or off, the same chunks are kept.
    current = MemoryLookup(
        {"kept": LOOKUP.chunk("kept"), "added": LOOKUP.chunk("added")}, {NEW: _mapping("kept", "added")}
    )
    hits = HITS[1:]
    on, off = SafetyNet(current).apply(hits, ["*"]), SafetyNet(current, current_only=False).apply(hits, ["*"])
    assert [k.item for k in on] == [k.item for k in off] == ["kept", "added"]


def test_lancedb_rows_carry_current_and_outdated_by_and_search_filters_them(tmp_path: Path):
    sink = open_sink(f"lancedb://{tmp_path}", 2, model="m")
    rows = [
        Row("gone", "old", "h1", (OLD,), ("*",), "2026-01-01T00:00:00Z", "m", outdated_by=NEW),
        Row("kept", "both", "h2", (NEW, OLD), ("*",), "2026-01-01T00:00:00Z", "m"),
    ]
    sink.upsert(rows, np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32))
    held = sink.rows(["gone", "kept"])
    assert (held["gone"].current, held["gone"].outdated_by) == (False, NEW)
    assert (held["kept"].current, held["kept"].outdated_by) == (True, None)
    query = np.array([1.0, 0.0], dtype=np.float32)
    assert [m.chunk_id for m in sink.search(query, 2)] == ["gone", "kept"]
    assert [m.chunk_id for m in sink.search(query, 2, current_only=True)] == ["kept"]
    assert [m.chunk_id for m in sink.search(query, 2, principals=["eng"], current_only=True)] == ["kept"]
    # A newer release that holds the passage again makes it current: a metadata-only update.
    sink.update_metadata([Row("gone", "old", "h1", (NEW, OLD), ("*",), "2026-01-02T00:00:00Z", "m")])
    assert sink.rows(["gone"])["gone"].current
    assert [m.chunk_id for m in sink.search(query, 2, current_only=True)] == ["gone", "kept"]


def test_the_index_writer_writes_the_flags_of_the_chunk_records(tmp_path: Path):
    engine = Engine(EngineParams(lineage_rules=json.dumps(RULES)))
    stays = "Install the package with pip and import it from your own code as the tutorial shows."
    dropped = "The legacy setup script needs a compiler and the headers of the interpreter to build."
    added = "Wheels for every platform make the compiler unnecessary from this release on."
    events = [upsert(OLD, 1, [stays, dropped], day=1), upsert(NEW, 1, [stays, added], day=2)]
    records = corpus_records(engine, events)
    with open_writer(tmp_path, paraphrase_embedder()) as writer:
        for end, batch in batches(records, 10):
            writer.apply(batch, {"test": str(end).encode()})
        held = {row.text: row for row in writer.sink.rows(writer.sink.chunk_ids()).values()}
        assert (held[dropped].current, held[dropped].outdated_by) == (False, NEW)
        assert held[stays].current and held[added].current
        assert held[stays].outdated_by is None
        everything = {k.text for k in writer.search(dropped, ["*"], k=3, current_only=False)}
        current = {k.text for k in writer.search(dropped, ["*"], k=3, current_only=True)}
    assert dropped in everything and current == {stays, added}


def test_the_writers_search_leaves_outdated_rows_out_by_default(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("STREAMDEDUP_LINEAGE_RULES", raising=False)
    engine = Engine(EngineParams(lineage_rules=json.dumps(RULES)))
    dropped = "The legacy setup script needs a compiler and the headers of the interpreter to build."
    records = corpus_records(
        engine, [upsert(OLD, 1, [dropped], day=1), upsert(NEW, 1, ["Wheels now."], day=2)]
    )
    with open_writer(tmp_path, paraphrase_embedder()) as writer:
        for end, batch in batches(records, 10):
            writer.apply(batch, {"test": str(end).encode()})
        found = [k.text for k in writer.search(dropped, ["*"], k=2)]
        everything = [k.text for k in writer.search(dropped, ["*"], k=2, current_only=False)]
    assert dropped not in found and dropped in everything


def test_the_views_index_fields_say_when_a_chunk_is_outdated(tmp_path: Path):
    records = [
        ("canonical-chunks", "gone", json.dumps(LOOKUP.chunk("gone")).encode()),
        ("canonical-chunks", "kept", json.dumps(LOOKUP.chunk("kept")).encode()),
        ("source-mappings", OLD, json.dumps(_mapping("gone", "kept")).encode()),
    ]
    with ViewWriter(tmp_path / "view") as view:
        view.apply(records, {})
        gone, kept = view.index_fields("gone"), view.index_fields("kept")
    assert gone is not None and (gone["current"], gone["outdated_by"]) == (False, NEW)
    assert kept is not None and "current" not in kept and "outdated_by" not in kept
