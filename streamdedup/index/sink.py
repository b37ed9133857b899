"""Where an index writer keeps its rows: a vector database behind a small protocol.

A :class:`Sink` holds one row per chunk, keyed by ``chunk_id``: the chunk's text and its embedding, its content
hash, every source that holds it (``source_ids``, complete), its readers (``acl``), the canonical source's
``modified_at``, the id of the embedding model, and whether the chunk is ``current`` (``outdated_by`` naming the
newest version of its document when only outdated versions hold it, docs/lineages.md). It can replace rows
whole (:meth:`Sink.upsert`), change what is not the vector (:meth:`Sink.update_metadata`), delete rows, read them
back, and search by vector (one, or many at once), optionally only among the rows a caller may read: those whose
``acl`` holds ``"*"`` or one of the caller's principals, and only among the current ones.

Every operation is idempotent: applying the same rows, updates or deletions again leaves the same rows, which is
what lets the index writer repeat a batch after a crash. :func:`streamdedup.index.open_sink` opens a sink by URI;
another database is another module implementing the protocol and one more scheme there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Match", "Row", "Sink", "Vectors"]

#: Embeddings, one float32 row per text.
Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Row:
    """One chunk as the index holds it, its vector apart."""

    chunk_id: str
    text: str
    content_hash: str
    #: Every source with a position mapped to the chunk, sorted.
    source_ids: tuple[str, ...]
    #: The chunk's readers, sorted; ``"*"`` is everyone.
    acl: tuple[str, ...]
    #: When the chunk's canonical source was last modified (RFC 3339).
    modified_at: str
    #: The id of the embedding model that made the vector.
    model: str
    #: When only outdated versions of a document hold the chunk (its record says ``"current": false``), the
    #: source id of the newest version of the document; None for a current chunk.
    outdated_by: str | None = None

    @property
    def current(self) -> bool:
        """Return whether the chunk is current: not held by outdated versions of a document only."""
        return self.outdated_by is None

    def same_vector(self, other: Row) -> bool:
        """Return whether ``other`` would have the same vector: same text (content hash) and model."""
        return (self.content_hash, self.model) == (other.content_hash, other.model)


@dataclass(frozen=True, slots=True)
class Match:
    """A row found by a vector search, with its cosine similarity to the query (1 is the same direction)."""

    row: Row
    score: float

    @property
    def chunk_id(self) -> str:
        """Return the chunk id of the row."""
        return self.row.chunk_id


@runtime_checkable
class Sink(Protocol):
    """A vector database table of chunk rows keyed by ``chunk_id``."""

    @property
    def dimensions(self) -> int:
        """Return the length of every vector the sink holds."""
        ...

    @property
    def model(self) -> str | None:
        """Return the embedding model id of the rows held, or None when there are none."""
        ...

    def upsert(self, rows: Sequence[Row], vectors: Vectors) -> None:
        """Insert rows, or replace the rows of the same chunk ids whole; ``vectors`` has one row per row."""
        ...

    def update_metadata(self, rows: Sequence[Row]) -> None:
        """Set what is not the vector (``text``, ``source_ids``, ``acl``, ``modified_at``, ``current``,
        ``outdated_by``) of existing rows; vectors stay as they are.

        A row whose chunk id the sink does not hold is skipped.
        """
        ...

    def delete(self, chunk_ids: Collection[str]) -> None:
        """Delete the rows of ``chunk_ids`` (ids it does not hold are skipped)."""
        ...

    def rows(self, chunk_ids: Iterable[str]) -> dict[str, Row]:
        """Return the rows held for ``chunk_ids``, by chunk id (ids it does not hold are left out)."""
        ...

    def vectors(self, chunk_ids: Iterable[str]) -> dict[str, Vectors]:
        """Return the vectors held for ``chunk_ids``, by chunk id."""
        ...

    def chunk_ids(self) -> list[str]:
        """Return the chunk id of every row, sorted."""
        ...

    def search(
        self,
        vector: Vectors,
        k: int,
        *,
        principals: Collection[str] | None = None,
        current_only: bool = False,
    ) -> list[Match]:
        """Return the ``k`` rows nearest to ``vector`` by cosine, nearest first.

        With ``principals``, only rows whose ``acl`` holds ``"*"`` or one of them are searched (a filter applied
        before the search, so ``k`` readable rows come back when there are that many); with ``current_only``,
        only rows whose ``current`` is true, filtered likewise.
        """
        ...

    def search_many(
        self, vectors: Vectors, k: int, *, principals: Collection[str] | None = None
    ) -> list[list[Match]]:
        """Return, for each row of ``vectors``, what :meth:`search` returns for it, in the order of the rows.

        The same matches, scores and order as one search per vector; a database that can search many vectors at
        once (the index writer searches a batch's new rows so) does it in one request.
        """
        ...

    def count(self) -> int:
        """Return how many rows the sink holds."""
        ...

    def close(self) -> None:
        """Release the database."""
        ...
