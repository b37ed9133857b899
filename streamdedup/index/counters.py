"""What the index writer counts (:class:`IndexCounters`, kept with its read position) and what one batch did
(:class:`BatchReport`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from streamdedup.core.messages import Output

__all__ = ["BatchReport", "IndexCounters"]


@dataclass(frozen=True, slots=True)
class IndexCounters:
    """What the index writer has done, cumulative, and what the index holds.

    ``embedded`` counts texts sent to the embedder (one per distinct text, ever); ``reused`` texts whose vector
    came from another table's writer by content hash instead (a table of another generation, same model: the
    embedding calls a rebuilt index saved); ``rows_written`` rows written
    with a vector (a chunk indexed, or given another text); ``metadata_updates`` rows whose other fields changed
    in place; ``rows_deleted`` rows deleted; ``review_flags`` semantic flags raised; ``lineage_resolved``
    semantic pairs resolved by a lineage instead (:mod:`.lineage_pairs`). ``positions`` is the number
    of live source positions in the view and ``rows`` the number of rows in the index.

    >>> IndexCounters(positions=15, rows=12).embedding_calls_saved
    3
    """

    embedded: int = 0
    reused: int = 0
    rows_written: int = 0
    metadata_updates: int = 0
    rows_deleted: int = 0
    review_flags: int = 0
    lineage_resolved: int = 0
    positions: int = 0
    rows: int = 0

    @property
    def embedding_calls_saved(self) -> int:
        """Return the embeddings an index of every live source position would hold beyond this one's rows.

        Live source positions minus rows: each row's one vector serves every position mapped to its chunk (exact
        and near copies alike), so every position past the first of each chunk needs no embedding of its own.
        The engine's summary counts the same (``embedding calls saved``).
        """
        return self.positions - self.rows

    def to_json(self) -> bytes:
        """Serialize the counters (``embedded`` and ``reused`` apart: they are stored with the vectors)."""
        data = asdict(self)
        del data["embedded"], data["reused"]
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes | None, embedded: int, reused: int = 0) -> IndexCounters:
        """Read counters written by :meth:`to_json` (zeros for None)."""
        data = {} if raw is None else json.loads(raw)
        known = {f.name for f in fields(cls)} - {"embedded", "reused"}
        return cls(embedded=embedded, reused=reused, **{k: int(v) for k, v in data.items() if k in known})


@dataclass(frozen=True, slots=True)
class BatchReport:
    """What one :meth:`IndexWriter.apply` did, and the counters after it.

    ``records`` counts the compacted records applied; ``embedded`` the texts this call sent to the embedder;
    ``rows_written``, ``metadata_updates`` and ``rows_deleted`` what the batch changed in the index; ``reviews``
    the semantic flags raised, as ``review`` output records; ``resolved`` the ``audit`` records of the semantic
    pairs a lineage resolved instead.
    """

    records: int
    embedded: int
    rows_written: int
    metadata_updates: int
    rows_deleted: int
    reviews: tuple[Output, ...]
    totals: IndexCounters
    resolved: tuple[Output, ...] = ()

    @property
    def review_flags(self) -> int:
        """Return how many semantic flags the batch raised."""
        return len(self.reviews)
