"""Domain values: input events, source attributes, ranks and readers.

These are frozen msgspec structs: typed, slotted, and encodable to JSON or MessagePack without pickle.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

import msgspec

__all__ = [
    "EVERYONE",
    "AclEvent",
    "DeleteEvent",
    "InputEvent",
    "Rank",
    "SourceAttrs",
    "UpsertEvent",
    "covered",
    "format_timestamp",
    "union_readers",
]

#: The principal that stands for every reader.
EVERYONE = "*"

ContentType = Literal["text/plain", "text/markdown", "text/html"]


class SourceAttrs(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a source contributes to every chunk it contains: who reads it, when and by whom it was written."""

    acl: tuple[str, ...]
    modified_at: int  # microseconds since the Unix epoch, UTC
    authority: int = 0
    uri: str | None = None
    title: str | None = None
    metadata: dict[str, Any] | None = None


class UpsertEvent(msgspec.Struct, frozen=True, kw_only=True, tag="upsert", tag_field="op"):
    """A new version of a source document, as text to chunk or as chunks."""

    source_id: str
    version: int
    attrs: SourceAttrs
    text: str | None = None
    chunks: tuple[str, ...] | None = None
    content_type: ContentType = "text/plain"
    collection: str = "default"


class DeleteEvent(msgspec.Struct, frozen=True, kw_only=True, tag="delete", tag_field="op"):
    """The source is gone; its version becomes a tombstone."""

    source_id: str
    version: int


class AclEvent(msgspec.Struct, frozen=True, kw_only=True, tag="acl", tag_field="op"):
    """The readers of a source changed; its text did not."""

    source_id: str
    version: int
    acl: tuple[str, ...]


InputEvent = UpsertEvent | DeleteEvent | AclEvent


class Rank(msgspec.Struct, frozen=True, array_like=True):
    """The canonical-policy attributes of a content: those of its best source position."""

    authority: int
    modified_at: int
    length: int
    source_id: str
    content_hash: str


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
