"""Which pairs of indexed texts the index writer flags as semantic duplicates, and which it leaves alone.

The writer's search finds, for each new text, the indexed texts whose embeddings are within
``STREAMDEDUP_SEMANTIC_THRESHOLD`` (:mod:`streamdedup.index.writer`). The flag asks a reviewer whether two sources
say one thing in other words. A pair is not asked about when:

- the engine verified it itself: its exact shingle Jaccard (the engine's normalization and shingles) reaches the
  engine's threshold, both texts long enough for near matching; the engine merged it, or flagged it as
  ``fact_conflict`` or ``acl_boundary``;
- either text is too short for the engine's near-copy test (fewer than ``min_shingles`` distinct shingles, the
  same floor): a heading or a one-line code example says too little for its embedding to tell a copy from a
  sibling (``OGRGeometry("POINT (1 2)").x`` and ``.y``, "Django 1.4.6 release notes" and "… 1.6.5 …");
- one document holds both texts (some source is among both rows' sources): it states both on purpose, and
  deduplication is about copies between sources;
- a reviewer kept the pair separate or merged it;
- the texts are versions of one document (:mod:`streamdedup.index.lineage_pairs`): resolved by the lineage, and
  recorded in ``audit`` instead.

>>> from streamdedup.core.params import EngineParams
>>> from streamdedup.core.normalize import content_hash
>>> def row(text, *sources):
...     return Row("c", text, content_hash(text), sources, ("*",), "", "m")
>>> long = "the export job writes every table of the warehouse to parquet files each night at two"
>>> screen = Screen(EngineParams())
>>> screen.why_not(row(long, "a"), row(long.replace("two", "three"), "b"))  # the engine's own near copy
'engine'
>>> screen.why_not(row("Django 1.4.6 release notes", "a"), row("Django 1.6.5 release notes", "b"))
'short'
>>> other = "the import job reads the parquet files of the night back into a fresh copy of the warehouse"
>>> screen.why_not(row(long, "a", "b"), row(other, "b")), screen.why_not(row(long, "a"), row(other, "b"))
('one document', None)
"""

from __future__ import annotations

from streamdedup.core.markup import plain_text
from streamdedup.core.normalize import content_hash, normalize
from streamdedup.core.params import EngineParams
from streamdedup.core.shingles import jaccard_of_sets, shingle_set
from streamdedup.index.sink import Row

__all__ = ["Screen"]

# The content types whose markup the engine strips before hashing, tried in this order to find a text's norm.
_CONTENT_TYPES = ("text/plain", "text/markdown", "text/html")


class Screen:
    """The rules above that depend on the two rows alone (decisions and lineages are the writer's)."""

    def __init__(self, params: EngineParams) -> None:
        self.params = params

    def jaccard(self, a: Row, b: Row) -> float:
        """Return the exact shingle Jaccard of two rows' texts."""
        size = self.params.shingle_size
        return jaccard_of_sets(shingle_set(_norm(a), size), shingle_set(_norm(b), size))

    def why_not(self, a: Row, b: Row) -> str | None:
        """Return why the pair is not flagged (``engine``, ``short``, ``one document``), or None."""
        size = self.params.shingle_size
        mine, theirs = shingle_set(_norm(a), size), shingle_set(_norm(b), size)
        if min(len(mine), len(theirs)) < self.params.min_shingles:
            return "short"
        if jaccard_of_sets(mine, theirs) >= self.params.threshold:
            return "engine"
        if not set(a.source_ids).isdisjoint(b.source_ids):
            return "one document"
        return None


def _norm(row: Row) -> str:
    """Return the normalized text the engine hashed: the plain text of the markup the hash says it had."""
    for content_type in _CONTENT_TYPES:
        plain = row.text if content_type == "text/plain" else plain_text(row.text, content_type)
        if content_hash(plain) == row.content_hash:
            return normalize(plain)
    return normalize(row.text)
