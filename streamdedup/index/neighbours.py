"""The index's vectors in memory, to tell which new rows can have a semantic neighbour at all.

The index writer flags a new row's nearest other rows whose cosine reaches the semantic threshold, and most new
rows have none: on two releases of the Django documentation, about one in five has one. The database's exact
search scans the whole table for every new row, so over a build its cost grows with the square of the rows (a
tenth of the writer's time at 5,700 rows, against the model's nine tenths). :class:`VectorMatrix` holds the
table's vectors, normalized, in one float32 matrix, and answers in one matrix product per block of rows whether a
query has any row other than its own within ``at_least`` of cosine. The writer asks the database only about the
rows that do, with a margin (:data:`MARGIN`) far wider than the rounding of a float32 cosine, so the database
returns for them exactly what it returned before, and for the others it would have returned no row at or above
the threshold: the flags are the same.

It costs 4 bytes per dimension per row (1.5 KB a row for 384 dimensions). Past ``max_rows`` rows it stops
holding them (:attr:`VectorMatrix.full`), and the writer asks the database about every new row, as without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from streamdedup.index.sink import Sink, Vectors

__all__ = ["MARGIN", "MAX_ROWS", "VectorMatrix"]

#: How far below the threshold a cosine still makes a row a candidate: float32 cosines of unit vectors are off by
#: a few units in the 7th decimal place, so a row this far below cannot reach the threshold in the database.
MARGIN = 1e-3
#: Rows held at most by default (1.5 GB of vectors of 384 dimensions).
MAX_ROWS = 1_000_000
# Rows multiplied at a time, so that a product of many queries stays a few megabytes.
_BLOCK = 8192


class VectorMatrix:
    """Normalized vectors by chunk id, in one growing matrix (see the module docstring)."""

    def __init__(self, dimensions: int, *, max_rows: int = MAX_ROWS) -> None:
        self.dimensions = dimensions
        self.max_rows = max_rows
        self._ids: list[str] = []
        self._where: dict[str, int] = {}
        self._matrix = np.zeros((0, dimensions), dtype=np.float32)
        #: Rows whose vector has no direction (zero, or not finite): any query may be near them.
        self._degenerate: set[str] = set()
        #: Past ``max_rows``: nothing is held, and every query is a candidate.
        self.full = False

    @classmethod
    def of_sink(cls, sink: Sink, *, max_rows: int = MAX_ROWS) -> VectorMatrix:
        """Return the matrix of every vector ``sink`` holds."""
        found = cls(sink.dimensions, max_rows=max_rows)
        ids = sink.chunk_ids()
        if len(ids) > max_rows:
            found.full = True
            return found
        for start in range(0, len(ids), _BLOCK):
            group = ids[start : start + _BLOCK]
            vectors = sink.vectors(group)
            held = [chunk_id for chunk_id in group if chunk_id in vectors]
            if held:
                found.put(held, np.stack([vectors[chunk_id] for chunk_id in held]))
        return found

    def __len__(self) -> int:
        return len(self._ids)

    def put(self, chunk_ids: Sequence[str], vectors: Vectors) -> None:
        """Hold ``vectors`` (one row per id) for ``chunk_ids``, replacing what an id held (the last of an id wins)."""
        if self.full:
            return
        matrix = np.asarray(vectors, dtype=np.float32).reshape(len(chunk_ids), self.dimensions)
        norms = np.linalg.norm(matrix, axis=1)
        usable = np.isfinite(norms) & (norms > 0)
        unit = np.where(usable[:, None], matrix / np.where(usable, norms, 1.0)[:, None], 0.0)
        new = len({chunk_id for chunk_id in chunk_ids if chunk_id not in self._where})
        if len(self._ids) + new > self.max_rows:
            self._drop()
            return
        self._reserve(len(self._ids) + new)
        for n, chunk_id in enumerate(chunk_ids):
            at = self._where.get(chunk_id)
            if at is None:
                at = self._where[chunk_id] = len(self._ids)
                self._ids.append(chunk_id)
            self._matrix[at] = unit[n]
            if usable[n]:
                self._degenerate.discard(chunk_id)
            else:
                self._degenerate.add(chunk_id)

    def remove(self, chunk_ids: Iterable[str]) -> None:
        """Forget the vectors of ``chunk_ids`` (ids not held are skipped): the last row takes each one's place."""
        for chunk_id in chunk_ids:
            at = self._where.pop(chunk_id, None)
            if at is None:
                continue
            self._degenerate.discard(chunk_id)
            last = len(self._ids) - 1
            if at != last:
                moved = self._ids[last]
                self._ids[at] = moved
                self._where[moved] = at
                self._matrix[at] = self._matrix[last]
            self._ids.pop()

    def near(self, queries: Vectors, own: Sequence[str], at_least: float) -> list[bool]:
        """Return, for each query, whether a row other than ``own[n]`` may have a cosine of ``at_least`` with it
        (any row within :data:`MARGIN` below it, or one without a direction; every query once :attr:`full`)."""
        queries = np.asarray(queries, dtype=np.float32).reshape(len(own), self.dimensions)
        if self.full or self._degenerate:
            return [True] * len(own)
        norms = np.linalg.norm(queries, axis=1)
        usable = np.isfinite(norms) & (norms > 0)
        unit = np.where(usable[:, None], queries / np.where(usable, norms, 1.0)[:, None], 0.0)
        found = ~usable
        size = len(self._ids)
        floor = at_least - MARGIN
        mine = [self._where.get(chunk_id, -1) for chunk_id in own]
        for start in range(0, size, _BLOCK):
            end = min(start + _BLOCK, size)
            scores = unit @ self._matrix[start:end].T
            for n, at in enumerate(mine):
                if start <= at < end:
                    scores[n, at - start] = -np.inf
            found |= (scores >= floor).any(axis=1)
        return [bool(hit) for hit in found]

    def _reserve(self, rows: int) -> None:
        if rows > len(self._matrix):
            grown = np.zeros((max(rows, 2 * len(self._matrix), 1024), self.dimensions), dtype=np.float32)
            grown[: len(self._ids)] = self._matrix[: len(self._ids)]
            self._matrix = grown

    def _drop(self) -> None:
        self.full = True
        self._ids, self._where, self._degenerate = [], {}, set()
        self._matrix = np.zeros((0, self.dimensions), dtype=np.float32)
