"""The query-time safety net: the hits a retriever returned, made fit to hand to a prompt.

An index built from ``canonical-chunks`` holds each passage once. An index that was built otherwise, or that lags
behind the outputs, can still return several copies of one chunk, text the caller may not read, and chunks that
have been deleted since they were indexed. :class:`SafetyNet` takes the hits of one query, each naming its chunk
id (the ``chunk_id`` of the position's ``source-mappings`` entry, stored with the passage when it was indexed), and
the caller's principals, and in this order:

1. drops a hit that names no chunk id (``unidentified="keep"`` passes it through unchecked instead);
2. drops a hit whose chunk the lookup does not hold: it was deleted (``unknown="keep"`` passes it through
   unchecked instead, for an index that runs ahead of its view);
3. drops a hit whose chunk the caller may not read: the chunk's ``acl`` (always complete) must hold ``"*"`` or one
   of the caller's principals. A caller holding only ``"*"``, or no principal at all, reads public chunks only;
   with ``current_only``, drops a hit whose chunk only outdated versions of a document hold (its record says
   ``"current": false``, docs/lineages.md);
4. collapses hits that share a chunk id into the best-scored one;
5. keeps at most ``max_per_source`` hits per source, a hit counting for its chunk's *canonical* source (the one
   whose text the chunk is; a chunk has exactly one, so a popular passage is not capped by every space that
   copied it);
6. picks ``mmr.k`` of the rest by maximal marginal relevance, if :class:`MMR` is set, over embeddings the caller
   already has;
7. attaches every source of each kept chunk that the caller can read as a :class:`Citation`, complete: a chunk
   record lists at most 100 sources, so they come from :meth:`ChunkLookup.sources_of`, and whether the caller
   can read each one from its ``source-mappings`` record, which carries its readers, address, title and time
   (``streamdedup.mapping/v2``; ``citations="all"`` cites the sources the caller cannot open too). An outdated
   chunk kept (``current_only`` off) says so: its citations and :meth:`Kept.metadata` name ``outdated_by``, the
   newest version of the document, which no longer holds the passage.

Kept hits come best-scored first (a hit without a score after every scored one), ties in the retriever's order; with
MMR, in the order MMR chose them. Each carries the framework's own object untouched; the adapters in
:mod:`streamdedup.adapters` build the documents to return from it.

>>> lookup = MemoryLookup.from_outputs([
...     {"topic": "canonical-chunks", "key": "c1", "value": {"chunk_id": "c1", "text": "Reset it.", "acl": ["eng"],
...      "canonical": {"source_id": "wiki:a", "position": 0}, "source_count": 2,
...      "sources": [{"source_id": "wiki:a", "acl": ["eng"]}, {"source_id": "wiki:b", "acl": ["eng"]}]}},
...     {"topic": "source-mappings", "key": "wiki:a", "value": {"acl": ["eng"], "uri": "https://wiki/a",
...      "modified_at": "2024-05-01T10:00:00Z", "chunks": [{"position": 0, "chunk_id": "c1"}]}},
...     {"topic": "source-mappings", "key": "wiki:b", "value": {"acl": ["eng", "hr"], "uri": None,
...      "modified_at": "2024-05-02T10:00:00Z", "chunks": [{"position": 3, "chunk_id": "c1"}]}},
... ])
>>> hits = [Hit("copy b", "c1", 0.7), Hit("copy a", "c1", 0.9), Hit("gone", "c0", 0.8)]
>>> [(k.item, k.duplicates, k.source_ids) for k in SafetyNet(lookup).apply(hits, ["eng"])]
[('copy a', 1, ('wiki:a', 'wiki:b'))]
>>> SafetyNet(lookup).apply(hits, ["*"])
[]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

from streamdedup.core.messages import Output
from streamdedup.core.model import EVERYONE
from streamdedup.core.output_view import COMPACTED_TOPICS, View
from streamdedup.errors import ConfigurationError
from streamdedup.query.outdated import outdated_by

__all__ = [
    "MAPPED_FIELDS",
    "MMR",
    "ChunkLookup",
    "Citation",
    "Hit",
    "Kept",
    "MemoryLookup",
    "Policy",
    "SafetyNet",
    "chunk_id_in",
    "mapped_about",
    "mmr",
    "outdated_by",
    "readable",
]

T = TypeVar("T")

#: What to do with a hit the net cannot check: drop it, or pass it through unchecked.
Policy = Literal["drop", "keep"]

#: What a ``source-mappings`` record (``streamdedup.mapping/v2``) says of its source, besides its positions.
MAPPED_FIELDS = ("acl", "modified_at", "uri", "title")


@dataclass(frozen=True, slots=True)
class Citation:
    """One source of a chunk: its positions that map to the chunk, and what a reader needs to open it."""

    source_id: str
    positions: tuple[int, ...]
    uri: str | None = None
    title: str | None = None
    modified_at: str | None = None
    #: The source's readers, as its mapping says (a ``mapping/v1`` record says nothing of them: then as the chunk
    #: records that list the source say); None when neither does.
    acl: tuple[str, ...] | None = None
    #: For a chunk only outdated versions hold, the newest version of the document (a source id); None otherwise.
    outdated_by: str | None = None

    @classmethod
    def of(cls, source_id: str, positions: Iterable[int], about: Mapping[str, Any]) -> Citation:
        """Return the citation of a source's ``positions`` from what is known of it (:data:`MAPPED_FIELDS`)."""
        acl = about.get("acl")
        return cls(
            source_id=source_id,
            positions=tuple(sorted(positions)),
            uri=about.get("uri"),
            title=about.get("title"),
            modified_at=about.get("modified_at"),
            acl=None if acl is None else tuple(acl),
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the citation as a JSON-ready dict (positions as a list; the readers are left out).

        ``outdated_by`` is there only for a passage that exists only in older versions of its document.
        """
        cited: dict[str, Any] = {
            "source_id": self.source_id,
            "positions": list(self.positions),
            "uri": self.uri,
            "title": self.title,
            "modified_at": self.modified_at,
        }
        if self.outdated_by is not None:
            cited["outdated_by"] = self.outdated_by
        return cited


@runtime_checkable
class ChunkLookup(Protocol):
    """Where the safety net reads chunks: :class:`streamdedup.query.live_view.View`, or :class:`MemoryLookup`."""

    def chunk(self, chunk_id: str) -> dict[str, Any] | None:
        """Return the ``canonical-chunks`` value of ``chunk_id`` (``streamdedup.chunk/v2``), or None."""
        ...

    def sources_of(self, chunk_id: str) -> Sequence[Citation]:
        """Return every source of the chunk, complete, sorted by source id."""
        ...


@dataclass(frozen=True, slots=True)
class Hit(Generic[T]):
    """One retrieved item: the framework's own object, the chunk id its metadata names, its score, its embedding."""

    item: T
    chunk_id: str | None
    score: float | None = None
    embedding: Sequence[float] | None = None


@dataclass(frozen=True, slots=True)
class Kept(Generic[T]):
    """A hit the safety net kept, with its chunk record and every source of the chunk.

    ``rank`` is the hit's place in the retriever's answer (from 0); ``duplicates`` counts the other hits of the
    same chunk that were collapsed into it. ``chunk`` is None for a hit passed through unchecked.
    """

    item: T
    chunk_id: str | None
    score: float | None
    rank: int
    chunk: dict[str, Any] | None
    citations: tuple[Citation, ...]
    duplicates: int = 0

    @property
    def text(self) -> str | None:
        """Return the canonical chunk's text: the text the chunk's ``acl`` admits its readers to."""
        return None if self.chunk is None else str(self.chunk["text"])

    @property
    def source_ids(self) -> tuple[str, ...]:
        """Return the id of every cited source."""
        return tuple(c.source_id for c in self.citations)

    @property
    def outdated_by(self) -> str | None:
        """Return the newest version of the document when only outdated versions hold the chunk, else None."""
        return outdated_by(self.chunk)

    def metadata(self) -> dict[str, Any]:
        """Return what an adapter adds to the kept document's metadata (nothing for a hit passed through).

        An outdated chunk's also has ``"current": False`` and ``outdated_by``, as its record has them.
        """
        if self.chunk is None:
            return {}
        added = {"citations": [c.to_dict() for c in self.citations], "source_ids": list(self.source_ids)}
        newest = self.outdated_by
        if newest is not None:
            added.update(current=False, outdated_by=newest)
        return added


@dataclass(frozen=True, slots=True)
class MMR:
    """Maximal marginal relevance: pick ``k`` hits, trading relevance (``lambda_mult`` 1) for diversity (0)."""

    k: int
    lambda_mult: float = 0.5

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigurationError(f"MMR k must be at least 1, not {self.k}")
        if not 0.0 <= self.lambda_mult <= 1.0:
            raise ConfigurationError(f"MMR lambda_mult must be between 0 and 1, not {self.lambda_mult}")


def readable(acl: Iterable[str], principals: Iterable[str]) -> bool:
    """Return whether a caller holding ``principals`` may read a chunk with ``acl`` (``"*"`` admits everyone).

    >>> readable(["eng", "support"], ["support"]), readable(["eng"], ["*"]), readable(["*"], [])
    (True, False, True)
    """
    readers = set(acl)
    return EVERYONE in readers or not readers.isdisjoint(principals)


def mapped_about(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Return what a ``source-mappings`` value says of its source: its ``acl``, ``modified_at``, ``uri``, ``title``.

    A ``mapping/v2`` value says all four (a title it leaves out is None); a ``mapping/v1`` value none, so the
    answer is empty and a reader takes them from the chunk records that list the source.

    >>> mapped_about({"acl": ["eng"], "modified_at": "2024-05-01T10:00:00Z", "uri": None, "chunks": []})
    {'acl': ['eng'], 'modified_at': '2024-05-01T10:00:00Z', 'uri': None, 'title': None}
    >>> mapped_about({"schema": "streamdedup.mapping/v1", "chunks": []})
    {}
    """
    if "acl" not in mapping:  # v1
        return {name: mapping[name] for name in MAPPED_FIELDS if name in mapping}
    return {name: mapping.get(name) for name in MAPPED_FIELDS}


def chunk_id_in(metadata: Mapping[str, Any] | None, key: str = "chunk_id") -> str | None:
    """Return the chunk id a document's metadata names under ``key``, or None if it names none."""
    value = None if metadata is None else metadata.get(key)
    return value if isinstance(value, str) and value else None


def mmr(
    query: Sequence[float], candidates: Sequence[Sequence[float]], *, k: int, lambda_mult: float = 0.5
) -> list[int]:
    """Return the indices of up to ``k`` candidates in the order maximal marginal relevance picks them.

    Each step picks the candidate with the highest ``lambda_mult * sim(query, c) - (1 - lambda_mult) *
    max(sim(c, p) for p picked)``, similarity being the cosine (0 for a zero vector); ties go to the earlier
    candidate.

    >>> mmr([1.0, 0.0], [[0.8, 0.6], [0.8, 0.6], [0.6, -0.8]], k=2, lambda_mult=0.5)
    [0, 2]
    """
    # numpy is imported here, not at the top, so that importing the module (as the view does) stays cheap.
    import numpy as np  # noqa: PLC0415

    if not candidates or k < 1:
        return []
    matrix = _unit_rows(np.asarray(candidates, dtype=np.float64))
    target = _unit_rows(np.asarray([query], dtype=np.float64))[0]
    if matrix.shape[1] != target.shape[0]:
        raise ConfigurationError(
            f"MMR needs embeddings of one size: the query has {target.shape[0]} dimensions, the hits "
            f"{matrix.shape[1]}"
        )
    relevance = matrix @ target
    similarity = matrix @ matrix.T
    picked: list[int] = []
    left = list(range(len(candidates)))
    while left and len(picked) < k:
        redundancy = similarity[np.ix_(left, picked)].max(axis=1) if picked else np.zeros(len(left))
        scores = lambda_mult * relevance[left] - (1.0 - lambda_mult) * redundancy
        best = left[int(np.argmax(scores))]  # argmax returns the first of equal maxima
        picked.append(best)
        left.remove(best)
    return picked


def _unit_rows(matrix: Any) -> Any:
    import numpy as np  # noqa: PLC0415

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


@dataclass(frozen=True, slots=True)
class SafetyNet:
    """The checks a retriever's hits go through before they reach a prompt (see the module docstring).

    ``unknown`` decides about a hit whose chunk the lookup does not hold, ``unidentified`` about a hit that names
    no chunk id: ``"drop"`` (the default: neither can be checked) or ``"keep"``, which passes the hit through as
    it is, unchecked, uncollapsed with others of no chunk id, uncounted by ``max_per_source`` and without
    citations. With the default ``citations="readable"``, a kept chunk cites every source the caller can read
    (:attr:`Citation.acl`, from the source's mapping), so nobody is shown the title or address of a copy they
    cannot open; a source whose readers the lookup does not know (a ``mapping/v1`` record, written before
    mappings carried them, of a source that no chunk record lists: beyond the records' cap of
    ``STREAMDEDUP_MAX_CHUNK_SOURCES`` entries) is not cited. ``"all"`` cites every source, readable or not.

    ``current_only`` (on by default, :mod:`streamdedup.query.outdated`) drops the chunks only outdated versions of
    a document hold.
    :meth:`apply` can override it per call.
    """

    lookup: ChunkLookup
    max_per_source: int | None = None
    unknown: Policy = "drop"
    unidentified: Policy = "drop"
    mmr: MMR | None = None
    citations: Literal["all", "readable"] = "readable"
    current_only: bool = True

    def __post_init__(self) -> None:
        if self.max_per_source is not None and self.max_per_source < 1:
            raise ConfigurationError(f"max_per_source must be at least 1, not {self.max_per_source}")
        for name in ("unknown", "unidentified"):
            if getattr(self, name) not in ("drop", "keep"):
                raise ConfigurationError(f"{name} must be 'drop' or 'keep', not {getattr(self, name)!r}")
        if self.citations not in ("all", "readable"):
            raise ConfigurationError(f"citations must be 'all' or 'readable', not {self.citations!r}")

    def apply(
        self,
        hits: Iterable[Hit[T]],
        principals: Iterable[str],
        *,
        query_embedding: Sequence[float] | None = None,
        current_only: bool | None = None,
    ) -> list[Kept[T]]:
        """Return the hits a caller holding ``principals`` may be given, each chunk once, with its citations.

        ``query_embedding`` (and an embedding on every hit) is needed when ``mmr`` is set. ``current_only``
        overrides the net's own for this call (None: the net's).
        """
        if isinstance(principals, str):
            raise ConfigurationError(f"principals is a list of principals, not the string {principals!r}")
        caller = frozenset(principals)
        drop_outdated = self.current_only if current_only is None else current_only
        numbered = sorted(enumerate(hits), key=lambda pair: _order(pair[1].score, pair[0]))
        records: dict[str, dict[str, Any] | None] = {}
        kept: list[_Draft[T]] = []
        first: dict[str, _Draft[T]] = {}  # chunk id -> the hit kept for it
        for rank, hit in numbered:
            if hit.chunk_id is None:
                if self.unidentified == "keep":
                    kept.append(_Draft(rank, hit, None))
                continue
            if hit.chunk_id in first:
                first[hit.chunk_id].duplicates += 1
                continue
            if hit.chunk_id not in records:
                records[hit.chunk_id] = self.lookup.chunk(hit.chunk_id)
            record = records[hit.chunk_id]
            if record is None and self.unknown == "drop":
                continue
            if record is not None and not readable(record.get("acl", ()), caller):
                continue
            if drop_outdated and outdated_by(record) is not None:
                continue
            first[hit.chunk_id] = _Draft(rank, hit, record)
            kept.append(first[hit.chunk_id])
        chosen = self._picked(self._capped(kept), query_embedding)
        return [
            Kept(
                item=draft.hit.item,
                chunk_id=draft.hit.chunk_id,
                score=draft.hit.score,
                rank=draft.rank,
                chunk=draft.record,
                citations=self._cite(draft.hit.chunk_id, draft.record, caller),
                duplicates=draft.duplicates,
            )
            for draft in chosen
        ]

    def _capped(self, drafts: list[_Draft[T]]) -> list[_Draft[T]]:
        if self.max_per_source is None:
            return drafts
        counts: dict[str, int] = {}
        capped: list[_Draft[T]] = []
        for draft in drafts:
            if draft.record is not None:
                source = str(draft.record["canonical"]["source_id"])
                if counts.get(source, 0) >= self.max_per_source:
                    continue
                counts[source] = counts.get(source, 0) + 1
            capped.append(draft)
        return capped

    def _picked(self, drafts: list[_Draft[T]], query_embedding: Sequence[float] | None) -> list[_Draft[T]]:
        if self.mmr is None or not drafts:
            return drafts
        embeddings = [draft.hit.embedding for draft in drafts]
        missing = sum(e is None for e in embeddings)
        if query_embedding is None or missing:
            raise ConfigurationError(
                f"MMR needs the query's embedding and one on every hit; {missing} of {len(drafts)} hits have "
                "none" + ("" if query_embedding is not None else ", and the query has none")
            )
        vectors = [e for e in embeddings if e is not None]
        chosen = mmr(query_embedding, vectors, k=self.mmr.k, lambda_mult=self.mmr.lambda_mult)
        return [drafts[n] for n in chosen]

    def _cite(
        self, chunk_id: str | None, record: dict[str, Any] | None, caller: frozenset[str]
    ) -> tuple[Citation, ...]:
        if chunk_id is None or record is None:
            return ()
        cited = tuple(self.lookup.sources_of(chunk_id))
        newest = outdated_by(record)
        if newest is not None:
            cited = tuple(dataclasses.replace(c, outdated_by=newest) for c in cited)
        if self.citations == "all":
            return cited
        return tuple(c for c in cited if c.acl is not None and readable(c.acl, caller))


@dataclass(slots=True)
class _Draft(Generic[T]):
    rank: int
    hit: Hit[T]
    record: dict[str, Any] | None
    duplicates: int = 0


def _order(score: float | None, rank: int) -> tuple[bool, float, int]:
    # Best score first, hits without a score (or a NaN one) after all others, ties in the retriever's order.
    if score is None or math.isnan(score):
        return (True, 0.0, rank)
    return (False, -score, rank)


class MemoryLookup:
    """A :class:`ChunkLookup` over output records held in memory: for tests, notebooks and small corpora.

    :class:`streamdedup.query.live_view.View` is the persistent one. Here, as there, the sources of a chunk come from
    the ``source-mappings`` records, complete, and so do each source's readers, ``uri``, ``title`` and
    ``modified_at`` (:func:`mapped_about`). What a ``mapping/v1`` record does not say comes from the chunk records
    that list the source (the chunk's own record first), None for a source that no chunk record lists.
    """

    def __init__(self, chunks: Mapping[str, dict[str, Any]], mappings: Mapping[str, dict[str, Any]]) -> None:
        self._chunks = dict(chunks)
        self._positions: dict[str, dict[str, list[int]]] = {}  # chunk id -> source id -> positions
        self._mapped: dict[str, dict[str, Any]] = {}  # source id -> what its mapping says of it
        for source_id, mapping in mappings.items():
            self._mapped[source_id] = mapped_about(mapping)
            for entry in mapping.get("chunks", ()):
                by_source = self._positions.setdefault(str(entry["chunk_id"]), {})
                by_source.setdefault(source_id, []).append(int(entry["position"]))
        self._about: dict[str, dict[str, Any]] = {}  # source id -> the first chunk record's entry for it
        for chunk_id in sorted(self._chunks):
            for entry in self._chunks[chunk_id].get("sources", ()):
                self._about.setdefault(str(entry["source_id"]), entry)

    @classmethod
    def from_outputs(cls, records: Iterable[Mapping[str, Any]]) -> MemoryLookup:
        """Build a lookup from ``{"topic", "key", "value"}`` output records: last value per key, None deletes."""
        folded = View().apply_all(
            Output(str(r["topic"]), str(r["key"]), r["value"])
            for r in records
            if r["topic"] in COMPACTED_TOPICS
        )
        return cls(folded.chunks, folded.mappings)

    def chunk(self, chunk_id: str) -> dict[str, Any] | None:
        """Return the ``canonical-chunks`` value of ``chunk_id``, or None when there is no such live chunk."""
        return self._chunks.get(chunk_id)

    def sources_of(self, chunk_id: str) -> list[Citation]:
        """Return every source with a position mapped to ``chunk_id``, sorted by source id."""
        own = {str(s["source_id"]): s for s in (self._chunks.get(chunk_id) or {}).get("sources", ())}
        cited: list[Citation] = []
        for source_id, positions in sorted(self._positions.get(chunk_id, {}).items()):
            about = self._mapped.get(source_id, {})
            if len(about) < len(MAPPED_FIELDS):
                listed = own.get(source_id) or self._about.get(source_id) or {}
                about = {**{name: listed.get(name) for name in MAPPED_FIELDS}, **about}
            cited.append(Citation.of(source_id, positions, about))
        return cited
