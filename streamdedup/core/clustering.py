"""Star clustering as a fixpoint over the live contents (design §3).

Contents are taken in canonical-policy order, best first. A content joins the canonical it matches best (highest
verified Jaccard, then best rank) among its *better-ranked* verified neighbours that are themselves canonical and
whose readers cover its own readers; otherwise it is a canonical. Each content's choice depends only on better
ranked contents, so for a given set of live contents there is exactly one outcome, whatever order the messages
arrive in: that is what lets P partitions and any interleaving agree with the embedded run.

Every member is then a verified near copy of its canonical (I1), no near pair crosses a fact conflict (I6, as
conflicting pairs never become neighbours), and every near member's readers are covered by the canonical's (I2).
"""

from __future__ import annotations

from collections.abc import Iterable
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
) -> Decision | None:
    """Return the decision for a content, or None to wait (``first`` decision, a better neighbour undecided)."""
    better = [
        (h, j, info) for h, j, info in neighbors if info.rank is not None and policy.better(info.rank, rank)
    ]
    if first and any(info.role == "pending" for _, _, info in better):
        return None
    fits: list[tuple[str, float, Rank]] = []
    refused: list[str] = []
    for h, jaccard, info in better:
        if info.role != "canonical" or info.rank is None:
            continue
        if covered(readers, info.readers):
            fits.append((h, jaccard, info.rank))
        else:
            refused.append(h)
    refused.sort()
    if fits:
        target, jaccard, _ = min(fits, key=lambda f: (-f[1], policy.sort_key(f[2])))
        return Decision("member", target, jaccard, refused)
    return Decision("canonical", "", 1.0, refused)


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
