"""The content stage's working set for one batch: what the batch did to each content, settled once at its end."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from streamdedup.core.facts import fact_tokens
from streamdedup.core.messages import Info, MemberReport, PairMark, VerifyRequest
from streamdedup.core.shingles import shingle_set
from streamdedup.core.state import Conflict, ContentRecord, RefEntry
from streamdedup.core.tables import PartitionState, Table

__all__ = ["Answer", "Features", "LateEdge", "Work"]


class Answer(msgspec.Struct, frozen=True):
    """A verify request this content owes an answer to.

    ``conflict`` is the sender as a :class:`Conflict` when the pair is above the threshold but states other facts.
    """

    sender: str
    epoch: int
    jaccard: float
    edge: bool
    conflict: Conflict | None = None
    decision: PairMark | None = None  # the reviewer's decision about the pair the answer was computed under


class LateEdge(msgspec.Struct, frozen=True):
    """A verified edge that arrived while this content was not alive (adopted if it comes back in the batch)."""

    jaccard: float
    info: Info
    report: MemberReport | None = None


@dataclass(slots=True)
class Work:
    """What one batch did to one content."""

    key: str
    record: ContentRecord
    was_role: str
    was_target: str
    was_ref: tuple[str, int] | None
    refs: Table[RefEntry]
    state: PartitionState
    born: bool = False
    refill: bool = False  # the first positions (record.top) must be read again from the content's refs
    answer_sources: set[str] = field(default_factory=set)  # sources whose update this content answers
    to_verify: list[str] = field(default_factory=list)
    # Contents (whole hashes) to verify the pair with because of a reviewer's decision about it.
    decided_verify: list[str] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    # Verify requests that arrived while the content was not alive: answered at settle, as what it is by then.
    asked_while_dead: list[VerifyRequest] = field(default_factory=list)
    # Better-ranked texts above the threshold that state other facts, met in this batch: this content flags.
    conflicts: list[Conflict] = field(default_factory=list)
    new_neighbors: set[str] = field(default_factory=set)
    # Contents that hold this one as a neighbour although it does not hold them (yet): told at settle, either
    # adopted as neighbours (edge known, content alive), re-verified (edge unknown) or told it is dead.
    late_edges: dict[str, LateEdge] = field(default_factory=dict)
    strangers: set[str] = field(default_factory=set)


class Features:
    """Shingle sets and fact tokens of the texts one batch meets, each computed once, and only when needed.

    A new text asks many others to verify it, and they may share a partition: its shingles are computed once. Fact
    tokens matter only for a pair above the threshold, which most candidates are not.
    """

    def __init__(self, shingle_size: int) -> None:
        self._size = shingle_size
        self._shingles: dict[str, frozenset[str]] = {}
        self._facts: dict[str, tuple[str, ...]] = {}

    def shingles(self, norm: str) -> frozenset[str]:
        """Return the shingle set of a normalized text."""
        found = self._shingles.get(norm)
        if found is None:
            found = self._shingles[norm] = shingle_set(norm, self._size)
        return found

    def facts(self, norm: str) -> tuple[str, ...]:
        """Return the fact tokens of a normalized text."""
        found = self._facts.get(norm)
        if found is None:
            found = self._facts[norm] = tuple(fact_tokens(norm))
        return found

    def clear(self) -> None:
        """Forget the batch's texts."""
        self._shingles.clear()
        self._facts.clear()
