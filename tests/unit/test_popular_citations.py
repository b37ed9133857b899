"""Citations and ACL filtering of a chunk held by 1,000 sources, ten times what its chunk record lists.

Source ``n`` is readable by ``u<n>`` alone. The chunk record lists 100 of the sources; the mappings
(``streamdedup.mapping/v2``) say who reads each source and how to cite it, so a caller who reads only a source the
record does not list gets the chunk, cited by that source: through the safety net over a lookup in memory, the
live view and the index writer's search. ``tests/adapters`` asks each framework's adapter the same.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.contract.codec import encode_output_line
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.normalize import content_hash
from streamdedup.index import open_sink
from streamdedup.index.writer import IndexWriter
from streamdedup.retrieval import Citation, Hit, MemoryLookup, SafetyNet
from streamdedup.view import ViewWriter
from tests.helpers import POPULAR_SOURCES, POPULAR_TEXT, popular_outputs, popular_source

CHUNK = content_hash(POPULAR_TEXT)
LAST = POPULAR_SOURCES - 1


def cited(n: int) -> Citation:
    """Return the citation of the popular chunk's ``n``-th source, with its readers."""
    return Citation(
        popular_source(n),
        (0,),
        f"https://wiki.example/space-{n:03d}/keys",
        f"Key rotation (space {n})",
        f"1970-01-{2 + n % 30:02d}T00:00:00Z",
        (f"u{n}",),
    )


@pytest.fixture(scope="module")
def outputs(engine: Engine) -> tuple[list[Output], list[Output]]:
    return popular_outputs(engine)


def records(outputs: Sequence[Output]) -> list[dict[str, object]]:
    return [json.loads(encode_output_line(o)) for o in outputs]


@pytest.fixture(scope="module")
def lookup(outputs: tuple[list[Output], list[Output]]) -> MemoryLookup:
    return MemoryLookup.from_outputs(records(outputs[0]))


def test_the_chunk_record_lists_a_tenth_of_the_sources_and_the_last_is_not_among_them(lookup: MemoryLookup):
    record = lookup.chunk(CHUNK)
    assert record is not None and record["source_count"] == POPULAR_SOURCES
    assert len(record["sources"]) == 100
    assert popular_source(LAST) not in {s["source_id"] for s in record["sources"]}
    assert len(record["acl"]) == POPULAR_SOURCES  # the chunk's readers are always complete


@given(st.integers(0, LAST))
def test_a_caller_reading_one_source_gets_the_chunk_cited_by_that_source(lookup: MemoryLookup, n: int):
    [kept] = SafetyNet(lookup).apply([Hit("passage", CHUNK, 1.0)], [f"u{n}"])
    assert kept.text == POPULAR_TEXT
    assert kept.citations == (cited(n),)
    assert kept.metadata()["citations"] == [cited(n).to_dict()]


def test_a_caller_reading_no_source_gets_nothing(lookup: MemoryLookup):
    hits = [Hit("passage", CHUNK, 1.0)]
    assert SafetyNet(lookup).apply(hits, ["nobody"]) == []
    assert SafetyNet(lookup).apply(hits, ["*"]) == []
    assert len(SafetyNet(lookup, citations="all").apply(hits, ["u0"])[0].citations) == POPULAR_SOURCES


def test_an_acl_change_of_the_last_source_is_what_the_caller_gets(
    outputs: tuple[list[Output], list[Output]],
):
    before, after = outputs
    lookup = MemoryLookup.from_outputs(records([*before, *after]))
    hits = [Hit("passage", CHUNK, 1.0)]
    assert SafetyNet(lookup).apply(hits, [f"u{LAST}"]) == []
    [kept] = SafetyNet(lookup).apply(hits, ["admins"])
    assert kept.citations == (dataclasses.replace(cited(LAST), acl=("admins",)),)
    [kept] = SafetyNet(lookup).apply(hits, [f"u{LAST - 1}", "admins"])
    assert kept.source_ids == (popular_source(LAST - 1), popular_source(LAST))


@pytest.fixture
def view(outputs: tuple[list[Output], list[Output]], tmp_path: Path) -> Iterator[ViewWriter]:
    with ViewWriter(tmp_path / "view") as writer:
        writer.apply(((o.topic, o.key or "", _json(o)) for o in outputs[0]), {})
        yield writer


def _json(output: Output) -> bytes | None:
    value = json.loads(encode_output_line(output))["value"]
    return None if value is None else json.dumps(value).encode()


def test_the_live_view_cites_and_filters_by_every_sources_mapping(
    view: ViewWriter, outputs: tuple[list[Output], list[Output]], lookup: MemoryLookup
):
    assert view.sources_of(CHUNK) == lookup.sources_of(CHUNK)
    hits = [Hit("passage", CHUNK, 1.0)]
    for n in (0, 500, LAST):
        assert SafetyNet(view).apply(hits, [f"u{n}"])[0].citations == (cited(n),)
    assert SafetyNet(view).apply(hits, ["nobody"]) == []
    view.apply(((o.topic, o.key or "", _json(o)) for o in outputs[1]), {})
    assert SafetyNet(view).apply(hits, [f"u{LAST}"]) == []
    assert SafetyNet(view).apply(hits, ["admins"])[0].source_ids == (popular_source(LAST),)
    assert view.sources_of(CHUNK)[LAST].acl == ("admins",)


class WordHashEmbedder:
    """A deterministic bag of hashed words, for a search that needs no model."""

    dimensions = 64
    model_id = "word-hash-64"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            for word in text.lower().split():
                row[hashlib.blake2b(word.encode(), digest_size=4).digest()[0] % self.dimensions] += 1.0
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)


def test_the_index_writers_search_cites_the_one_source_the_caller_reads(
    outputs: tuple[list[Output], list[Output]], tmp_path: Path
):
    embedder = WordHashEmbedder()
    sink = open_sink(f"lancedb://{tmp_path / 'lance'}", embedder.dimensions, model=embedder.model_id)
    query = "how often are the signing keys rotated"
    with IndexWriter(tmp_path / "writer", sink, embedder, semantic_neighbours=0) as writer:
        writer.apply([(o.topic, o.key or "", _json(o)) for o in outputs[0]], {"test": b"1"})
        [kept] = writer.search(query, [f"u{LAST}"], k=5)
        assert (kept.chunk_id, kept.citations) == (CHUNK, (cited(LAST),))
        assert writer.search(query, ["nobody"], k=5) == []
        writer.apply([(o.topic, o.key or "", _json(o)) for o in outputs[1]], {"test": b"2"})
        assert writer.search(query, [f"u{LAST}"], k=5) == []
        [kept] = writer.search(query, ["admins"], k=5)
        assert kept.source_ids == (popular_source(LAST),)
