"""Lineages in the ``collection`` stage: which live member of a document's lineage is the newest.

A source joins a lineage with each upsert that places it there (:class:`LineageMember` with its order key), and
leaves it when it is deleted, moves to another lineage or belongs to none any more (the same message without an
order key). A lineage is kept with its collection, under :func:`lineage_key`, so one partition elects its newest
member. Messages of a source carry its version: one not newer than the lineage has seen of that source is ignored,
so replays and reordering change nothing (I4); a member that left is kept as a tombstone with its version for that
reason.

After each batch the stage elects, among the live members, the one with the highest order key (then the highest
source id, so the choice is total), and tells every live member whose status changed what it is now
(:class:`LineageStatus`): current (``outdated_by`` empty) or outdated by the newest member. A status names the
member's version it is about, and a source takes only those about the version it joined with; statuses are
numbered per lineage (``seq``), and a source keeps the highest it has heard, so a late one cannot undo a newer one.
Each new version of a member is told its status, even an unchanged one: that version has not heard it. When the
newest member leaves, the one before it is elected and told: the same re-election the canonical policy does for
chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamdedup.core.messages import LineageMember, LineageStatus
from streamdedup.core.state import LineageMemberRecord, LineageRecord
from streamdedup.core.tables import PartitionState, Table

__all__ = ["elect", "lineage_key", "newest"]


def lineage_key(collection: str, lineage: str) -> str:
    """Return the state key of a lineage of a collection (the collection stage's ``v`` keys)."""
    return f"v\x00{collection}\x00{lineage}"


def _comparable(order: Any) -> Any:
    """An order key as tuples throughout: decoded state holds lists, messages in one process tuples."""
    if isinstance(order, (list, tuple)):
        return tuple(_comparable(part) for part in order)
    return order


def newest(members: dict[str, LineageMemberRecord]) -> str | None:
    """Return the live member with the highest order key (then source id), or None when none is live."""
    live = [(_comparable(m.order), source_id) for source_id, m in members.items() if m.order is not None]
    return max(live)[1] if live else None


def elect(messages: Sequence[LineageMember], state: PartitionState) -> list[LineageStatus]:
    """Apply a batch of memberships for one partition; return the statuses of the members whose status changed."""
    lineages = Table(state, LineageRecord)
    changed: dict[str, tuple[str, str]] = {}
    for message in messages:
        key = lineage_key(message.collection, message.lineage)
        record = lineages.get_or_new(key)
        held = record.members.get(message.source_id)
        if held is not None and held.version >= message.version:
            continue  # a replay, or older than what the lineage has seen of this source
        record.members[message.source_id] = LineageMemberRecord(message.version, message.order)
        lineages.mark(key)
        changed[key] = (message.collection, message.lineage)
    out: list[LineageStatus] = []
    for key, (collection, lineage) in changed.items():
        record = lineages.get_or_new(key)
        first = newest(record.members)
        statuses = {
            source_id: (member.version, "" if source_id == first else str(first))
            for source_id, member in record.members.items()
            if member.order is not None
        }
        told = [s for s, status in sorted(statuses.items()) if _told(record.told.get(s)) != status]
        record.told = statuses
        if told:
            record.seq += 1
            out.extend(
                LineageStatus(s, statuses[s][0], collection, lineage, record.seq, statuses[s][1])
                for s in told
            )
    lineages.flush()
    return out


def _told(held: Any) -> tuple[int, str] | None:
    """What a member was told, as a tuple (decoded state holds a list)."""
    return None if held is None else (int(held[0]), str(held[1]))
