"""Star clustering as a fixpoint over the live contents (design §3).

Contents are taken in canonical-policy order, best first. A content joins the canonical it matches best (highest
verified Jaccard, then best rank) among its *better-ranked* verified neighbours that are themselves canonical and
whose readers cover its own readers; otherwise it is a canonical. Each content's choice depends only on better
ranked contents, so for a given set of live contents there is exactly one outcome, whatever order the messages
arrive in: that is what lets P partitions and any interleaving agree with the embedded run.

Every member is then a verified near copy of its canonical (I1), no near pair crosses a fact conflict (I6, as
conflicting pairs never become neighbours), and every near member's readers are covered by the canonical's (I2).

A reviewer's ``merge`` of a pair makes it a neighbour pair whatever its Jaccard and facts (I1 and I6 allow it for
that pair), and it may merge the other way round: when the better-ranked side's readers do not cover the other's
but the other's cover it, the better-ranked side joins the other (the only way the two can be one chunk under I2).
Readers strictly grow along such a step and never shrink along a join, so choices still depend on each other
without a cycle and the outcome is unique.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import NamedTuple

from streamdedup.core.messages import Info
from streamdedup.core.model import Rank, covered
from streamdedup.core.policy import CanonicalPolicy

__all__ = ["Decision", "decide", "split_reason"]


class Decision(NamedTuple):
    """Where a content belongs, and the better canonicals it was kept from by their readers."""

    role: str  # "canonical" or "member"
    target: str  # the canonical's content hash, for a member
    jaccard: float
    refused: list[str]


def decide(
    rank: Rank,
    readers: tuple[str, ...],
    neighbors: Iterable[tuple[str, float, Info]],
    policy: CanonicalPolicy,
    *,
    first: bool,
    merged: Collection[str] = (),
) -> Decision | None:
    """Return the decision for a content, or None to wait (``first`` decision, a better neighbour undecided).

    ``merged``: the neighbours a reviewer merged this content with (they may be joined the other way round).
    """
    better: list[tuple[str, float, Info]] = []
    reversed_: list[tuple[str, float, Info]] = []
    for h, j, info in neighbors:
        if info.rank is None:
            continue
        if policy.better(info.rank, rank):
            better.append((h, j, info))
        elif h in merged and _joins_the_other_way(readers, info.readers):
            reversed_.append((h, j, info))
    if first and any(info.role == "pending" for _, _, info in better):
        return None
    fits: list[tuple[str, float, Rank]] = []
    refused: list[str] = []
    for h, jaccard, info in better:
        if info.role != "canonical" or info.rank is None:
            continue
        if covered(readers, info.readers):
            fits.append((h, jaccard, info.rank))
        elif not (h in merged and _joins_the_other_way(info.readers, readers)):
            refused.append(h)
    fits.extend((h, j, info.rank) for h, j, info in reversed_ if info.role == "canonical" and info.rank)
    refused.sort()
    if fits:
        target, jaccard, _ = min(fits, key=lambda f: (-f[1], policy.sort_key(f[2])))
        return Decision("member", target, jaccard, refused)
    return Decision("canonical", "", 1.0, refused)


def _joins_the_other_way(readers: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """Whether a content with ``readers`` may join a worse-ranked ``other`` it was merged with by a reviewer."""
    return covered(readers, other) and not covered(other, readers)


def split_reason(rank: Rank, readers: tuple[str, ...], target: Info | None, policy: CanonicalPolicy) -> str:
    """Say why a member left the canonical it was in (``target`` is that canonical's last known state)."""
    if target is None:
        return "canonical deleted"
    if target.role != "canonical":
        return "canonical changed"
    if not covered(readers, target.readers):
        return "acl boundary"
    if target.rank is None or not policy.better(target.rank, rank):
        return "rank changed"
    return "better match"
