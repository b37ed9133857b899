"""Checks of invariants I1, I2, I3 and I6 (design §5) on a materialized view against the live sources, and of the
lineage rule (docs/lineages.md): a chunk is current exactly when a newest live member of a lineage holds it.

A mapping (``mapping/v2``) also says who reads its source and how to cite it: its ``acl`` must be the source's
readers (I2: the query side filters citations by it) and its ``uri``, ``title`` and ``modified_at`` the source's
(I1), as the source's latest applied event set them.

I4 and I5 compare views with each other (replaying events, re-running input) and are checked by the tests that
produce the views. Each check returns a list of readable violations; an empty list means the view is sound.

Reviewers' decisions amend I1 and I6 for one pair each: a ``near`` relation between two texts that a ``merge``
decision in force names may be below the threshold (a ``semantic`` pair) or state different facts (a
``fact_conflict`` pair); no decision ever excuses I2 or I3.
"""

from __future__ import annotations

from typing import Any

from streamdedup.core.facts import fact_conflict
from streamdedup.core.model import EVERYONE, covered, parse_timestamp, union_readers
from streamdedup.core.output_view import View
from streamdedup.core.shingles import jaccard
from streamdedup.testing.reference import LiveSource

__all__ = ["check_invariants"]


def check_invariants(
    view: View,
    sources: dict[str, LiveSource],
    *,
    threshold: float,
    shingle_size: int,
    decisions: dict[tuple[str, str], str] | None = None,
) -> list[str]:
    """Return every violation of I1, I2, I3 and I6 in ``view``, given the live ``sources``.

    ``decisions``: the reviewers' decisions in force about pairs (lower hash first), as
    :func:`~streamdedup.testing.reference.decisions_in_force` returns them.
    """
    merged = {pair for pair, kind in (decisions or {}).items() if kind == "merge"}

    def excused(a: str, b: str) -> bool:
        return (min(a, b), max(a, b)) in merged

    # Every live position: (source_id, position) -> (content hash, normalized text, source).
    positions: dict[tuple[str, int], tuple[str, str, LiveSource]] = {}
    by_hash: dict[str, list[tuple[str, int]]] = {}
    for source in sources.values():
        for position, (norm, content_hash) in enumerate(zip(source.norms, source.hashes, strict=True)):
            positions[(source.source_id, position)] = (content_hash, norm, source)
            by_hash.setdefault(content_hash, []).append((source.source_id, position))
    norm_of = {h: positions[refs[0]][1] for h, refs in by_hash.items()}

    def readers_of(content_hash: str) -> tuple[str, ...]:
        return union_readers([positions[ref][2].attrs.acl for ref in by_hash.get(content_hash, [])])

    problems = _check_mappings(view, sources, positions, norm_of, threshold, shingle_size, excused)

    # The complete map of each chunk is what the mappings say: the chunk's counts must agree with it.
    mapped: dict[str, list[tuple[str, int, str]]] = {}
    for source_id, mapping in view.mappings.items():
        for entry in mapping["chunks"]:
            mapped.setdefault(entry["chunk_id"], []).append(
                (source_id, entry["position"], entry["content_hash"])
            )
    for chunk_id, chunk in view.chunks.items():
        problems.extend(
            _check_chunk(
                chunk_id, chunk, positions, by_hash, norm_of, readers_of, threshold, shingle_size, excused
            )
        )
        problems.extend(_check_counts(chunk_id, chunk, mapped.get(chunk_id, [])))
        problems.extend(_check_current(chunk_id, chunk, sources, mapped.get(chunk_id, [])))
    return problems


def _check_current(
    chunk_id: str, chunk: dict[str, Any], sources: dict[str, LiveSource], refs: list[tuple[str, int, str]]
) -> list[str]:
    """The lineage rule: a chunk is current exactly when a source that is the newest live member of its lineage
    (or in no lineage) holds it; an outdated one names the newest member of a lineage of a source that holds it."""
    where = f"chunk {chunk_id[:12]}"
    holders = [sources[s] for s, _, _ in refs if s in sources]
    current = any(not source.attrs.outdated_by for source in holders)
    if chunk.get("current", True) != current:
        said = "current" if chunk.get("current", True) else "outdated"
        return [f"lineages: {where} says it is {said}, but it is not ({len(holders)} holders)"]
    if not current and chunk.get("outdated_by") not in {source.attrs.outdated_by for source in holders}:
        return [
            f"lineages: {where} is outdated by {chunk.get('outdated_by')!r}, the newest of no holder's lineage"
        ]
    return []


