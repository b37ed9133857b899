"""Retrieval figures of an index of canonical chunks against an index of every chunk position.

An index without dedup holds one entry per live source position; the index writer downstream of streamdedup
holds one per canonical chunk (``chunk_id``). :func:`evaluate` searches both with BM25 for the same queries and
measures each top-k:

- **redundant results**: a result whose ``chunk_id`` is that of a higher-ranked result in the same top-k, that
  is, an exact or verified near copy of it by the engine's own verdict;
- **unique sources**: the source_ids the results lead to (a position its own source; a canonical chunk every
  source that the ``source-mappings`` map to it);
- **embedding calls saved**: entries of the first index minus entries of the second;
- **outdated results**: a result whose chunk only outdated versions of a document hold (its record says
  ``"current": false``, docs/lineages.md; a position counts as its chunk). The index of canonical chunks is
  searched a second time with ``current_only``: its outdated chunks filtered out, the rest ranked as before.

Tokens are lowercase word tokens: maximal runs of Unicode letters, digits and underscores in ``str.lower()`` of
the text, the same for passages and queries, with no stemming and no stop words. Scores are bm25s's (Lucene's
BM25, k1 = 1.5, b = 0.75). A passage that shares no token with the query is not a result, and passages with
equal scores rank in the index's order (by source_id and position; a chunk by its canonical's), so the same
input always gives the same figures.

The texts indexed are the plain texts of the chunks, cut exactly as the ``source`` stage cuts them
(:func:`document_positions`), checked position by position against the content hashes of the mappings.

>>> tokenize("Use ``QuerySet.filter()`` -- Twice, or get_object_or_404!")
['use', 'queryset', 'filter', 'twice', 'or', 'get_object_or_404']
>>> headings("Models\\n======\\n\\nA model is...\\n\\nFields\\n------\\n\\nText.", "text/plain")
['Models', 'Fields']
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamdedup.core.chunking import Chunk
from streamdedup.core.markup import blocks
from streamdedup.core.model import UpsertEvent
from streamdedup.core.normalize import content_hash, normalize
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.collection import line_hash
from streamdedup.core.stages.source_chunks import document_chunks
from streamdedup.errors import ConfigurationError, StreamDedupError
from streamdedup.query.outdated import outdated_by

__all__ = [
    "BM25_B",
    "BM25_K1",
    "MAX_GENERATED_QUERIES",
    "REVIEW_REASONS",
    "Bm25Index",
    "Evaluation",
    "IndexFigures",
    "Outdated",
    "Passage",
    "QueryFigures",
    "TopK",
    "chunk_passages",
    "document_headings",
    "document_positions",
    "evaluate",
    "heading_queries",
    "headings",
    "outdated_results",
    "position_passages",
    "redundant_results",
    "review_counts",
    "tokenize",
    "unique_sources",
]

BM25_K1 = 1.5
BM25_B = 0.75
#: Queries made from headings are at most this many, spread evenly over the corpus.
MAX_GENERATED_QUERIES = 500
#: Every reason a ``review`` flag can give (design §4).
REVIEW_REASONS = ("fact_conflict", "acl_boundary", "semantic")

_WORD = re.compile(r"\w+")
_HTML_TITLE_LEVEL = re.compile(r"<h([1-3])\b", re.IGNORECASE)
# Characters reStructuredText accepts as section adornment: any printable ASCII that is not a letter or digit.
_RST_ADORNMENT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_RST_ROLE = re.compile(r":[\w.+-]+:(?=`)")
_SPACE = re.compile(r"\s+")


def tokenize(text: str) -> list[str]:
    """Return the lowercase word tokens of ``text``."""
    return _WORD.findall(text.lower())


# -- Positions and chunks -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Passage:
    """One entry of an index: where its text is, its text, its chunk, and the sources a result on it reaches."""

    source_id: str  # a position's source, or a chunk's canonical source
    position: int
    chunk_id: str
    text: str
    sources: tuple[str, ...]
    #: A chunk's, when only outdated versions of a document hold it: the newest version's source id.
    outdated_by: str | None = None


def document_positions(
    event: UpsertEvent, params: EngineParams, boilerplate: Collection[str] = ()
) -> list[Chunk]:
    """Cut an upsert into chunks as the ``source`` stage does, stripping the boilerplate lines (by line hash)."""
    keep_line: Callable[[str], bool] | None = None
    if boilerplate and event.chunks is None:

        def keep_line(line: str) -> bool:
            return line_hash(normalize(line)) not in boilerplate

    return document_chunks(event, params, keep_line)


def position_passages(
    chunked: Mapping[str, Sequence[Chunk]], mappings: Mapping[str, Mapping[str, Any]]
) -> list[Passage]:
    """Return a passage per live position of ``mappings``, in source and position order.

    ``chunked`` holds each live source's chunks. Every position must carry the content hash its mapping names:
    anything else means the chunks are not the ones the engine indexed, and raises :class:`StreamDedupError`.
    """
    passages: list[Passage] = []
    for source_id in sorted(mappings):
        entries = mappings[source_id]["chunks"]
        chunks = chunked.get(source_id)
        if chunks is None:
            raise StreamDedupError(f"no document for the live source {source_id!r}")
        if len(chunks) != len(entries):
            raise StreamDedupError(
                f"{source_id!r} was cut into {len(chunks)} chunks, but its mapping has {len(entries)} positions"
            )
        for index, (chunk, entry) in enumerate(zip(chunks, entries, strict=True)):
            if entry["position"] != index or content_hash(chunk.plain) != entry["content_hash"]:
                raise StreamDedupError(
                    f"position {index} of {source_id!r} does not match its mapping (position "
                    f"{entry['position']}, content hash {entry['content_hash']}): the chunks differ from the "
                    "ones the engine indexed"
                )
            passages.append(Passage(source_id, index, entry["chunk_id"], chunk.plain, (source_id,)))
    return passages


def chunk_passages(
    positions: Sequence[Passage],
    chunks: Mapping[str, Mapping[str, Any]],
    mappings: Mapping[str, Mapping[str, Any]],
) -> list[Passage]:
    """Return a passage per canonical chunk: its canonical position's text, every source mapped to it, and
    whether the chunk is outdated (``outdated_by``).

    Raises :class:`StreamDedupError` when the chunks and the mappings disagree (a position pointing at no chunk,
    a chunk whose ``source_count`` is not the number of positions mapped to it).
    """
    text_at = {(p.source_id, p.position): p.text for p in positions}
    sources: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for source_id, mapping in mappings.items():
        for entry in mapping["chunks"]:
            chunk_id = entry["chunk_id"]
            if chunk_id not in chunks:
                raise StreamDedupError(
                    f"position {entry['position']} of {source_id!r} maps to {chunk_id}, which is no live chunk"
                )
            sources.setdefault(chunk_id, set()).add(source_id)
            counts[chunk_id] = counts.get(chunk_id, 0) + 1
    passages: list[Passage] = []
    for chunk_id, record in chunks.items():
        canonical = (record["canonical"]["source_id"], record["canonical"]["position"])
        if canonical not in text_at:
            raise StreamDedupError(f"the canonical position {canonical} of {chunk_id} is no live position")
        if counts.get(chunk_id, 0) != record["source_count"]:
            raise StreamDedupError(
                f"{chunk_id} counts {record['source_count']} source positions, the mappings "
                f"{counts.get(chunk_id, 0)}"
            )
        cited = tuple(sorted(sources[chunk_id]))
        passages.append(Passage(*canonical, chunk_id, text_at[canonical], cited, outdated_by(record)))
    passages.sort(key=lambda p: (p.source_id, p.position))
    return passages


# -- Queries from headings -----------------------------------------------------------------------------------------


def _rst_titles(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]

    def adornment(line: str) -> bool:
        return len(line) >= 2 and len(set(line)) == 1 and line[0] in _RST_ADORNMENT

    titles = []
    for i in range(len(lines) - 1):
        title, under = lines[i], lines[i + 1]
        if not title.strip() or adornment(title) or not adornment(under):
            continue
        over = i > 0 and adornment(lines[i - 1]) and lines[i - 1][0] == under[0]
        if not over and (title[0].isspace() or (i > 0 and lines[i - 1].strip())):
            continue  # a title starts a block, at the margin unless it has an overline
        if len(under) >= len(title.strip()):
            titles.append(title.strip())
    return titles


def _clean_title(title: str) -> str:
    """Drop reStructuredText inline markup (roles, literals, emphasis) and extra spaces from a title."""
    return _SPACE.sub(" ", _RST_ROLE.sub("", title).replace("`", "").replace("*", "")).strip()


def headings(text: str, content_type: str) -> list[str]:
    """Return the headings of a document, in order.

    Markdown: every heading; HTML: ``h1`` to ``h3``; plain text: reStructuredText section titles (a line under,
    and maybe over, a line of one repeated punctuation character at least as long).
    """
    if content_type == "text/markdown":
        found = [b.plain for b in blocks(text, content_type) if b.kind == "heading"]
    elif content_type == "text/html":
        found = [
            b.plain
            for b in blocks(text, content_type)
            if b.kind == "heading" and _HTML_TITLE_LEVEL.match(b.original)
        ]
    else:
        found = _rst_titles(text)
    return [cleaned for cleaned in (_clean_title(h) for h in found) if cleaned]


def document_headings(event: UpsertEvent) -> list[str]:
    """Return an upsert's title and the headings of its text (or of each of its chunks)."""
    found = [event.attrs.title] if event.attrs.title else []
    for text in event.chunks if event.chunks is not None else (event.text or "",):
        found.extend(headings(text, event.content_type))
    return found


