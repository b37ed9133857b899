"""The index writer: keeps a vector database in step with the outputs, embedding each distinct text once.

:class:`IndexWriter` takes output records in their order, as :meth:`streamdedup.query.live_view.ViewWriter.apply`
does, and keeps two things in step with them: a view in its directory (the layout of ``materialize --into``, so the
view's readers and :class:`~streamdedup.query.safety_net.SafetyNet` can use it), and a
:class:`~streamdedup.index.sink.Sink` holding one row per live chunk: the chunk's text, its vector, every source
(``source_ids``, complete: a chunk record lists at most 100 sources, the view has them all), its readers, the
canonical source's ``modified_at``.

**What a batch does to a chunk.** A chunk is touched by a batch when a ``canonical-chunks`` record names it, or a
``source-mappings`` record names it in its new value or in the source's previous mapping. A touched chunk that is
gone, or that no live source maps to, has no row; one whose text (content hash) the row already has gets its
other fields set in place (a *metadata-only update*) when they changed, nothing when they did not; one with a new
text gets a row with its vector. A text's vector comes from the writer's vector cache (by content hash) if it was
ever embedded, from the embedder otherwise: so the embedder sees each distinct text once in the writer's life,
and an ACL change, a replayed record or a text that comes back after its deletion costs no embedding.

**Order of writes, and crashes.** For each batch: (1) the view's changes are staged, not written
(:meth:`~streamdedup.query.live_view.ViewWriter.stage`); (2) texts never embedded are embedded, in one call, and
their vectors written to the cache at once (one write batch of their own); (3) the sink is written: rows with
vectors, then metadata-only updates, then deletions; (4) semantic neighbours are searched, and the flags handed to
the caller's ``deliver``; (5) the view's changes, the read position and the counters are committed in one RocksDB
write batch. A process killed at any moment restarts from the stored position with the view as it was before the
batch, and applies the batch again: the cache holds every vector the sink received, so nothing is embedded twice
(except a text whose embedding returned in the instant before the process died and before its cache write), and each
sink operation is decided against the row the sink holds, so what the first attempt already wrote is not written
again and what it left undone is done.

The chunks a batch touches are computed from the committed view's mappings and the batch's records, also on a
replay, where the view knows nothing of the interrupted attempt. That is right: the interrupted attempt staged the
same records over the same committed view, so it touched the same chunks, and the sink can differ from the view
only in those. A replay cut into other batches touches, batch after batch, every chunk id named by a committed
mapping or by one of the records, which is the same set.

**Semantic flags** (design §1: semantic duplicates are flagged, never merged). When a text becomes the text of a
live row (a chunk that had no row in the committed view, or a row with another text), the writer searches the sink,
once its rows are written, for the ``semantic_neighbours`` nearest other rows (one search of all the batch's new
rows, :meth:`~streamdedup.index.sink.Sink.search_many`, which finds what a search per row finds: the rows the batch
wrote are among the neighbours, those it deleted are not), and flags each with a cosine of at least
``semantic_threshold`` as a ``review`` record (``streamdedup.review/v1``, reason ``semantic``). The decision reads
the committed view, not the vector cache, so a crash between the search and the commit raises the flag again: flags
are delivered at least once, keyed by their pair. Only the new rows that have some row within a hair of the
threshold are searched in the sink: the writer holds the table's vectors in memory, read from the sink at the first
search and kept in step with its writes (:class:`~streamdedup.index.neighbours.VectorMatrix`); the other rows could
not be flagged, so the flags are those a search of every new row gives. Which pairs are not flagged, and why,
is :mod:`streamdedup.index.semantic`: the engine's own near copies, texts too short to judge, two passages of one
document, pairs a reviewer decided (read from ``audit`` with the rest), and versions of one document, recorded
in ``audit`` as resolved by their lineage instead (:mod:`streamdedup.index.lineage_pairs`).

**Counters** (:class:`IndexCounters`) are committed with the read position, so they survive restarts, and are
computed from the committed view and the records (texts embedded: from the cache writes), so a crash and a replay
leave them as an uninterrupted run would.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from streamdedup.core.lineage import LineageRules
from streamdedup.core.messages import Output
from streamdedup.core.params import EngineParams
from streamdedup.core.records import review_key, review_value
from streamdedup.errors import ConfigurationError, StateError, StateMismatchError
from streamdedup.index.counters import BatchReport, IndexCounters
from streamdedup.index.embeddings import Embedder
from streamdedup.index.lineage_pairs import LineagePairs
from streamdedup.index.neighbours import MAX_ROWS, VectorMatrix
from streamdedup.index.semantic import Screen
from streamdedup.index.sink import Match, Row, Sink, Vectors
from streamdedup.query.live_view import Pending, Record, ViewWriter
from streamdedup.query.outdated import outdated_by
from streamdedup.query.safety_net import ChunkLookup, Hit, Kept, SafetyNet

__all__ = ["BatchReport", "IndexCounters", "IndexWriter"]

logger = logging.getLogger(__name__)

# Extras the writer keeps in its view directory.
_IDENTITY = "index:model"
_COUNTERS = "index:counters"
_EMBEDDED = "index:embedded"
_REUSED = "index:reused"
_VECTOR = "vector:"


class IndexWriter:
    """Keeps ``sink`` and a view in ``directory`` in step with output records (see the module docstring).

    ``params`` are the engine's parameters (shingle size, threshold, minimum shingles) that decide which pairs the
    engine handled itself; the defaults are the engine's. The writer owns the view it opens, not the sink:
    :meth:`close` closes the view. It holds up to ``memory_rows`` of the sink's vectors in memory to search only
    the new rows that can have a semantic neighbour (:mod:`streamdedup.index.neighbours`); past that, or with 0, it
    searches every new row in the sink.
    """

    def __init__(
        self,
        directory: str | Path,
        sink: Sink,
        embedder: Embedder,
        *,
        semantic_threshold: float = 0.92,
        semantic_neighbours: int = 5,
        params: EngineParams | None = None,
        vector_source: Callable[[Sequence[str]], Mapping[str, bytes]] | None = None,
        memory_rows: int = MAX_ROWS,
        lineages: LineageRules | None = None,
    ) -> None:
        if not 0.0 < semantic_threshold <= 1.0:
            raise ConfigurationError(f"semantic_threshold must be in (0, 1], not {semantic_threshold}")
        if semantic_neighbours < 0:
            raise ConfigurationError(
                f"semantic_neighbours must be 0 (no flags) or more, not {semantic_neighbours}"
            )
        if sink.dimensions != embedder.dimensions:
            raise ConfigurationError(
                f"the index holds vectors of {sink.dimensions} dimensions; the model {embedder.model_id!r} "
                f"makes {embedder.dimensions}"
            )
        if sink.model is not None and sink.model != embedder.model_id:
            raise StateMismatchError(
                f"the index holds vectors of the model {sink.model!r}, not {embedder.model_id!r}; "
                "index into an empty index to change models"
            )
        self.sink = sink
        self.embedder = embedder
        self.semantic_threshold = semantic_threshold
        self.semantic_neighbours = semantic_neighbours
        self.params = params or EngineParams()
        self._screen = Screen(self.params)
        #: Where vectors not in this writer's cache are looked up by content hash before the embedder is called
        #: (another table's writer of the same model: :meth:`cached_vectors`).
        self.vector_source = vector_source
        #: The sink's vectors in memory, read from it at the first search (:mod:`streamdedup.index.neighbours`).
        self._matrix: VectorMatrix | None = None
        self._memory_rows = memory_rows
        self._lineages = LineagePairs(lineages) if lineages else None
        self.model = embedder.model_id
        self.dimensions = embedder.dimensions
        self.view = ViewWriter(directory)
        try:
            self._open_state()
        except BaseException:
            self.view.close()
            raise

    def _open_state(self) -> None:
        identity = json.dumps({"model": self.model, "dimensions": self.dimensions}, sort_keys=True).encode()
        stored = self.view.extra(_IDENTITY)
        if stored is None:
            if (
                next(self.view.chunk_ids(), None) is not None
                or next(self.view.source_ids(), None) is not None
            ):
                raise StateError(
                    f"{self.view.directory} holds a view that no index writer keeps; index into an empty directory"
                )
            if self.sink.count():
                raise StateError(
                    "the index already holds rows that this writer's directory did not write; start with an "
                    "empty index, or use the directory that wrote it"
                )
            self.view.put_extras({_IDENTITY: identity})
        elif stored != identity:
            raise StateMismatchError(
                f"the index writer in {self.view.directory} was built for {json.loads(stored)}, not "
                f"{json.loads(identity)}; index into an empty directory to change models"
            )
        embedded, reused = self.view.extra(_EMBEDDED), self.view.extra(_REUSED)
        self._totals = IndexCounters.from_json(
            self.view.extra(_COUNTERS), int(embedded or b"0"), int(reused or b"0")
        )

    def __enter__(self) -> IndexWriter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the view (the sink belongs to the caller)."""
        self.view.close()

    @property
    def totals(self) -> IndexCounters:
        """Return the cumulative counters, as committed."""
        return self._totals

    def progress(self, where: str) -> bytes | None:
        """Return how far the input named ``where`` was applied, as :meth:`apply` recorded it."""
        return self.view.progress(where)

    def apply(
        self,
        records: Sequence[Record],
        progress: Mapping[str, bytes],
        *,
        deliver: Callable[[Sequence[Output]], None] | None = None,
    ) -> BatchReport:
        """Apply ``(topic, key, value JSON or None)`` records to the index and the view; record ``progress``.

        Topics other than ``canonical-chunks`` and ``source-mappings`` are skipped, but for the reviewers' decisions
        in ``audit`` (a pair kept separate or merged is not flagged again). The view, ``progress`` and
        the counters are committed after the sink is written, in one write batch. ``deliver``, if given, gets the
        batch's semantic flags (none, often) and the audit records of pairs a lineage resolved before that commit,
        so a flag is never lost to a crash: if it raises, nothing is committed and the batch, flags included, is
        applied again.
        """
        pending = self.view.stage(records)
        touched = sorted(pending.chunks_touched)
        before = {chunk_id: self._row(self.view, chunk_id) for chunk_id in touched}
        after = {chunk_id: self._row(pending, chunk_id) for chunk_id in touched}
        held = self.sink.rows(touched)

        written = [row for row in after.values() if row is not None and _new_text(before[row.chunk_id], row)]
        upserts = [
            row for row in after.values() if row is not None and _new_text(held.get(row.chunk_id), row)
        ]
        updates = [
            row
            for row in after.values()
            if row is not None and not _new_text(held.get(row.chunk_id), row) and held[row.chunk_id] != row
        ]
        deletes = [chunk_id for chunk_id, row in after.items() if row is None and chunk_id in held]

        vectors, embedded = self._vectors({row.content_hash: row.text for row in [*written, *upserts]})
        try:
            if upserts:
                stacked = np.stack([vectors[row.content_hash] for row in upserts])
                self.sink.upsert(upserts, stacked)
                if self._matrix is not None:
                    self._matrix.put([row.chunk_id for row in upserts], stacked)
            if updates:
                self.sink.update_metadata(updates)
            if deletes:
                self.sink.delete(deletes)
                if self._matrix is not None:
                    self._matrix.remove(deletes)
        except BaseException:
            self._matrix = None  # the sink may hold part of the batch: read it again at the next search
            raise
        found, kept = self._flags(written, vectors, pending, records)
        reviews = [output for output in found if output.topic == "review" and output.value is not None]

        # What the batch changed in the index, by the committed view and the staged one (never by the sink, which
        # may be ahead after a crash): so a replay counts what the interrupted attempt did once.
        changed = deleted = appeared = 0
        for chunk_id, row in after.items():
            old = before[chunk_id]
            if old is None:
                appeared += row is not None
            elif row is None:
                deleted += 1
            elif not _new_text(old, row) and old != row:
                changed += 1
        previous = self._totals
        totals = IndexCounters(
            embedded=self._embedded_total(),
            reused=int(self.view.extra(_REUSED) or b"0"),
            rows_written=previous.rows_written + len(written),
            metadata_updates=previous.metadata_updates + changed,
            rows_deleted=previous.rows_deleted + deleted,
            review_flags=previous.review_flags + len(reviews),
            lineage_resolved=previous.lineage_resolved + sum(output.topic == "audit" for output in found),
            positions=previous.positions
            + _positions(pending, pending.sources_touched)
            - _positions(self.view, pending.sources_touched),
            rows=previous.rows + appeared - deleted,
        )
        if deliver is not None:
            deliver(found)
        self.view.commit(pending, progress, extras={**kept, _COUNTERS: totals.to_json()})
        self._totals = totals
        if embedded or written or deleted or changed or reviews:
            logger.debug(
                "indexed %d records: %d embedded, %d rows written, %d updated, %d deleted, %d flags",
                pending.count,
                embedded,
                len(written),
                changed,
                deleted,
                len(reviews),
            )
        return BatchReport(
            records=pending.count,
            embedded=embedded,
            rows_written=len(written),
            metadata_updates=changed,
            rows_deleted=deleted,
            reviews=tuple(reviews),
            totals=totals,
            resolved=tuple(o for o in found if o.topic != "review"),
        )

    def search(
        self, query_text: str, principals: Iterable[str], k: int = 5, *, current_only: bool = True
    ) -> list[Kept[Match]]:
        """Return the ``k`` chunks nearest to ``query_text`` that a caller holding ``principals`` may read.

        The query is embedded with the writer's embedder (not counted, not cached), the sink searched among the
        rows the caller may read, and the hits passed through :class:`~streamdedup.query.safety_net.SafetyNet` over the
        writer's view: each chunk once, its text the canonical text, cited with every source the caller can read;
        with ``current_only`` (the default), current rows only.
        """
        if isinstance(principals, str):
            raise ConfigurationError(f"principals is a list of principals, not the string {principals!r}")
        caller = list(principals)
        matches = self.sink.search(
            self._embed([query_text])[0], k, principals=caller, current_only=current_only
        )
        net = SafetyNet(self.view, current_only=current_only)
        return net.apply([Hit(m, m.chunk_id, m.score) for m in matches], caller)

    # -- rows -----------------------------------------------------------------------------------------------------

    def _row(self, lookup: ChunkLookup, chunk_id: str) -> Row | None:
        """Return the row a chunk has in the index by what ``lookup`` holds: None if gone or without sources."""
        record = lookup.chunk(chunk_id)
        if record is None:
            return None
        cited = lookup.sources_of(chunk_id)
        if not cited:
            return None
        return Row(
            chunk_id=chunk_id,
            text=str(record["text"]),
            content_hash=str(record["content_hash"]),
            source_ids=tuple(sorted(c.source_id for c in cited)),
            acl=tuple(sorted(str(p) for p in record.get("acl", ()))),
            modified_at=_canonical_modified_at(record, cited),
            model=self.model,
            outdated_by=outdated_by(record),
        )

    # -- vectors --------------------------------------------------------------------------------------------------

    def _embedded_total(self) -> int:
        return int(self.view.extra(_EMBEDDED) or b"0")

    def cached_vectors(self, hashes: Sequence[str]) -> dict[str, bytes]:
        """The vectors this writer's cache holds for ``hashes`` (little-endian float32 bytes), by content hash."""
        raws = self.view.extras([_VECTOR + h for h in hashes])
        return {h: raw for h, raw in zip(hashes, raws, strict=True) if raw is not None}

    def _vectors(self, texts: Mapping[str, str]) -> tuple[dict[str, Vectors], int]:
        """Return the vector of each text (by content hash) and how many had to be embedded.

        Vectors come from the cache; the rest are embedded in one call and cached at once, before anything is
        written to the sink.
        """
        hashes = sorted(texts)
        found: dict[str, Vectors] = {}
        missing: list[str] = []
        for key, raw in zip(hashes, self.view.extras([_VECTOR + h for h in hashes]), strict=True):
            if raw is None:
                missing.append(key)
                continue
            vector = np.frombuffer(raw, dtype="<f4")
            if vector.shape != (self.dimensions,):
                raise StateError(
                    f"the cached vector of {key} has {vector.shape[0]} values, not {self.dimensions}"
                )
            found[key] = vector.astype(np.float32)
        if missing and self.vector_source is not None:
            borrowed = {k: v for k, v in self.vector_source(missing).items() if len(v) == 4 * self.dimensions}
            if borrowed:
                cache = {_VECTOR + key: raw for key, raw in borrowed.items()}
                cache[_REUSED] = str(int(self.view.extra(_REUSED) or b"0") + len(borrowed)).encode()
                self.view.put_extras(cache)
                found.update(
                    (key, np.frombuffer(raw, dtype="<f4").astype(np.float32)) for key, raw in borrowed.items()
                )
                missing = [key for key in missing if key not in borrowed]
        if missing:
            matrix = self._embed([texts[key] for key in missing])
            cache = {_VECTOR + key: matrix[n].astype("<f4").tobytes() for n, key in enumerate(missing)}
            cache[_EMBEDDED] = str(self._embedded_total() + len(missing)).encode()
            self.view.put_extras(cache)
            found.update((key, matrix[n]) for n, key in enumerate(missing))
        return found, len(missing)

    def _embed(self, texts: Sequence[str]) -> Vectors:
        matrix = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        if matrix.shape != (len(texts), self.dimensions):
            raise ConfigurationError(
                f"the model {self.model!r} returned vectors of shape {matrix.shape} for {len(texts)} texts, "
                f"not ({len(texts)}, {self.dimensions})"
            )
        if not np.isfinite(matrix).all():
            raise ConfigurationError(f"the model {self.model!r} returned vectors that are not finite")
        return matrix

    # -- semantic flags -------------------------------------------------------------------------------------------

    def _flags(
        self, written: Sequence[Row], vectors: Mapping[str, Vectors], view: Pending, records: Sequence[Record]
    ) -> tuple[list[Output], dict[str, bytes | None]]:
        """Return the batch's semantic flags, and the pairs lineages resolved: semantic ones, and the engine's
        ``fact_conflict`` flags between versions of one document (their audit and tombstone); and the extras
        that keep the fact flags not decidable yet (:meth:`LineagePairs.facts`)."""
        found = self._semantic(written, vectors, view)
        if self._lineages is None:
            return found, {}
        resolved, extras = self._lineages.facts(
            records, self.view, view.chunks_touched, lambda chunk_id: self._row(view, chunk_id)
        )
        return found + resolved, extras

    def _semantic(self, fresh: Sequence[Row], vectors: Mapping[str, Vectors], view: Pending) -> list[Output]:
        """Flag each newly indexed text's nearest other rows at or above the threshold (see the module docstring).

        A pair a reviewer kept separate or merged is not flagged again; a pair of versions of one lineage is
        returned as its ``audit`` record instead of a flag.
        """
        if not self.semantic_neighbours or not fresh:
            return []
        # One search of the new rows' vectors, after the batch's writes: the same matches as a search per row. The
        # rows without another row near enough to be flagged are left out (streamdedup.index.neighbours).
        queries = np.stack([vectors[row.content_hash] for row in fresh])
        if self._matrix is None:
            self._matrix = VectorMatrix.of_sink(self.sink, max_rows=self._memory_rows)
        near = self._matrix.near(queries, [row.chunk_id for row in fresh], self.semantic_threshold)
        wanted = [n for n, hit in enumerate(near) if hit]
        found: list[list[Match]] = [[] for _ in fresh]
        if wanted:
            searched = self.sink.search_many(queries[wanted], self.semantic_neighbours + 1)
            for n, matches in zip(wanted, searched, strict=True):
                found[n] = matches
        flags: dict[str, Output] = {}
        for row, matches in zip(fresh, found, strict=True):
            others = [m for m in matches if m.chunk_id != row.chunk_id][: self.semantic_neighbours]
            for match in others:
                other = match.row
                key = review_key(row.content_hash, other.content_hash)
                if (
                    match.score < self.semantic_threshold
                    or other.content_hash == row.content_hash
                    or key in flags
                ):
                    continue
                if self._screen.why_not(row, other) or (view.decision(key) or {}).get("decision") in (
                    "keep_separate",
                    "merge",
                ):
                    continue
                versions = (
                    self._lineages.versions(row.source_ids, other.source_ids) if self._lineages else None
                )
                if versions is not None and not versions.review:
                    flags[key] = LineagePairs.audit(key, row.content_hash, other.content_hash, versions)
                    continue
                flags[key] = Output(
                    "review",
                    key,
                    review_value(
                        "semantic",
                        {"content_hash": row.content_hash, "text": row.text, "acl": list(row.acl)},
                        {"content_hash": other.content_hash, "text": other.text, "acl": list(other.acl)},
                        self._screen.jaccard(row, other),
                        f"cosine {match.score:.3f}",
                    ),
                )
        return list(flags.values())


def _new_text(held: Row | None, row: Row) -> bool:
    """Return whether ``row`` needs a vector written: there is no row, or it has another text or model."""
    return held is None or not held.same_vector(row)


def _canonical_modified_at(record: Mapping[str, Any], cited: Sequence[Any]) -> str:
    """Return the ``modified_at`` of the chunk's canonical source, as the chunk record (or the view) has it."""
    canonical = str((record.get("canonical") or {}).get("source_id", ""))
    for entry in record.get("sources", ()):
        if entry.get("source_id") == canonical and entry.get("modified_at"):
            return str(entry["modified_at"])
    for citation in cited:
        if citation.source_id == canonical and citation.modified_at:
            return str(citation.modified_at)
    return ""


def _positions(lookup: Pending | ViewWriter, source_ids: Iterable[str]) -> int:
    """Return how many positions the mappings of ``source_ids`` hold."""
    total = 0
    for source_id in source_ids:
        mapping = lookup.mapping(source_id)
        if mapping is not None:
            total += len(mapping["chunks"])
    return total
