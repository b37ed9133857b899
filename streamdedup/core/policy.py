"""The canonical policy (design §3): which copy of a passage is the one to embed and cite.

The default order is higher ``authority``, then newer ``modified_at``, then longer normalized text, then lowest
``source_id``; the content hash breaks any remaining tie, so the order is total and every driver agrees.

>>> from streamdedup.core.model import Rank
>>> policy = CanonicalPolicy(("authority", "modified_at", "length", "source_id"))
>>> old = Rank(authority=0, modified_at=1, length=10, source_id="a", content_hash="x")
>>> new = Rank(authority=0, modified_at=2, length=10, source_id="b", content_hash="y")
>>> policy.better(new, old), policy.reason(new, old)
(True, 'newer modified_at')
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from streamdedup.core.model import Rank, SourceAttrs

__all__ = ["CanonicalPolicy", "RefKey"]

_REASONS = {
    "authority": "higher authority",
    "modified_at": "newer modified_at",
    "length": "longer text",
    "source_id": "lower source_id",
}

#: A source position of a content: (source_id, position, attributes).
RefKey = tuple[str, int, SourceAttrs]


class CanonicalPolicy:
    """An ordered list of criteria; :meth:`sort_key` sorts the best first."""

    def __init__(self, criteria: Iterable[str]) -> None:
        self.criteria = tuple(criteria)

    def _component(self, rank: Rank, criterion: str) -> Any:
        if criterion == "authority":
            return -rank.authority
        if criterion == "modified_at":
            return -rank.modified_at
        if criterion == "length":
            return -rank.length
        return rank.source_id

    def sort_key(self, rank: Rank) -> tuple[Any, ...]:
        """Return a key under which the better rank sorts first."""
        return (*(self._component(rank, c) for c in self.criteria), rank.content_hash)

    def better(self, a: Rank, b: Rank) -> bool:
        """Return whether ``a`` wins the canonical choice over ``b``."""
        return self.sort_key(a) < self.sort_key(b)

    def reason(self, winner: Rank, loser: Rank) -> str:
        """Name the first criterion that decides between two ranks."""
        for criterion in self.criteria:
            if self._component(winner, criterion) != self._component(loser, criterion):
                return _REASONS[criterion]
        return "lower content hash"

    def best_ref(self, refs: Iterable[RefKey]) -> tuple[str, int, SourceAttrs]:
        """Return the source position whose attributes the policy prefers (position breaks the last tie)."""

        def key(ref: RefKey) -> tuple[Any, ...]:
            source_id, position, attrs = ref
            rank = Rank(attrs.authority, attrs.modified_at, 0, source_id, "")
            return (*self.sort_key(rank), position)

        return min(refs, key=key)

    def rank(self, content_hash: str, length: int, refs: Iterable[RefKey]) -> Rank:
        """Return the rank of a content from its best source position."""
        source_id, _, attrs = self.best_ref(refs)
        return Rank(attrs.authority, attrs.modified_at, length, source_id, content_hash)
