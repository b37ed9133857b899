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
from streamdedup.core.params import POLICY_CRITERIA

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
        self._getters = [_GETTERS[c] for c in self.criteria]
        # Sort keys of a source position (the length is the same for every position of a content).
        self._ref_getters = [_REF_GETTERS[c] for c in self.criteria if c != "length"]
        if self.criteria == POLICY_CRITERIA:
            # The default order, spelled out: these keys are computed for every copy of every text.
            self.sort_key = _default_sort_key  # type: ignore[method-assign]
            self.ref_order = _default_ref_order  # type: ignore[method-assign]

    def sort_key(self, rank: Rank) -> tuple[Any, ...]:
        """Return a key under which the better rank sorts first (a current copy before an outdated one, then a
        reviewer's preference, before every criterion)."""
        return (rank.outdated, not rank.preferred, *(get(rank) for get in self._getters), rank.content_hash)

    def better(self, a: Rank, b: Rank) -> bool:
        """Return whether ``a`` wins the canonical choice over ``b``."""
        return self.sort_key(a) < self.sort_key(b)

    def reason(self, winner: Rank, loser: Rank) -> str:
        """Name the first criterion that decides between two ranks."""
        if winner.outdated != loser.outdated:
            return "current version"
        if winner.preferred != loser.preferred:
            return "preferred by a reviewer"
        for criterion in self.criteria:
            get = _GETTERS[criterion]
            if get(winner) != get(loser):
                return _REASONS[criterion]
        return "lower content hash"

    def ref_order(self, source_id: str, position: int, attrs: SourceAttrs) -> tuple[Any, ...]:
        """Return a key under which the best source position sorts first: a current one, then a preferred one, then
        the criteria, then position, then source_id."""
        ref = (source_id, position, attrs)
        return (
            attrs.outdated_by != "",
            not attrs.preferred,
            *(get(ref) for get in self._ref_getters),
            position,
            source_id,
        )

    def best_ref(self, refs: Iterable[RefKey]) -> tuple[str, int, SourceAttrs]:
        """Return the source position whose attributes the policy prefers (position, then source_id, break ties)."""
        return min(refs, key=lambda ref: self.ref_order(*ref))

    def rank(self, content_hash: str, length: int, refs: Iterable[RefKey]) -> Rank:
        """Return the rank of a content from its best source position."""
        return self.rank_of(content_hash, length, self.best_ref(refs))

    @staticmethod
    def rank_of(content_hash: str, length: int, best: RefKey) -> Rank:
        """Return the rank of a content whose best source position is ``best``."""
        source_id, _, attrs = best
        return Rank(
            attrs.authority,
            attrs.modified_at,
            length,
            source_id,
            content_hash,
            attrs.preferred,
            attrs.outdated_by != "",
        )


def _default_sort_key(rank: Rank) -> tuple[Any, ...]:
    return (
        rank.outdated,
        not rank.preferred,
        -rank.authority,
        -rank.modified_at,
        -rank.length,
        rank.source_id,
        rank.content_hash,
    )


def _default_ref_order(source_id: str, position: int, attrs: SourceAttrs) -> tuple[Any, ...]:
    return (
        attrs.outdated_by != "",
        not attrs.preferred,
        -attrs.authority,
        -attrs.modified_at,
        source_id,
        position,
        source_id,
    )


_GETTERS: dict[str, Any] = {
    "authority": lambda r: -r.authority,
    "modified_at": lambda r: -r.modified_at,
    "length": lambda r: -r.length,
    "source_id": lambda r: r.source_id,
}
_REF_GETTERS: dict[str, Any] = {
    "authority": lambda ref: -ref[2].authority,
    "modified_at": lambda ref: -ref[2].modified_at,
    "source_id": lambda ref: ref[0],
}