def heading_queries(documents: Iterable[UpsertEvent], limit: int = MAX_GENERATED_QUERIES) -> list[str]:
    """Return the distinct headings of ``documents`` as queries, in order of first appearance.

    Two headings with the same tokens are one query. Beyond ``limit``, an evenly spaced selection is kept.
    """
    seen: set[tuple[str, ...]] = set()
    found: list[str] = []
    for event in documents:
        for heading in document_headings(event):
            tokens = tuple(tokenize(heading))
            if tokens and tokens not in seen:
                seen.add(tokens)
                found.append(heading)
    if len(found) <= limit:
        return found
    return [found[i * len(found) // limit] for i in range(limit)]


# -- Search and figures ------------------------------------------------------------------------------------------


def _bm25s() -> Any:
    """Return the bm25s module, or explain how to install it."""
    try:
        module = importlib.import_module("bm25s")
    except ImportError as exc:
        raise ConfigurationError(
            "retrieval figures need the bm25s package: pip install 'streamdedup[eval]'"
        ) from exc
    # bm25s sets its own logger to DEBUG on import, which would print every index it builds: let the
    # application's logging configuration decide instead.
    logging.getLogger("bm25s").setLevel(logging.NOTSET)
    return module


class Bm25Index:
    """A BM25 index over passages, searched for a deterministic top-k."""

    def __init__(self, passages: Sequence[Passage]) -> None:
        self.passages = tuple(passages)
        self._current = np.array([p.outdated_by is None for p in self.passages], dtype=bool)
        tokens = [tokenize(p.text) for p in self.passages]
        self._retriever: Any = None
        if any(tokens):  # bm25s cannot index a corpus without a single token
            self._retriever = _bm25s().BM25(k1=BM25_K1, b=BM25_B, method="lucene")
            self._retriever.index(tokens, show_progress=False)

    def search(self, query: str, k: int, *, current_only: bool = False) -> list[Passage]:
        """Return the ``k`` best passages sharing a token with ``query``; equal scores in index order.

        With ``current_only``, outdated passages are left out before the ``k`` are taken (scores unchanged).
        """
        if self._retriever is None:
            return []
        ids = self._retriever.get_tokens_ids(tokenize(query))
        if not ids:
            return []
        scores = np.asarray(self._retriever.get_scores_from_ids(ids))
        hits = np.flatnonzero(scores > 0)
        if current_only:
            hits = hits[self._current[hits]]
        if len(hits) > k:
            # Keep every passage scoring at least the k-th best score, then order them (ties by index).
            kth = np.partition(scores[hits], len(hits) - k)[len(hits) - k]
            hits = hits[scores[hits] >= kth]
        order = hits[np.lexsort((hits, -scores[hits]))][:k]
        return [self.passages[int(i)] for i in order]


def redundant_results(hits: Sequence[Passage]) -> int:
    """Count the results whose chunk is that of a higher-ranked result."""
    return len(hits) - len({hit.chunk_id for hit in hits})


def unique_sources(hits: Sequence[Passage]) -> int:
    """Count the distinct sources the results lead to."""
    return len({source for hit in hits for source in hit.sources})


def review_counts(reviews: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Count the review flags of a view by reason, every known reason included."""
    counts = dict.fromkeys(REVIEW_REASONS, 0)
    for flag in reviews.values():
        counts[flag["reason"]] = counts.get(flag["reason"], 0) + 1
    return counts


@dataclass(frozen=True, slots=True)
class TopK:
    """One query's top-k in one index: how many results, how many redundant, how many sources reached."""

    results: int
    redundant: int
    sources: int

    @classmethod
    def of(cls, hits: Sequence[Passage]) -> TopK:
        """Measure a top-k."""
        return cls(len(hits), redundant_results(hits), unique_sources(hits))


@dataclass(frozen=True, slots=True)
class Outdated:
    """How many results of one query's top-k are outdated, in each index."""

    without_dedup: int
    with_dedup: int
    current_only: int


def outdated_results(hits: Sequence[Passage], outdated: Collection[str]) -> int:
    """Count the results whose chunk is one of the ``outdated`` chunk ids."""
    return sum(hit.chunk_id in outdated for hit in hits)


@dataclass(frozen=True, slots=True)
class QueryFigures:
    """One query's top-k in both indexes, and in the index of canonical chunks with ``current_only``."""

    query: str
    without_dedup: TopK
    with_dedup: TopK
    current_only: TopK
    outdated: Outdated


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass(frozen=True, slots=True)
class IndexFigures:
    """One index's figures over a query set; means are over the queries that found something."""

    entries: int
    queries: int
    queries_with_results: int
    results: int
    redundant_results: int
    redundant_share: float | None  # mean over queries of redundant results / results
    queries_with_redundancy: int
    unique_sources: float | None  # mean sources reached per top-k
    distinct_chunks: float | None  # mean distinct chunks per top-k
    outdated_results: int
    outdated_share: float | None  # mean over queries of outdated results / results
    queries_with_outdated: int

    @classmethod
    def of(cls, entries: int, tops: Sequence[TopK], outdated: Sequence[int]) -> IndexFigures:
        """Sum up the top-k of every query, with the outdated results of each."""
        found = [t for t in tops if t.results]
        stale = [n for t, n in zip(tops, outdated, strict=True) if t.results]
        return cls(
            entries=entries,
            queries=len(tops),
            queries_with_results=len(found),
            results=sum(t.results for t in tops),
            redundant_results=sum(t.redundant for t in tops),
            redundant_share=_mean([t.redundant / t.results for t in found]),
            queries_with_redundancy=sum(1 for t in found if t.redundant),
            unique_sources=_mean([t.sources for t in found]),
            distinct_chunks=_mean([t.results - t.redundant for t in found]),
            outdated_results=sum(outdated),
            outdated_share=_mean([n / t.results for t, n in zip(found, stale, strict=True)]),
            queries_with_outdated=sum(1 for n in stale if n),
        )

    def as_dict(self) -> dict[str, Any]:
        """Return the figures as JSON-ready data."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Both indexes' figures for one query set (and with ``current_only``), the savings, the review flags."""

    k: int
    queries: tuple[QueryFigures, ...]
    without_dedup: IndexFigures
    with_dedup: IndexFigures
    current_only: IndexFigures
    review_flags: Mapping[str, int]

    @property
    def embedding_calls_saved(self) -> int:
        """Entries the index without dedup embeds beyond one per canonical chunk."""
        return self.without_dedup.entries - self.with_dedup.entries

    def as_dict(self) -> dict[str, Any]:
        """Return the figures as JSON-ready data, each query's top-k included."""
        return {
            "k": self.k,
            "queries": len(self.queries),
            "tokenizer": "lowercase word tokens (\\w+ of str.lower()), no stemming, no stop words",
            "bm25": {"implementation": "bm25s", "method": "lucene", "k1": BM25_K1, "b": BM25_B},
            "without_dedup": self.without_dedup.as_dict(),
            "with_dedup": self.with_dedup.as_dict(),
            "current_only": self.current_only.as_dict(),
            "outdated_share": {
                "without_filter": self.with_dedup.outdated_share,
                "with_filter": self.current_only.outdated_share,
            },
            "embedding_calls_saved": self.embedding_calls_saved,
            "review_flags": dict(self.review_flags),
            # each query's top-k in both indexes (the current-only figures are in the totals only)
            "per_query": [dataclasses.asdict(q, dict_factory=_both_indexes) for q in self.queries],
        }


def _both_indexes(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {name: value for name, value in items if name not in ("current_only", "outdated")}


def evaluate(
    positions: Sequence[Passage],
    chunks: Sequence[Passage],
    queries: Sequence[str],
    *,
    k: int,
    reviews: Mapping[str, Mapping[str, Any]],
    progress: Callable[[int], None] = lambda done: None,
) -> Evaluation:
    """Search an index of ``positions`` and one of ``chunks`` for every query and measure both top-k.

    The index of ``chunks`` is searched again with ``current_only``, and each top-k's outdated results counted
    (a position's by its chunk). ``progress`` is told how many queries are done after each one.
    """
    if k < 1:
        raise ConfigurationError(f"k must be at least 1, not {k}")
    without, with_ = Bm25Index(positions), Bm25Index(chunks)
    outdated = {p.chunk_id for p in chunks if p.outdated_by is not None}
    figures = []
    for done, query in enumerate(queries, start=1):
        tops = without.search(query, k), with_.search(query, k), with_.search(query, k, current_only=True)
        counts = Outdated(*(outdated_results(top, outdated) for top in tops))
        figures.append(QueryFigures(query, TopK.of(tops[0]), TopK.of(tops[1]), TopK.of(tops[2]), counts))
        progress(done)

    def totals(entries: int, index: str) -> IndexFigures:
        tops = [getattr(f, index) for f in figures]
        return IndexFigures.of(entries, tops, [getattr(f.outdated, index) for f in figures])

    return Evaluation(
        k=k,
        queries=tuple(figures),
        without_dedup=totals(len(positions), "without_dedup"),
        with_dedup=totals(len(chunks), "with_dedup"),
        current_only=totals(len(chunks) - len(outdated), "current_only"),
        review_flags=review_counts(reviews),
    )
