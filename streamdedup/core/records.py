"""Builders of the output values of the event contract (design §4)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from streamdedup.core.messages import MemberReport, SourceRef
from streamdedup.core.model import DecisionEvent, SourceAttrs, format_timestamp
from streamdedup.core.policy import CanonicalPolicy
from streamdedup.core.state import MappingEntry, TopRef

__all__ = [
    "CHUNK_SCHEMA",
    "DECISION_SCHEMA",
    "MAPPING_SCHEMA",
    "MappedAttrs",
    "audit_value",
    "chunk_value",
    "decision_audit_value",
    "decision_value",
    "mapped_attrs",
    "mapping_of_rows",
    "mapping_row",
    "mapping_value",
    "review_key",
    "review_value",
    "source_entry",
]

CHUNK_SCHEMA = "streamdedup.chunk/v2"
MAPPING_SCHEMA = "streamdedup.mapping/v2"
REVIEW_SCHEMA = "streamdedup.review/v1"
AUDIT_SCHEMA = "streamdedup.audit/v1"
DECISION_SCHEMA = "streamdedup.decision/v1"

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
    own_refs: Iterable[SourceRef | TopRef],
    own_count: int,
    members: dict[str, MemberReport],
    policy: CanonicalPolicy,
    max_sources: int,
) -> dict[str, Any]:
    """Return a ``canonical-chunks`` value (v2), without its ``revision``; the chunk_id is the canonical's hash.

    ``own_refs`` and each member's ``refs`` must hold at least their first ``max_sources`` positions, sorted in the
    policy's order (more are fine). The record lists the canonical and the first ``max_sources - 1`` members, the
    first ``max_sources`` positions of the contents it lists, and the full counts.
    """
    # The members listed are the canonical and the first others in the policy's order; the sources listed are the
    # first positions of those in the policy's order, so that every listed source's text is a listed member.
    listed = sorted(members, key=lambda h: (_member_order(policy, members[h]), h))[: max_sources - 1]
    member_list: list[dict[str, Any]] = [
        {"content_hash": content_hash, "relation": "canonical", "jaccard": 1.0}
    ]
    member_list.extend(
        {"content_hash": h, "relation": "near", "jaccard": round(members[h].jaccard, JACCARD_DIGITS)}
        for h in listed
    )
    candidates = [(r, content_hash) for r in own_refs]
    if listed:
        candidates.extend((r, h) for h in listed for r in members[h].refs)
        candidates.sort(key=lambda c: policy.ref_order(c[0].source_id, c[0].position, c[0].attrs))
    sources = [source_entry(r.source_id, r.position, h, r.attrs) for r, h in candidates[:max_sources]]
    value = {
        "schema": CHUNK_SCHEMA,
        "chunk_id": content_hash,
        "text": text,
        "content_hash": content_hash,
        "canonical": {"source_id": canonical[0], "position": canonical[1]},
        "acl": list(readers),
        "members": member_list,
        "member_count": 1 + len(members),
        "sources": sources,
        "source_count": own_count + sum(report.count for report in members.values()),
    }
    # Current unless no source of the cluster is the newest member of its lineage: the policy ranks a current
    # position first, so the canonical's best position is outdated only then, and names the newest member.
    outdated_by = candidates[0][0].attrs.outdated_by if candidates else ""
    if outdated_by:
        value["current"] = False
        value["outdated_by"] = outdated_by
    return value


def _member_order(policy: CanonicalPolicy, report: MemberReport) -> tuple[Any, ...]:
    return () if report.rank is None else policy.sort_key(report.rank)


class MappedAttrs(NamedTuple):
    """What a ``source-mappings`` value says of its source besides its positions, as a chunk record's ``sources``
    entries write it: its readers (sorted), ``modified_at`` (RFC 3339), ``uri`` (None is written as null) and
    ``title`` (None is left out)."""

    acl: tuple[str, ...]
    modified_at: str
    uri: str | None = None
    title: str | None = None


def mapped_attrs(attrs: SourceAttrs) -> MappedAttrs:
    """Return what a source's mapping says of it, from its attributes."""
    return MappedAttrs(tuple(sorted(attrs.acl)), format_timestamp(attrs.modified_at), attrs.uri, attrs.title)


def mapping_value(
    source_id: str, version: int, attrs: MappedAttrs, entries: list[MappingEntry]
) -> dict[str, Any]:
    """Return a ``source-mappings`` value."""
    return mapping_of_rows(source_id, version, attrs, [mapping_row(e) for e in entries])


def mapping_row(entry: MappingEntry) -> dict[str, Any]:
    """Return one position's row of a ``source-mappings`` value."""
    return {
        "position": entry.position,
        "content_hash": entry.content_hash,
        "chunk_id": entry.chunk_id,
        "relation": entry.relation,
        "jaccard": round(entry.jaccard, JACCARD_DIGITS),
    }


def mapping_of_rows(
    source_id: str, version: int, attrs: MappedAttrs, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """Return a ``source-mappings`` value (v2) from its source's attributes and its rows (:func:`mapping_row` of
    each position, in order)."""
    value: dict[str, Any] = {
        "schema": MAPPING_SCHEMA,
        "source_id": source_id,
        "version": version,
        "acl": list(attrs.acl),
        "modified_at": attrs.modified_at,
        "uri": attrs.uri,
    }
    if attrs.title is not None:
        value["title"] = attrs.title
    value["chunks"] = rows
    return value


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


def audit_value(chunk_id: str | None, action: str, reason: str, **detail: Any) -> dict[str, Any]:
    """Return an ``audit`` value."""
    return {"schema": AUDIT_SCHEMA, "chunk_id": chunk_id, "action": action, "reason": reason, **detail}


def decision_value(event: DecisionEvent) -> dict[str, Any]:
    """Return a decision as contract JSON (``streamdedup.decision/v1``; the inverse of decoding it)."""
    data: dict[str, Any] = {"schema": DECISION_SCHEMA, "decision": event.kind, "version": event.version}
    if event.pair is not None:
        data["pair"] = list(event.pair)
    elif event.subject_source is not None:
        data["source_id"] = event.subject_source
    else:
        data.update(collection=event.collection, line=event.line)
    data["by"] = event.by
    if event.at is not None:
        data["at"] = format_timestamp(event.at)
    for name in ("note", "reason"):
        if getattr(event, name) is not None:
            data[name] = getattr(event, name)
    return data


def decision_audit_value(event: DecisionEvent) -> dict[str, Any]:
    """Return the ``audit`` value of an applied decision: what was decided, about what, and who decided it."""
    return {
        "schema": AUDIT_SCHEMA,
        "chunk_id": None,
        "action": "decision",
        "reason": event.kind,
        "subject": event.subject,
        "by": event.by,
        "decision": decision_value(event),
    }
