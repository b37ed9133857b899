"""Markup-aware ingestion and stable chunking, end to end through the engine."""

from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.testing.invariants import check_invariants
from streamdedup.testing.reference import live_sources
from tests.helpers import run_embedded
from tests.unit.test_markup import PASSAGE_HTML, PASSAGE_MD, PASSAGE_TEXT


def text_upsert(source_id, version, text, content_type="text/plain", day=1):
    attrs = SourceAttrs(acl=("*",), modified_at=day * 86_400_000_000)
    return UpsertEvent(
        source_id=source_id, version=version, attrs=attrs, text=text, content_type=content_type
    )


def test_one_passage_as_markdown_html_and_text_is_one_canonical_with_three_sources(engine):
    events = [
        text_upsert("readme.md", 1, PASSAGE_MD, "text/markdown", day=1),
        text_upsert("help.html", 1, PASSAGE_HTML, "text/html", day=2),
        text_upsert("notes.txt", 1, PASSAGE_TEXT, "text/plain", day=3),
    ]
    view = run_embedded(engine, events)
    (chunk,) = view.chunks.values()
    # sources in the canonical policy's order: the newest first
    assert [s["source_id"] for s in chunk["sources"]] == ["notes.txt", "help.html", "readme.md"]
    assert (
        chunk["canonical"]["source_id"] == "notes.txt" and chunk["text"] == PASSAGE_TEXT
    )  # original text kept
    assert sorted(c["relation"] for m in view.mappings.values() for c in m["chunks"]) == [
        "canonical",
        "exact",
        "exact",
    ]
    assert check_invariants(view, live_sources(events), threshold=0.8, shingle_size=5) == []


def test_editing_one_paragraph_changes_only_that_mapping_entry(engine):
    paragraphs = [
        f"Section {i} explains how the billing service handles invoices for the team number {i} in detail."
        for i in range(12)
    ]
    doc = "# Billing guide\n\n" + "\n\n".join(paragraphs)
    edited = list(paragraphs)
    edited[6] = edited[6].replace("handles", "processes")
    v1 = text_upsert("guide.md", 1, doc, "text/markdown")
    v2 = text_upsert("guide.md", 2, "# Billing guide\n\n" + "\n\n".join(edited), "text/markdown")
    before = run_embedded(engine, [v1]).mappings["guide.md"]["chunks"]
    after_view = run_embedded(engine, [v1, v2])
    after = after_view.mappings["guide.md"]["chunks"]
    assert len(before) == len(after) == 12
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed == [6]
    assert before[6]["content_hash"] != after[6]["content_hash"]
    assert check_invariants(after_view, live_sources([v1, v2]), threshold=0.8, shingle_size=5) == []
