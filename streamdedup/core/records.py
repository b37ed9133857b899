"""Builders of the output values of the event contract (design §4)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from streamdedup.core.messages import MemberReport, SourceRef
from streamdedup.core.model import SourceAttrs, format_timestamp
from streamdedup.core.state import MappingEntry

__all__ = [
    "CHUNK_SCHEMA",
    "MAPPING_SCHEMA",
    "audit_value",
    "chunk_value",
    "mapping_value",
    "review_key",
    "review_value",
    "source_entry",
]

CHUNK_SCHEMA = "streamdedup.chunk/v1"
MAPPING_SCHEMA = "streamdedup.mapping/v1"
REVIEW_SCHEMA = "streamdedup.review/v1"
AUDIT_SCHEMA = "streamdedup.audit/v1"

JACCARD_DIGITS = 6


def source_entry(source_id: str, position: int, content_hash: str, attrs: SourceAttrs) -> dict[str, Any]:
    """Return one element of a chunk's ``sources`` list."""
    entry: dict[str, Any] = {
        "source_id": source_id,
        "position": position,
        "content_hash": content_hash,
        "acl": sorted(attrs.acl),
        "modified_at": format_timestamp(attrs.modified_at),
        "authority": attrs.authority,
        "uri": attrs.uri,
    }
    if attrs.title is not None:
        entry["title"] = attrs.title
    if attrs.metadata is not None:
        entry["metadata"] = attrs.metadata
    return entry


def chunk_value(
    *,
    content_hash: str,
    text: str,
    canonical: tuple[str, int],
    readers: tuple[str, ...],
    own_refs: Iterable[SourceRef],
    members: dict[str, MemberReport],
) -> dict[str, Any]:
    """Return a ``canonical-chunks`` value, without its ``revision``; the chunk_id is the canonical's hash."""
    member_list: list[dict[str, Any]] = [
        {"content_hash": content_hash, "relation": "canonical", "jaccard": 1.0}
    ]
    sources = [source_entry(r.source_id, r.position, content_hash, r.attrs) for r in own_refs]
    for member_hash in sorted(members):
        report = members[member_hash]
        member_list.append(
            {
                "content_hash": member_hash,
                "relation": "near",
                "jaccard": round(report.jaccard, JACCARD_DIGITS),
            }
        )
        sources.extend(source_entry(r.source_id, r.position, member_hash, r.attrs) for r in report.refs)
    sources.sort(key=lambda s: (s["source_id"], s["position"]))
    return {
        "schema": CHUNK_SCHEMA,
        "chunk_id": content_hash,
        "text": text,
        "content_hash": content_hash,
        "canonical": {"source_id": canonical[0], "position": canonical[1]},
        "acl": list(readers),
        "members": member_list,
        "sources": sources,
    }


def mapping_value(source_id: str, version: int, entries: list[MappingEntry]) -> dict[str, Any]:
    """Return a ``source-mappings`` value."""
    return {
        "schema": MAPPING_SCHEMA,
        "source_id": source_id,
        "version": version,
        "chunks": [
            {
                "position": e.position,
                "content_hash": e.content_hash,
                "chunk_id": e.chunk_id,
                "relation": e.relation,
                "jaccard": round(e.jaccard, JACCARD_DIGITS),
            }
            for e in entries
        ],
    }


def review_value(
    reason: str, a: dict[str, Any], b: dict[str, Any], jaccard: float, detail: str
) -> dict[str, Any]:
    """Return a ``review`` flag value (``a`` is the side with the lower content hash)."""
    if a["content_hash"] > b["content_hash"]:
        a, b = b, a
    return {
        "schema": REVIEW_SCHEMA,
        "reason": reason,
        "a": a,
        "b": b,
        "jaccard": round(jaccard, JACCARD_DIGITS),
        "detail": detail,
    }


def review_key(hash_a: str, hash_b: str) -> str:
    """Return the ``review`` key of a pair: both hashes, lower first."""
    low, high = sorted((hash_a, hash_b))
    return f"{low}:{high}"


def audit_value(chunk_id: str, action: str, reason: str, **detail: Any) -> dict[str, Any]:
    """Return an ``audit`` value."""
    return {"schema": AUDIT_SCHEMA, "chunk_id": chunk_id, "action": action, "reason": reason, **detail}
