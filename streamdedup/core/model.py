"""Domain values: input events, source attributes, ranks and readers.

These are frozen msgspec structs: typed, slotted, and encodable to JSON or MessagePack without pickle.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

import msgspec

__all__ = [
    "DECISION_KINDS",
    "EVERYONE",
    "LINE_DECISIONS",
    "PAIR_DECISIONS",
    "SOURCE_DECISIONS",
    "AclEvent",
    "DecisionEvent",
    "DeleteEvent",
    "InputEvent",
    "Rank",
    "SourceAttrs",
    "UpsertEvent",
    "covered",
    "decision_route",
    "format_timestamp",
    "parse_timestamp",
    "union_readers",
]

#: The principal that stands for every reader.
EVERYONE = "*"

ContentType = Literal[
    "text/plain",
    "text/markdown",
    "text/html",
    # A document's bytes (``data``) only; the drivers convert them to text before the engine sees them.
    "application/pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
]


class SourceAttrs(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a source contributes to every chunk it contains: who reads it, when and by whom it was written."""

    acl: tuple[str, ...]
    modified_at: int  # microseconds since the Unix epoch, UTC
    authority: int = 0
    uri: str | None = None
    title: str | None = None
    metadata: dict[str, Any] | None = None
    # A reviewer's ``prefer`` decision: the source's copies win the canonical choice in their clusters.
    preferred: bool = False
    # The source belongs to a lineage (docs/lineages.md) whose newest live member is another source, this one:
    # its copies are outdated. Empty: the newest member, or in no lineage.
    outdated_by: str = ""


class UpsertEvent(msgspec.Struct, frozen=True, kw_only=True, tag="upsert", tag_field="op"):
    """A new version of a source document, as text to chunk or as chunks; or as the bytes of a file (``data``),
    which the drivers turn into text (:mod:`streamdedup.convert`) before the engine sees the event."""

    source_id: str
    version: int
    attrs: SourceAttrs
    text: str | None = None
    chunks: tuple[str, ...] | None = None
    data: bytes | None = None
    content_type: ContentType = "text/plain"
    collection: str = "default"
    # The document lineage the source belongs to, named by its connector (docs/lineages.md), and its place there:
    # a version text, or None to order the lineage's members by modified_at. None: the collection's rules decide.
    lineage: str | None = None
    lineage_version: str | None = None


class DeleteEvent(msgspec.Struct, frozen=True, kw_only=True, tag="delete", tag_field="op"):
    """The source is gone; its version becomes a tombstone."""

    source_id: str
    version: int


class AclEvent(msgspec.Struct, frozen=True, kw_only=True, tag="acl", tag_field="op"):
    """The readers of a source changed; its text did not."""

    source_id: str
    version: int
    acl: tuple[str, ...]


#: Decisions about a pair of contents, about a source, and about a line of a collection's boilerplate.
PAIR_DECISIONS = ("keep_separate", "merge", "reopen")
SOURCE_DECISIONS = ("prefer", "unprefer")
LINE_DECISIONS = ("boilerplate_allow", "boilerplate_strip", "boilerplate_auto")
DECISION_KINDS = PAIR_DECISIONS + SOURCE_DECISIONS + LINE_DECISIONS


class DecisionEvent(msgspec.Struct, frozen=True, kw_only=True, tag="decision", tag_field="op"):
    """A reviewer's decision (``streamdedup.decision/v1``), applied by the engine like any other input event.

    A decision is about a *subject*: a pair of contents (``pair``, the two hashes in order), a source
    (``subject_source``) or a line of a collection (``collection``, ``line``). Of the decisions about one subject the
    highest ``version`` is in force; an equal or older one changes nothing. ``source_id`` is the key the event is
    routed by: the source for a source decision, else a key no source can have (it starts with a NUL character).
    """

    source_id: str
    version: int
    kind: str
    by: str
    at: int | None = None  # microseconds since the epoch
    note: str | None = None
    reason: str | None = None  # the flag's reason, for a pair decision that answers a flag
    pair: tuple[str, str] | None = None
    subject_source: str | None = None
    collection: str | None = None
    line: str | None = None

    @property
    def subject(self) -> str:
        """The subject as the ``audit`` record of the decision names it."""
        if self.pair is not None:
            return f"{self.pair[0]}:{self.pair[1]}"
        if self.subject_source is not None:
            return f"source:{self.subject_source}"
        return f"line:{self.collection}:{self.line}"


def decision_route(
    *, pair: tuple[str, str] | None = None, source: str | None = None, collection: str = "", line: str = ""
) -> str:
    """Return the routing key of a decision about a pair, a source, or a collection's line."""
    if pair is not None:
        return f"\x00decision\x00pair\x00{pair[0]}\x00{pair[1]}"
    if source is not None:
        return source
    return f"\x00decision\x00line\x00{collection}\x00{line}"


InputEvent = UpsertEvent | DeleteEvent | AclEvent | DecisionEvent


class Rank(msgspec.Struct, frozen=True, array_like=True):
    """The canonical-policy attributes of a content: those of its best source position.

    ``outdated`` (no source of the content is the newest member of its lineage) comes first: a current copy wins
    over any outdated one. ``preferred`` (a reviewer preferred its best source) comes next, before every criterion
    of the policy.
    """

    authority: int
    modified_at: int
    length: int
    source_id: str
    content_hash: str
    preferred: bool = False
    outdated: bool = False


def union_readers(acls: list[tuple[str, ...]] | tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """Return the sorted union of several ACLs; ``("*",)`` if any of them admits everyone."""
    merged: set[str] = set()
    for acl in acls:
        if EVERYONE in acl:
            return (EVERYONE,)
        merged.update(acl)
    return tuple(sorted(merged))


def covered(readers: tuple[str, ...], by: tuple[str, ...]) -> bool:
    """Return whether every principal in ``readers`` is also in ``by`` (``"*"`` covers everyone)."""
    if EVERYONE in by:
        return True
    if EVERYONE in readers:
        return False
    return set(readers) <= set(by)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@functools.lru_cache(maxsize=65536)
def format_timestamp(micros: int) -> str:
    """Render microseconds since the epoch as an RFC 3339 UTC timestamp (exactly: no float on the way)."""
    moment = _EPOCH + timedelta(microseconds=micros)
    text = f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S}"  # %Y does not pad years before 1000
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    return text + "Z"


_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII)


def parse_timestamp(value: str) -> int:
    """Return an RFC 3339 timestamp as microseconds since the epoch; raise ValueError if it is not one."""
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise ValueError("not an RFC 3339 timestamp with a time zone")
    date, clock, fraction, zone = match.groups()
    fraction = (fraction or ".0")[:7]
    zone = "+00:00" if zone in ("Z", "z") else zone
    moment = datetime.fromisoformat(f"{date}T{clock}{fraction.ljust(7, '0')}{zone}")
    try:
        moment = moment.astimezone(timezone.utc)
    except OverflowError as exc:  # 9999-12-31T23:00:00-02:00 is after the last representable moment
        raise ValueError("out of the range of representable times") from exc
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
