"""Semantic pairs between versions of one document, resolved by its lineage in ``audit`` instead of flagged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from streamdedup.core.engine import Engine
from streamdedup.core.lineage import LineageRules
from streamdedup.core.normalize import content_hash
from streamdedup.index.writer import IndexWriter
from tests.helpers import upsert
from tests.unit.test_index_writer import (
    AUTOMOBILE,
    CAR,
    OTHER,
    REFUND_14,
    REFUND_30,
    SCHEMAS,
    Record,
    batches,
    corpus_records,
    open_writer,
    paraphrase_embedder,
)

RULES = {"docs": ["docs/{version}/{page...}"]}
LINEAGE = "docs/{version}/garage/tires.txt"


def _records(engine: Engine, layout: dict[str, list[str]]) -> list[Record]:
    """The outputs of an embedded run over sources (source id → chunks), one upsert each, in order."""
    return corpus_records(
        engine, [upsert(s, 1, chunks, day=n + 1) for n, (s, chunks) in enumerate(layout.items())]
    )


def _apply(writer: IndexWriter, records: list[Record]) -> tuple[list[Any], list[Any]]:
    delivered: list[Any] = []
    reviews: list[Any] = []
    for end, batch in batches(records, 2):
        report = writer.apply(batch, {"test": str(end).encode()}, deliver=delivered.extend)
        reviews.extend(report.reviews)
    return delivered, reviews


def _writer(tmp_path: Path, rules: dict[str, Any] | None) -> IndexWriter:
    lineages = LineageRules.parse(rules) if rules is not None else None
    return open_writer(tmp_path, paraphrase_embedder(), lineages=lineages)


RELEASES = {
    "docs/1.0/garage/tires.txt": [CAR],
    "docs/2.0/garage/tires.txt": [AUTOMOBILE],
    "web/other.txt": [OTHER],
}


@pytest.mark.parametrize(
    "rules", [None, {}, {"docs": [{"pattern": "docs/{version}/{page...}", "review": True}]}]
)
def test_without_a_rule_for_them_versions_are_flagged_as_before(engine: Engine, tmp_path: Path, rules: Any):
    with _writer(tmp_path, rules) as writer:
        delivered, reviews = _apply(writer, _records(engine, RELEASES))
        assert writer.totals.review_flags == 1 and writer.totals.lineage_resolved == 0
    assert [o.topic for o in delivered] == ["review"] == [o.topic for o in reviews]


def test_a_pair_of_versions_of_one_page_is_resolved_by_its_lineage(engine: Engine, tmp_path: Path):
    validator = Draft202012Validator(json.loads((SCHEMAS / "audit.v1.schema.json").read_text()))
    with _writer(tmp_path, RULES) as writer:
        delivered, reviews = _apply(writer, _records(engine, RELEASES))
        assert (writer.totals.review_flags, writer.totals.lineage_resolved) == (0, 1)
    assert reviews == []
    (audit,) = delivered
    low, high = sorted((content_hash(CAR), content_hash(AUTOMOBILE)))
    versions = {content_hash(CAR): ["1.0"], content_hash(AUTOMOBILE): ["2.0"]}
    assert (audit.topic, audit.key) == ("audit", f"{low}:{high}")
    assert audit.value == {
        "schema": "streamdedup.audit/v1",
        "chunk_id": None,
        "action": "resolved",
        "reason": "lineage",
        "subject": f"{low}:{high}",
        "lineage": LINEAGE,
        "a": {"content_hash": low, "versions": versions[low]},
        "b": {"content_hash": high, "versions": versions[high]},
        "detail": f"versions {versions[low][0]} and {versions[high][0]} of {LINEAGE}",
    }
    assert list(validator.iter_errors(audit.value)) == []


def test_pages_of_other_lineages_are_still_flagged_and_two_passages_of_one_version_are_not(
    engine: Engine, tmp_path: Path
):
    other_pages = {"docs/1.0/garage/tires.txt": [CAR], "docs/2.0/garage/winter.txt": [AUTOMOBILE]}
    with _writer(tmp_path / "pages", RULES) as writer:
        delivered, _ = _apply(writer, _records(engine, other_pages))
        assert (writer.totals.review_flags, writer.totals.lineage_resolved) == (1, 0)
    assert [o.topic for o in delivered] == ["review"]
    # 2.0 holds both texts: two passages of one document, which it states on purpose (streamdedup.index.semantic).
    both_in_one_version = {
        "docs/1.0/garage/tires.txt": [CAR],
        "docs/2.0/garage/tires.txt": [CAR, AUTOMOBILE],
        "web/other.txt": [OTHER],
    }
    with _writer(tmp_path / "one", RULES) as writer:
        delivered, _ = _apply(writer, _records(engine, both_in_one_version))
        assert (writer.totals.review_flags, writer.totals.lineage_resolved) == (0, 0)
    assert delivered == []


def test_the_count_of_resolved_pairs_survives_a_restart(engine: Engine, tmp_path: Path):
    records = _records(engine, RELEASES)
    with _writer(tmp_path, RULES) as writer:
        _apply(writer, records)
    with _writer(tmp_path, RULES) as writer:
        assert (writer.totals.review_flags, writer.totals.lineage_resolved) == (0, 1)


def test_texts_too_short_for_the_near_copy_test_are_not_flagged(engine: Engine, tmp_path: Path):
    # "The car needs new tires" and "The automobile requires fresh tyres": one direction for the embedder (cosine 1),
    # but fewer than min_shingles shingles each, as headings and one-line code examples are.
    short = {"web/a.txt": [" ".join(CAR.split()[:5])], "web/b.txt": [" ".join(AUTOMOBILE.split()[:5])]}
    embedder = paraphrase_embedder()
    assert float(embedder.vector(short["web/a.txt"][0]) @ embedder.vector(short["web/b.txt"][0])) > 0.99
    with _writer(tmp_path / "short", {}) as writer:
        delivered, _ = _apply(writer, _records(engine, short))
        assert writer.totals.review_flags == 0
    assert delivered == []
    long = {"web/a.txt": [CAR], "web/b.txt": [AUTOMOBILE]}  # the same pair at full length is flagged
    with _writer(tmp_path / "long", {}) as writer:
        delivered, _ = _apply(writer, _records(engine, long))
    assert [o.topic for o in delivered] == ["review"]


def test_the_engines_fact_flags_between_versions_are_resolved_by_the_lineage(engine: Engine, tmp_path: Path):
    # A refund period changed between releases: the engine flags the near copies' different facts; the writer sees
    # that versions of one page hold them and resolves the flag (its audit record, and the flag's tombstone).
    layout = {"docs/1.0/shop/refunds.txt": [REFUND_30], "docs/2.0/shop/refunds.txt": [REFUND_14]}
    records = _records(engine, layout)
    flags = [r for r in records if r[0] == "review" and r[2] is not None]
    assert [json.loads(r[2])["reason"] for r in flags] == ["fact_conflict"]
    key = flags[0][1]
    for rules, resolved in (
        (RULES, True),
        (None, False),
        ({"docs": [{"pattern": RULES["docs"][0], "review": True}]}, False),
    ):
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        with _writer(folder, rules) as writer:
            delivered, _ = _apply(writer, records)
            assert writer.totals.lineage_resolved == (1 if resolved else 0)
            assert writer.totals.review_flags == 0
        if not resolved:
            assert delivered == []
            continue
        audit, tombstone = delivered
        assert (tombstone.topic, tombstone.key, tombstone.value) == ("review", key, None)
        assert audit.topic == "audit" and audit.key == key
        assert (audit.value["action"], audit.value["reason"]) == ("resolved", "lineage")
        assert audit.value["lineage"] == "docs/{version}/shop/refunds.txt"


def test_a_fact_flag_kept_open_for_its_newer_text_is_resolved_after_a_restart(engine: Engine, tmp_path: Path):
    # The flag comes before the newer text's chunk and mapping: it waits, in the writer's view, for their rows.
    records = _records(
        engine, {"docs/1.0/shop/refunds.txt": [REFUND_30], "docs/2.0/shop/refunds.txt": [REFUND_14]}
    )
    cut = next(n for n, r in enumerate(records) if r[0] == "review") + 1
    with _writer(tmp_path, RULES) as writer:
        first, _ = _apply(writer, records[:cut])
        assert first == [] and writer.totals.lineage_resolved == 0
    with _writer(tmp_path, RULES) as writer:
        rest, _ = _apply(writer, records[cut:])
        assert writer.totals.lineage_resolved == 1
    assert [(o.topic, o.value is None) for o in rest] == [("audit", False), ("review", True)]


def test_a_fact_flag_a_source_outside_the_lineage_holds_a_side_of_stays_for_a_reviewer(
    engine: Engine, tmp_path: Path
):
    # The FAQ copies the old refund period: it contradicts the current docs, so the flag is not a version's change.
    # (The writer decides a flag when it has both texts' rows; a copy that comes later does not reopen it.)
    layout = {
        "web/faq.txt": [REFUND_30],
        "docs/1.0/shop/refunds.txt": [REFUND_30],
        "docs/2.0/shop/refunds.txt": [REFUND_14],
    }
    with _writer(tmp_path, RULES) as writer:
        delivered, _ = _apply(writer, _records(engine, layout))
        assert writer.totals.lineage_resolved == 0
    assert delivered == []


def test_nothing_is_kept_of_a_fact_flag_once_decided(engine: Engine, tmp_path: Path):
    records = _records(
        engine, {"docs/1.0/shop/refunds.txt": [REFUND_30], "docs/2.0/shop/refunds.txt": [REFUND_14]}
    )
    with _writer(tmp_path, RULES) as writer:
        for end, batch in batches(
            records, 1
        ):  # the flag waits for the newer text's rows, one record at a time
            writer.apply(batch, {"test": str(end).encode()})
        assert writer.totals.lineage_resolved == 1
        assert writer.view.extra_names("lineages:") == []
