"""The query-time safety net: collapse order, per-source cap, permissions, unknown chunks, MMR, citations."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.feeds import run_feed
from streamdedup.drivers.jsonl import FileSink, JsonlFeed
from streamdedup.errors import ConfigurationError
from streamdedup.query.safety_net import (
    MMR,
    Citation,
    Hit,
    MemoryLookup,
    SafetyNet,
    chunk_id_in,
    mmr,
    readable,
)
from streamdedup.store.memory import MemoryStore

EXAMPLE = Path(__file__).parents[2] / "examples" / "feed.jsonl"


def chunk(
    chunk_id: str, canonical: str, acl: list[str], *sources: str, count: int | None = None
) -> dict[str, Any]:
    """Return a ``canonical-chunks`` record whose ``sources`` lists ``sources`` (position 0 of each)."""
    listed = [
        {"source_id": s, "position": 0, "content_hash": chunk_id, "acl": acl,
         "modified_at": f"2024-01-0{n % 9 + 1}T00:00:00Z", "authority": 0, "uri": f"https://example.com/{s}",
         "title": f"Title of {s}"}
        for n, s in enumerate(sources)
    ]  # fmt: skip
    return {
        "schema": "streamdedup.chunk/v2",
        "chunk_id": chunk_id,
        "text": f"text of {chunk_id}",
        "content_hash": chunk_id,
        "canonical": {"source_id": canonical, "position": 0},
        "acl": acl,
        "sources": listed,
        "source_count": len(listed) if count is None else count,
    }


def mapping(
    source_id: str, *chunk_ids: str, acl: list[str] | None = None, v1: bool = False
) -> dict[str, Any]:
    """Return a ``source-mappings`` record with ``chunk_ids`` at positions 0, 1, ...

    As ``mapping/v2`` it says of the source what :func:`chunk` does of its first source (readers ``acl``, public by
    default); as ``mapping/v1`` nothing.
    """
    entries = [
        {"position": n, "content_hash": c, "chunk_id": c, "relation": "exact", "jaccard": 1.0}
        for n, c in enumerate(chunk_ids)
    ]
    if v1:
        return {"schema": "streamdedup.mapping/v1", "source_id": source_id, "version": 1, "chunks": entries}
    return {
        "schema": "streamdedup.mapping/v2", "source_id": source_id, "version": 1, "acl": acl or ["*"],
        "modified_at": "2024-01-01T00:00:00Z", "uri": f"https://example.com/{source_id}",
        "title": f"Title of {source_id}", "chunks": entries,
    }  # fmt: skip


def lookup_of(*records: dict[str, Any]) -> MemoryLookup:
    outputs = [
        {"topic": "canonical-chunks" if "chunk_id" in r else "source-mappings",
         "key": r.get("chunk_id") or r["source_id"], "value": r}
        for r in records
    ]  # fmt: skip
    return MemoryLookup.from_outputs(outputs)


@pytest.fixture
def lookup() -> MemoryLookup:
    return lookup_of(
        chunk("x", "wiki:a", ["*"], "wiki:a", "wiki:b"),
        chunk("y", "wiki:a", ["*"], "wiki:a"),
        chunk("z", "wiki:b", ["*"], "wiki:b"),
        chunk("w", "wiki:b", ["*"], "wiki:b"),
        chunk("eng", "wiki:eng", ["eng", "contractors"], "wiki:eng"),
        mapping("wiki:a", "x", "y"),
        mapping("wiki:b", "z", "x", "w"),
        mapping("wiki:eng", "eng"),
    )


def test_copies_collapse_into_the_best_scored_and_ties_keep_the_retrievers_order(lookup):
    hits = [
        Hit("x at 0.5", "x", 0.5),
        Hit("y at 0.9", "y", 0.9),
        Hit("x at 0.9", "x", 0.9),
        Hit("z at 0.5", "z", 0.5),
        Hit("w without score", "w", None),
        Hit("x at 0.9 again", "x", 0.9),
        Hit("z at 0.5 again", "z", 0.5),
    ]
    kept = SafetyNet(lookup).apply(hits, ["*"])
    assert [(k.item, k.rank, k.duplicates) for k in kept] == [
        ("y at 0.9", 1, 0),
        ("x at 0.9", 2, 2),
        ("z at 0.5", 3, 1),
        ("w without score", 4, 0),
    ]
    assert [k.score for k in kept] == [0.9, 0.9, 0.5, None]


def test_hits_without_scores_keep_the_retrievers_order(lookup):
    hits = [Hit(n, c) for n, c in enumerate("zxyxz")]
    assert [(k.item, k.chunk_id) for k in SafetyNet(lookup).apply(hits, ["*"])] == [
        (0, "z"),
        (1, "x"),
        (2, "y"),
    ]


def test_max_per_source_counts_a_hit_for_its_chunks_canonical_source(lookup):
    hits = [Hit("x", "x", 0.9), Hit("z", "z", 0.8), Hit("y", "y", 0.7), Hit("w", "w", 0.6)]
    # x is canonical in wiki:a and also a copy in wiki:b: it counts for wiki:a only, so z still fits under wiki:b.
    assert [k.item for k in SafetyNet(lookup, max_per_source=1).apply(hits, ["*"])] == ["x", "z"]
    assert [k.item for k in SafetyNet(lookup, max_per_source=2).apply(hits, ["*"])] == ["x", "z", "y", "w"]
    # A dropped hit takes no place under the cap.
    restricted = [Hit("eng", "eng", 1.0), Hit("x", "x", 0.9)]
    net = SafetyNet(lookup_of(chunk("eng", "wiki:a", ["eng"]), chunk("x", "wiki:a", ["*"])), max_per_source=1)
    assert [k.item for k in net.apply(restricted, ["*"])] == ["x"]


def test_a_chunk_reaches_only_the_principals_its_acl_names(lookup):
    hits = [Hit("eng", "eng", 0.9), Hit("x", "x", 0.5)]
    net = SafetyNet(lookup)
    assert [k.item for k in net.apply(hits, ["*"])] == ["x"]
    assert [k.item for k in net.apply(hits, [])] == ["x"]
    assert [k.item for k in net.apply(hits, ["sales", "support"])] == ["x"]
    assert [k.item for k in net.apply(hits, ["contractors"])] == ["eng", "x"]
    assert [k.item for k in net.apply(hits, ("*", "eng"))] == ["eng", "x"]
    with pytest.raises(ConfigurationError, match="not the string"):
        net.apply(hits, "eng")


def test_readable():
    assert readable(["*"], []) and readable(["*"], ["anyone"])
    assert readable(["eng", "hr"], ["hr"])
    assert not readable(["eng"], ["*"]) and not readable(["eng"], []) and not readable([], ["eng", "*"])


def test_an_unknown_chunk_is_dropped_unless_asked_to_keep_it(lookup):
    hits = [Hit("deleted", "gone", 0.9), Hit("x", "x", 0.5), Hit("deleted again", "gone", 0.4)]
    assert [k.item for k in SafetyNet(lookup).apply(hits, ["eng"])] == ["x"]
    kept = SafetyNet(lookup, unknown="keep").apply(hits, ["eng"])
    assert (kept[0].item, kept[0].chunk, kept[0].citations, kept[0].duplicates) == ("deleted", None, (), 1)
    assert [k.item for k in kept] == ["deleted", "x"]
    assert kept[0].metadata() == {} and kept[0].text is None


def test_a_hit_without_chunk_id_is_dropped_unless_asked_to_pass_it_through(lookup):
    hits = [Hit("foreign", None, 0.95), Hit("x", "x", 0.9), Hit("other foreign", None, 0.1)]
    assert [k.item for k in SafetyNet(lookup).apply(hits, ["*"])] == ["x"]
    kept = SafetyNet(lookup, unidentified="keep", max_per_source=1).apply(hits, ["*"])
    assert [(k.item, k.rank, k.citations) for k in kept] == [
        ("foreign", 0, ()),
        ("x", 1, kept[1].citations),
        ("other foreign", 2, ()),
    ]
    assert kept[1].source_ids == ("wiki:a", "wiki:b")


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [({"chunk_id": "c"}, "c"), ({}, None), (None, None), ({"chunk_id": ""}, None), ({"chunk_id": 7}, None)],
)
def test_chunk_id_in_metadata(metadata, expected):
    assert chunk_id_in(metadata) == expected


def test_mmr_by_hand():
    # q = (1, 0); a = b = (0.8, 0.6) (relevance 0.8, similar to each other 1); c = (0.6, -0.8) (relevance 0.6,
    # similarity to a 0.48 - 0.48 = 0). First pick: a (0.8 beats c's 0.6; b ties with a and comes later).
    # lambda 0.5: b scores 0.5 * 0.8 - 0.5 * 1 = -0.1, c scores 0.5 * 0.6 - 0.5 * 0 = 0.3: c.
    # lambda 0.9: b scores 0.72 - 0.1 = 0.62, c scores 0.54 - 0 = 0.54: b.
    query, candidates = [1.0, 0.0], [[0.8, 0.6], [0.8, 0.6], [0.6, -0.8]]
    assert mmr(query, candidates, k=2, lambda_mult=0.5) == [0, 2]
    assert mmr(query, candidates, k=2, lambda_mult=0.9) == [0, 1]
    assert mmr(query, candidates, k=5, lambda_mult=0.5) == [0, 2, 1]
    # Scale does not matter (cosine); a zero vector is similar to nothing.
    assert mmr([3.0, 0.0], [[0.0, 0.0], [8.0, 6.0]], k=2, lambda_mult=1.0) == [1, 0]
    assert mmr(query, [], k=2) == []
    with pytest.raises(ConfigurationError, match="dimensions"):
        mmr(query, [[1.0, 0.0, 0.0]], k=1)


def test_mmr_in_the_safety_net_picks_after_the_checks(lookup):
    hits = [
        Hit("x", "x", 0.9, [0.8, 0.6]),
        Hit("x copy", "x", 0.8, [0.0, 1.0]),  # collapsed before MMR sees it
        Hit("eng", "eng", 0.85, [0.6, -0.8]),  # not readable by the caller
        Hit("y", "y", 0.7, [0.8, 0.6]),
        Hit("z", "z", 0.6, [0.6, -0.8]),
    ]
    net = SafetyNet(lookup, mmr=MMR(k=2, lambda_mult=0.5))
    assert [k.item for k in net.apply(hits, ["*"], query_embedding=[1.0, 0.0])] == ["x", "z"]
    assert [k.item for k in net.apply(hits[:1], ["*"], query_embedding=[1.0, 0.0])] == ["x"]
    with pytest.raises(ConfigurationError, match="query has none"):
        net.apply(hits, ["*"])
    with pytest.raises(ConfigurationError, match="1 of 2 hits"):
        net.apply([Hit("x", "x", 0.9), Hit("y", "y", 0.8, [1.0, 0.0])], ["*"], query_embedding=[1.0, 0.0])


def test_citations_are_complete_beyond_the_sources_a_chunk_record_lists():
    everyone = [f"site:{n:03d}" for n in range(150)]
    listed = everyone[:100]
    records = [
        chunk("popular", "site:000", ["*"], *listed, count=len(everyone)),
        chunk("other", "site:149", ["*"], "site:149"),
        *(mapping(s, "popular") for s in everyone[:-1]),
        mapping("site:149", "other", "popular", "popular"),
    ]
    lookup = lookup_of(*records)
    [kept] = SafetyNet(lookup, citations="all").apply([Hit("doc", "popular", 1.0)], ["*"])
    assert len(kept.chunk["sources"]) == 100 < kept.chunk["source_count"] == len(kept.citations) == 150
    assert kept.source_ids == tuple(sorted(everyone))
    by_id = {c.source_id: c for c in kept.citations}
    assert by_id["site:000"] == Citation(
        "site:000", (0,), "https://example.com/site:000", "Title of site:000", "2024-01-01T00:00:00Z", ("*",)
    )
    # A source no chunk record lists: its mapping says who reads it and how to cite it.
    assert by_id["site:120"] == Citation(
        "site:120", (0,), "https://example.com/site:120", "Title of site:120", "2024-01-01T00:00:00Z", ("*",)
    )
    [readable_only] = SafetyNet(lookup).apply([Hit("doc", "popular", 1.0)], ["*"])
    assert readable_only.citations == kept.citations
    assert by_id["site:149"].positions == (1, 2) and by_id["site:149"].title == "Title of site:149"
    assert kept.metadata()["citations"][0] == {
        "source_id": "site:000",
        "positions": [0],
        "uri": "https://example.com/site:000",
        "title": "Title of site:000",
        "modified_at": "2024-01-01T00:00:00Z",
    }
    assert kept.metadata()["source_ids"] == sorted(everyone)


def test_a_v1_mapping_leaves_a_sources_citation_to_the_chunk_records():
    everyone = [f"site:{n:03d}" for n in range(150)]
    listed = everyone[:100]
    records = [
        chunk("popular", "site:000", ["*"], *listed, count=len(everyone)),
        chunk("other", "site:149", ["*"], "site:149"),  # the only record that says what site:149 is
        *(mapping(s, "popular", v1=True) for s in everyone[:-1]),
        mapping("site:149", "other", "popular", "popular", v1=True),
    ]
    lookup = lookup_of(*records)
    [kept] = SafetyNet(lookup, citations="all").apply([Hit("doc", "popular", 1.0)], ["*"])
    assert kept.source_ids == tuple(sorted(everyone))
    by_id = {c.source_id: c for c in kept.citations}
    assert by_id["site:000"] == Citation(
        "site:000", (0,), "https://example.com/site:000", "Title of site:000", "2024-01-01T00:00:00Z", ("*",)
    )
    assert by_id["site:120"] == Citation("site:120", (0,), None, None, None)  # no record lists it
    # By default a source is cited only to a caller who can read it: one whose readers no record names is not.
    [readable_only] = SafetyNet(lookup).apply([Hit("doc", "popular", 1.0)], ["*"])
    assert readable_only.source_ids == (*listed, "site:149")
    assert by_id["site:149"].positions == (1, 2) and by_id["site:149"].title == "Title of site:149"


@pytest.mark.parametrize("v1", [False, True])
def test_readable_citations_leave_out_sources_the_caller_cannot_open(v1):
    record = chunk("c", "wiki:eng", ["eng", "support"], "wiki:eng", "wiki:support", "wiki:late", count=4)
    for source in record["sources"]:
        source["acl"] = [source["source_id"].removeprefix("wiki:")]
    names = ("eng", "support", "late", "unlisted")
    lookup = lookup_of(record, *(mapping(f"wiki:{s}", "c", acl=[s], v1=v1) for s in names))
    hits = [Hit("doc", "c", 1.0)]
    assert SafetyNet(lookup, citations="all").apply(hits, ["support"])[0].source_ids == (
        "wiki:eng", "wiki:late", "wiki:support", "wiki:unlisted",
    )  # fmt: skip
    assert SafetyNet(lookup).apply(hits, ["support"])[0].source_ids == ("wiki:support",)
    assert SafetyNet(lookup).apply(hits, ["eng", "late"])[0].source_ids == ("wiki:eng", "wiki:late")
    # The source no chunk record lists is cited to its readers by its mapping's ACL; a v1 mapping has none.
    unlisted = SafetyNet(lookup).apply(hits, ["eng", "unlisted"])[0].source_ids
    assert unlisted == (("wiki:eng",) if v1 else ("wiki:eng", "wiki:unlisted"))


def test_a_sources_mapping_is_what_its_citation_says_whatever_the_chunk_records_say():
    record = chunk("c", "wiki:a", ["eng", "hr"], "wiki:a")  # lists wiki:a as readable by eng, with a title
    newer = {**mapping("wiki:a", "c", acl=["hr"]), "uri": None, "modified_at": "2024-02-01T00:00:00Z"}
    del newer["title"]
    lookup = lookup_of(record, newer)
    [cited] = lookup.sources_of("c")
    assert cited == Citation("wiki:a", (0,), None, None, "2024-02-01T00:00:00Z", ("hr",))
    assert SafetyNet(lookup).apply([Hit("doc", "c", 1.0)], ["eng"])[0].citations == ()


def test_the_kept_text_is_the_canonical_chunks_text(lookup):
    [kept] = SafetyNet(lookup).apply([Hit("a near copy's text", "x", 1.0)], ["*"])
    assert kept.text == "text of x" and kept.item == "a near copy's text"


def test_memory_lookup_keeps_the_last_value_of_each_key():
    lookup = MemoryLookup.from_outputs(
        [
            {"topic": "canonical-chunks", "key": "a", "value": chunk("a", "s", ["eng"], "s")},
            {"topic": "source-mappings", "key": "s", "value": mapping("s", "a")},
            {"topic": "audit", "key": "a", "value": {"action": "merge"}},
            {"topic": "canonical-chunks", "key": "a", "value": chunk("a", "s", ["*"], "s")},
            {"topic": "canonical-chunks", "key": "b", "value": chunk("b", "t", ["*"], "t")},
            {"topic": "canonical-chunks", "key": "b", "value": None},
            {"topic": "source-mappings", "key": "t", "value": mapping("t", "a")},
            {"topic": "source-mappings", "key": "t", "value": None},
        ]
    )
    assert lookup.chunk("a")["acl"] == ["*"] and lookup.chunk("b") is None
    assert [c.source_id for c in lookup.sources_of("a")] == ["s"]
    assert lookup.sources_of("b") == [] and lookup.sources_of("nothing") == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_per_source": 0}, "max_per_source"),
        ({"unknown": "skip"}, "unknown"),
        ({"unidentified": "pass"}, "unidentified"),
        ({"citations": "some"}, "citations"),
    ],
)
def test_options_out_of_range_are_refused(options, message):
    with pytest.raises(ConfigurationError, match=message):
        SafetyNet(MemoryLookup({}, {}), **options)


@pytest.mark.parametrize(("k", "lambda_mult"), [(0, 0.5), (2, -0.1), (2, 1.5), (2, math.nan)])
def test_mmr_options_out_of_range_are_refused(k, lambda_mult):
    with pytest.raises(ConfigurationError):
        MMR(k=k, lambda_mult=lambda_mult)


@pytest.fixture(scope="module")
def example_outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from streamdedup.core.engine import Engine
    from streamdedup.core.params import EngineParams

    path = tmp_path_factory.mktemp("example") / "outputs.jsonl"
    sink = FileSink(str(path))
    try:
        run_feed(
            EmbeddedRunner(Engine(EngineParams()), MemoryStore()), JsonlFeed(EXAMPLE), sink, batch_size=1
        )
    finally:
        sink.close()
    return path


def test_memory_lookup_answers_as_the_view_does(example_outputs, tmp_path):
    from streamdedup.query.output_file import build_view

    lookup = MemoryLookup.from_outputs(json.loads(line) for line in example_outputs.read_text().splitlines())
    with build_view(example_outputs, tmp_path / "view") as view:
        chunk_ids = list(view.chunk_ids())
        assert len(chunk_ids) == 12
        for chunk_id in chunk_ids:
            assert lookup.chunk(chunk_id) == view.chunk(chunk_id)
            assert lookup.sources_of(chunk_id) == view.sources_of(chunk_id)
        assert (
            sum(len(lookup.sources_of(c)) > 1 for c in chunk_ids) == 3
        )  # two help paragraphs, the install one


def test_importing_the_safety_net_imports_no_framework_and_no_numpy():
    code = (
        "import sys, streamdedup.query.safety_net; "
        "print(sorted(m for m in ('langchain_core', 'llama_index', 'haystack', 'numpy', 'rocksdict') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
