"""What a source and its contents tell each other, as the ``source`` stage keeps it.

A new version's chunks become content hashes and the packed list of what each content hears (``SourceRefs.refs``);
the statuses the contents send back are merged into the source's record, and once every content answered for the
source's version, they make its mapping, which carries the source's attributes too (``mapping/v2``). Each function
is compiled where the kernels are; its ``*_in_python`` twin is the Python implementation, which the tests compare
with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from streamdedup.core import kernels
from streamdedup.core.model import SourceAttrs
from streamdedup.core.normalize import normalize
from streamdedup.core.records import mapped_attrs, mapping_of_rows, mapping_row
from streamdedup.core.state import MappingEntry, SourceRecord, pack_statuses, unpack_statuses

__all__ = [
    "current_mapping",
    "mapping_in_python",
    "merge_in_python",
    "merge_statuses",
    "positions_by_content",
    "refs_in_python",
    "source_mapping",
    "source_refs",
]


def source_refs(
    plains: Sequence[str], originals: Sequence[str], old: Sequence[str]
) -> tuple[list[str], bytes]:
    """Return the content hash of each chunk of a new version (its ``plains`` and ``originals``: each chunk's plain
    and original text) and the packed list of what the version tells the contents of either version
    (``SourceRefs.refs``), against ``old``, the hashes of the version before.

    Compiled where the kernels are: each chunk normalized and hashed, and the list written, in one call
    (``refs_in_python`` is the Python implementation).
    """
    compiled = kernels.native()
    if compiled is None:
        return refs_in_python(plains, originals, old)
    return compiled.source_refs(plains, originals, old, normalize)  # type: ignore[no-any-return]


def refs_in_python(
    plains: Sequence[str], originals: Sequence[str], old: Sequence[str]
) -> tuple[list[str], bytes]:
    """:func:`source_refs` in Python (the compiled kernel's twin, which the tests compare it with)."""
    norms = [normalize(plain) for plain in plains]
    hashes = [hashlib.sha256(n.encode("utf-8")).hexdigest() for n in norms]
    held = positions_by_content(hashes)
    entries = []
    for content_hash in sorted(set(held) | set(old)):
        positions = held.get(content_hash, ())
        texts = tuple(originals[p] for p in positions)
        entries.append((content_hash, positions, texts, norms[positions[0]] if positions else ""))
    return hashes, msgspec.msgpack.encode(entries) if entries else b""


_Mapped = tuple[bytes, tuple[bytes, list[tuple[int, str]]] | None]


def source_mapping(
    source_id: str,
    attrs: SourceAttrs,
    chunks: Sequence[str],
    statuses: bytes,
    version: int,
    before: bytes,
    sent: bool,
) -> _Mapped | None:
    """Return a source's mapping for ``version`` as :func:`mapping_in_python` says, compiled where the kernels are."""
    compiled = kernels.native()
    if compiled is None:
        return mapping_in_python(source_id, attrs, chunks, statuses, version, before, sent)
    # The attributes are described (sorted, formatted) only for a record to write: most calls write none.
    return compiled.source_mapping(  # type: ignore[no-any-return]
        source_id, attrs, mapped_attrs, chunks, statuses, version, before, sent
    )


def merge_statuses(chunks: Sequence[str], statuses: bytes, incoming: Sequence[bytes]) -> bytes | None:
    """Take status lists into a source's statuses as :func:`merge_in_python` says, compiled where the kernels are."""
    compiled = kernels.native()
    if compiled is None:
        return merge_in_python(chunks, statuses, incoming)
    return compiled.merge_statuses(chunks, statuses, incoming)  # type: ignore[no-any-return]


def mapping_in_python(
    source_id: str,
    attrs: SourceAttrs,
    chunks: Sequence[str],
    statuses: bytes,
    version: int,
    before: bytes,
    sent: bool,
) -> _Mapped | None:
    """A source's mapping in Python (the compiled ``source_mapping``'s twin, which the tests compare it with).

    A source's mapping for ``version`` from its chunks and its contents' statuses (a packed status list): None
    until every content answered for that version. Else the fingerprint of each entry and, unless those equal
    ``before`` and ``sent`` says the mapping sent last was for this version, the value of its ``source-mappings``
    record as JSON (what it says of the source's ``attrs``, :func:`~streamdedup.core.records.mapped_attrs`, and
    the entries), with the (position, chunk id) of each exact copy whose fingerprint is not the one ``before``
    holds for its position. The fingerprints do not cover ``attrs``: a source's attributes change only with its
    version, and a new version's mapping is always sent.
    """
    record = SourceRecord(version=version, chunks=list(chunks), statuses=statuses)
    entries = current_mapping("", record)
    if entries is None:
        return None
    mapped = b"".join(_fingerprint(e) for e in entries)
    if sent and mapped == before:
        return mapped, None
    at = [slice(e.position * _PRINT, (e.position + 1) * _PRINT) for e in entries]
    merged = [
        (e.position, e.chunk_id)
        for e, cut in zip(entries, at, strict=True)
        if e.relation == "exact" and before[cut] != mapped[cut]
    ]
    value = mapping_of_rows(source_id, version, mapped_attrs(attrs), [mapping_row(e) for e in entries])
    return mapped, (msgspec.json.encode(value), merged)


def merge_in_python(chunks: Sequence[str], statuses: bytes, incoming: Sequence[bytes]) -> bytes | None:
    """Status lists merged in Python (the compiled ``merge_statuses``' twin, which the tests compare it with).

    Take the packed status lists ``incoming`` into a source's ``statuses`` for its chunk list: a status is kept if
    its content is still in the list and it is newer, by (seq, version), than the one held; those of contents no
    longer in the list are dropped. Return the new packed list, or None if it did not change.
    """
    listed = set(chunks)
    held = unpack_statuses(statuses)
    merged = {h: e for h, e in held.items() if h in listed}
    changed = len(merged) != len(held)
    for packed in incoming:
        for content_hash, entry in unpack_statuses(packed).items():
            known = merged.get(content_hash)
            if content_hash not in listed or (
                known is not None and (known.seq, known.version) >= (entry.seq, entry.version)
            ):
                continue
            merged[content_hash] = entry
            changed = True
    return pack_statuses(merged.values()) if changed else None


def current_mapping(source_id: str, record: SourceRecord) -> list[MappingEntry] | None:
    """Return a source's mapping from what its contents told it, or None until all answered for its version."""
    entries: list[MappingEntry] = []
    statuses = unpack_statuses(record.statuses)
    for position, content_hash in enumerate(record.chunks):
        status = statuses.get(content_hash)
        if status is None or status.version != record.version or not status.chunk_id:
            return None
        chunk_id = content_hash if status.chunk_id == "=" else status.chunk_id
        if status.relation == "near":
            entries.append(MappingEntry(position, content_hash, chunk_id, "near", status.jaccard))
        elif status.canonical_position == position:
            entries.append(MappingEntry(position, content_hash, chunk_id, "canonical", 1.0))
        else:
            entries.append(MappingEntry(position, content_hash, chunk_id, "exact", 1.0))
    return entries


_PRINT = 8  # bytes of a mapping entry's fingerprint


def _fingerprint(entry: MappingEntry) -> bytes:
    """A short digest of a mapping entry: the record keeps these, not the entries, of the last mapping sent.

    The compiled ``source_mapping`` computes the same (``native/src/mapping.rs``), which the tests compare.
    """
    text = f"{entry.content_hash}\x00{entry.chunk_id}\x00{entry.relation}\x00{entry.jaccard!r}"
    return hashlib.blake2b(text.encode(), digest_size=_PRINT).digest()


def positions_by_content(chunks: list[str]) -> dict[str, tuple[int, ...]]:
    positions: dict[str, list[int]] = {}
    for position, content_hash in enumerate(chunks):
        positions.setdefault(content_hash, []).append(position)
    return {h: tuple(p) for h, p in positions.items()}