def _check_mappings(
    view: View,
    sources: dict[str, LiveSource],
    positions: dict[tuple[str, int], tuple[str, str, LiveSource]],
    norm_of: dict[str, str],
    threshold: float,
    shingle_size: int,
    excused: Any,
) -> list[str]:
    """I3: no mapping for a source that is not live; I1: every live source mapped, at its version, every position."""
    problems: list[str] = []
    for source_id in view.mappings:
        if source_id not in sources:
            problems.append(f"I3: mapping for deleted or unknown source {source_id}")
    for source in sources.values():
        mapping = view.mappings.get(source.source_id)
        if mapping is None:
            problems.append(f"I1: live source {source.source_id} has no mapping")
            continue
        if mapping["version"] != source.version:
            problems.append(
                f"I1: mapping of {source.source_id} is at version {mapping['version']}, not {source.version}"
            )
        problems.extend(_check_attributes(mapping, source))
        entries = mapping["chunks"]
        if [e["position"] for e in entries] != list(range(len(source.texts))):
            problems.append(
                f"I1: mapping of {source.source_id} does not list positions 0..{len(source.texts) - 1}"
            )
            continue
        for entry in entries:
            problems.extend(
                _check_position(view, source, entry, positions, norm_of, threshold, shingle_size, excused)
            )
    return problems


def _check_attributes(mapping: dict[str, Any], source: LiveSource) -> list[str]:
    """I2 and I1: a mapping's readers, address, title and time are those of the source's latest applied event.

    As in a chunk record's ``sources``: the ``uri`` is null when the source has none, the ``title`` left out.
    """
    where = f"mapping of {source.source_id}"
    attrs = source.attrs
    problems = []
    if mapping.get("acl") != sorted(attrs.acl):
        problems.append(f"I2: {where} has readers {mapping.get('acl')}, the source {sorted(attrs.acl)}")
    if _micros(mapping.get("modified_at")) != attrs.modified_at:
        problems.append(f"I1: {where} has modified_at {mapping.get('modified_at')!r}, not the source's")
    if ("uri" in mapping, mapping.get("uri")) != (True, attrs.uri):
        problems.append(f"I1: {where} has uri {mapping.get('uri')!r}, the source {attrs.uri!r}")
    if ("title" in mapping, mapping.get("title")) != (attrs.title is not None, attrs.title):
        problems.append(f"I1: {where} has title {mapping.get('title')!r}, the source {attrs.title!r}")
    return problems


def _micros(value: Any) -> int | None:
    try:
        return parse_timestamp(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _check_counts(chunk_id: str, chunk: dict[str, Any], refs: list[tuple[str, int, str]]) -> list[str]:
    """A chunk's counts against the positions the mappings give it (``refs``: source, position, content hash)."""
    problems = []
    if chunk["source_count"] != len(refs):
        problems.append(
            f"chunk {chunk_id[:12]}: source_count {chunk['source_count']}, but {len(refs)} mapped positions"
        )
    if chunk["member_count"] != len({h for _, _, h in refs} | {chunk["content_hash"]}):
        problems.append(
            f"chunk {chunk_id[:12]}: member_count {chunk['member_count']} disagrees with the mappings"
        )
    if (
        not len(chunk["sources"]) <= chunk["source_count"]
        or not len(chunk["members"]) <= chunk["member_count"]
    ):
        problems.append(f"chunk {chunk_id[:12]}: lists more sources or members than it counts")
    return problems


def _check_position(
    view: View,
    source: LiveSource,
    entry: dict[str, Any],
    positions: dict[tuple[str, int], tuple[str, str, LiveSource]],
    norm_of: dict[str, str],
    threshold: float,
    shingle_size: int,
    excused: Any,
) -> list[str]:
    where = f"{source.source_id}:{entry['position']}"
    content_hash, norm, _ = positions[(source.source_id, entry["position"])]
    if entry["content_hash"] != content_hash:
        return [f"I1: {where} maps content {entry['content_hash'][:12]}, holds {content_hash[:12]}"]
    chunk = view.chunks.get(entry["chunk_id"])
    if chunk is None:
        return [f"I1: {where} points at chunk {entry['chunk_id'][:12]}, which is not live"]
    problems = []
    complete = chunk["source_count"] == len(chunk["sources"])  # chunk/v2 lists the first sources only
    if complete and not any(
        s["source_id"] == source.source_id and s["position"] == entry["position"] for s in chunk["sources"]
    ):
        problems.append(f"I1: {where} is missing from the sources of its chunk {entry['chunk_id'][:12]}")
    canonical_hash = chunk["content_hash"]
    relation = entry["relation"]
    if relation in ("canonical", "exact"):
        if content_hash != canonical_hash:
            problems.append(f"I1: {where} is '{relation}' but its text differs from the canonical's")
        is_canonical = (chunk["canonical"]["source_id"], chunk["canonical"]["position"]) == (
            source.source_id,
            entry["position"],
        )
        if (relation == "canonical") != is_canonical:
            problems.append(f"I1: {where} is '{relation}' but the chunk's canonical is {chunk['canonical']}")
    elif relation == "near":
        canonical_norm = norm_of.get(canonical_hash)
        if canonical_norm is None:
            problems.append(f"I3: chunk {canonical_hash[:12]} has no live canonical text")
        elif not excused(content_hash, canonical_hash):
            similarity = jaccard(norm, canonical_norm, shingle_size)
            if similarity < threshold:
                problems.append(f"I1: {where} is 'near' with Jaccard {similarity:.3f} below {threshold}")
            if fact_conflict(norm, canonical_norm):
                problems.append(f"I6: {where} is 'near' a canonical that states different facts")
    else:
        problems.append(f"I1: {where} has unknown relation {relation!r}")
    return problems


def _check_chunk(
    chunk_id: str,
    chunk: dict[str, Any],
    positions: dict[tuple[str, int], tuple[str, str, LiveSource]],
    by_hash: dict[str, list[tuple[str, int]]],
    norm_of: dict[str, str],
    readers_of: Any,
    threshold: float,
    shingle_size: int,
    excused: Any,
) -> list[str]:
    where = f"chunk {chunk_id[:12]}"
    problems = []
    canonical_hash = chunk["content_hash"]
    canonical_ref = (chunk["canonical"]["source_id"], chunk["canonical"]["position"])
    if positions.get(canonical_ref, ("",))[0] != canonical_hash:
        problems.append(
            f"I3: {where}: canonical position {canonical_ref} is not live with the canonical text"
        )
    # I2: every principal in the ACL reads a live source holding exactly the canonical's text.
    exact_readers = readers_of(canonical_hash)
    acl = tuple(chunk["acl"])
    if EVERYONE in acl and exact_readers != (EVERYONE,):
        problems.append(f"I2: {where} is open to everyone, but no live exact copy is")
    elif not covered(acl, exact_readers):
        problems.append(f"I2: {where} grants {sorted(set(acl) - set(exact_readers))} beyond its exact copies")
    members = {m["content_hash"]: m for m in chunk["members"]}
    live_members = [h for h in members if h in by_hash]
    if not live_members:
        problems.append(f"I3: {where} has no live member")
    problems.extend(
        _check_members(
            where, members, canonical_hash, acl, norm_of, readers_of, threshold, shingle_size, excused
        )
    )
    # I3: the sources list holds exactly the live positions of its members.
    listed = {(s["source_id"], s["position"]): s["content_hash"] for s in chunk["sources"]}
    for ref, content_hash in listed.items():
        if positions.get(ref, ("",))[0] != content_hash:
            problems.append(f"I3: {where} lists source position {ref} that is not live with that text")
        if content_hash not in members:
            problems.append(f"I3: {where} lists source position {ref} of a content that is not a member")
    complete = chunk["source_count"] == len(chunk["sources"]) and chunk["member_count"] == len(members)
    for member_hash in live_members if complete else ():
        for ref in by_hash[member_hash]:
            if ref not in listed:
                problems.append(f"I3: {where} omits live source position {ref} of member {member_hash[:12]}")
    return problems


def _check_members(
    where: str,
    members: dict[str, dict[str, Any]],
    canonical_hash: str,
    acl: tuple[str, ...],
    norm_of: dict[str, str],
    readers_of: Any,
    threshold: float,
    shingle_size: int,
    excused: Any,
) -> list[str]:
    """The problems of a chunk's near members: each live, its readers covered, near its canonical (I1, I2, I3, I6)."""
    problems = []
    for member_hash, member in members.items():
        if member["relation"] == "canonical":
            continue
        if member_hash not in norm_of:
            problems.append(f"I3: {where} lists member {member_hash[:12]} that no live source holds")
            continue
        if not covered(readers_of(member_hash), acl):
            problems.append(
                f"I2: {where} merges near member {member_hash[:12]} whose readers it does not cover"
            )
        if canonical_hash in norm_of and not excused(member_hash, canonical_hash):
            if jaccard(norm_of[member_hash], norm_of[canonical_hash], shingle_size) < threshold:
                problems.append(f"I1: {where} has near member {member_hash[:12]} below the threshold")
            if fact_conflict(norm_of[member_hash], norm_of[canonical_hash]):
                problems.append(f"I6: {where} has near member {member_hash[:12]} with different facts")
    return problems
