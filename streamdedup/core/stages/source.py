"""Stage ``source``, keyed by source_id: versions, chunk lists and the source mapping.

It applies input events in version order (older or equal versions are ignored, a delete leaves a version
tombstone), chunks documents (markup-aware, without the collection's known boilerplate lines), tells each
content which positions of the source hold it, reports the document's lines to its collection, and emits the
source's mapping once every position's content has answered for the source's current version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from streamdedup.core import kernels
from streamdedup.core.chunking import Chunk, chunk_document
from streamdedup.core.markup import Block, blocks, has_markup, plain_text
from streamdedup.core.messages import (
    BoilerplateUpdate,
    LineDecision,
    LineUpdate,
    Message,
    Output,
    PairDecision,
    PairMark,
    RefUpdate,
    SourceRefs,
    SourceStatuses,
)
from streamdedup.core.model import AclEvent, DecisionEvent, DeleteEvent, UpsertEvent
from streamdedup.core.normalize import normalize
from streamdedup.core.params import EngineParams
from streamdedup.core.records import (
    audit_value,
    decision_audit_value,
    mapping_of_rows,
    mapping_row,
    review_key,
)
from streamdedup.core.stages.collection import line_hash
from streamdedup.core.state import (
    BoilerplateSnapshot,
    DecisionRecord,
    MappingEntry,
    PartitionState,
    SourceRecord,
    Table,
    pack_added,
    pack_lines,
    pack_statuses,
    unpack_lines,
    unpack_statuses,
)

if TYPE_CHECKING:
    from streamdedup.core.stages.context import StageContext

__all__ = [
    "SourceStage",
    "current_mapping",
    "document_chunks",
    "document_lines",
    "line_update",
    "line_update_in_python",
    "mapping_in_python",
    "merge_in_python",
    "plain_chunks",
    "plain_chunks_in_python",
    "refs_in_python",
    "source_refs",
]

_SNAPSHOT_PREFIX = "\x00boilerplate\x00"


def document_chunks(
    event: UpsertEvent,
    params: EngineParams,
    keep_line: Callable[[str], bool] | None = None,
    parsed: Sequence[Block] | None = None,
) -> list[Chunk]:
    """Return the chunks of an upsert: its ``chunks`` as given, or its ``text`` chunked (from ``parsed`` if given)."""
    if event.chunks is not None:
        return [Chunk(c, plain_text(c, event.content_type)) for c in event.chunks]
    return chunk_document(
        event.text or "",
        event.content_type,
        max_chars=params.max_chunk_chars,
        keep_line=keep_line,
        parsed=parsed,
    )


def plain_chunks(
    text: str, content_type: str, max_chars: int, known: dict[str, str] | None
) -> tuple[list[str], list[str], list[str]]:
    """Chunk a text without markup (:func:`~streamdedup.core.markup.has_markup` false), leaving out the lines whose
    key is in ``known`` (a collection's boilerplate): its paragraphs' plain text, and each chunk's original and
    plain text. Compiled where the kernels are (``plain_chunks_in_python`` is the Python implementation)."""
    compiled = kernels.native()
    if compiled is None:
        return plain_chunks_in_python(text, content_type, max_chars, known)
    return compiled.plain_chunks(text, content_type == "text/plain", max_chars, known, normalize)  # type: ignore[no-any-return]


def plain_chunks_in_python(
    text: str, content_type: str, max_chars: int, known: dict[str, str] | None
) -> tuple[list[str], list[str], list[str]]:
    """:func:`plain_chunks` in Python (the compiled kernel's twin): ``blocks`` and ``chunk_document``."""
    parsed = blocks(text, content_type)
    chunks = chunk_document(text, content_type, max_chars=max_chars, keep_line=_keeper(known), parsed=parsed)
    return [b.plain for b in parsed], [c.original for c in chunks], [c.plain for c in chunks]


def _keeper(known: dict[str, str] | None) -> Callable[[str], bool] | None:
    """Whether to keep a line of a document: not if it is one of a collection's ``known`` boilerplate lines."""
    if not known:
        return None
    lines = known

    def keep_line(line: str) -> bool:
        return line_hash(normalize(line)) not in lines

    return keep_line


def _line_parts(
    event: UpsertEvent, params: EngineParams, parsed: Sequence[str] | None, compiled: bool
) -> tuple[str, dict[str, str]]:
    """Return the ASCII blocks of a text upsert joined (for a ``compiled`` call) and the lines of its other blocks
    (of all its blocks, when not ``compiled``).

    ``parsed`` is the plain text of its blocks, where the caller has them already. A document counts no lines
    where its upsert gives chunks or boilerplate is off.
    """
    if event.chunks is not None or params.boilerplate_min_docs == 0:
        return "", {}
    found: dict[str, str] = {}
    longest = params.boilerplate_max_line_chars
    ascii_blocks: list[str] = []
    if parsed is None:
        parsed = [block.plain for block in blocks(event.text or "", event.content_type)]
    for plain in parsed:
        if compiled and plain.isascii():
            ascii_blocks.append(plain)
            continue
        for line in plain.split("\n"):
            normalized = normalize(line)
            if normalized and len(normalized) <= longest:
                found[line_hash(normalized)] = normalized
    return "\n".join(ascii_blocks), found


def document_lines(
    event: UpsertEvent, params: EngineParams, parsed: Sequence[str] | None = None
) -> dict[str, str]:
    """Return the normalized lines a text upsert counts in its collection's boilerplate statistics.

    ``parsed`` is the plain text of the text's :func:`blocks`, where the caller has them already.
    """
    compiled = kernels.native()
    text, found = _line_parts(event, params, parsed, compiled is not None)
    if text and compiled is not None:
        # Compiled: the same keys and lines as the loop of _line_parts, for the ASCII blocks' lines in one call.
        found.update(compiled.line_hashes(text, params.boilerplate_max_line_chars))
    return found


_LineChange = tuple[bytes, bytes, tuple[str, ...], int]


def line_update(
    event: UpsertEvent, params: EngineParams, parsed: Sequence[str] | None, old: bytes
) -> _LineChange:
    """Return how a text upsert changes the lines its source counts, against ``old`` (packed hashes).

    ``(lines, added, removed, count)``: its lines' hashes sorted and packed (``pack_lines``), the packed
    ``(hash, line)`` of those not in ``old`` (``pack_added``), the hashes in ``old`` no longer among them (sorted),
    and the number of its lines. Compiled where the kernels are; ``line_update_in_python`` is the Python
    implementation.
    """
    compiled = kernels.native()
    if compiled is None:
        return line_update_in_python(event, params, parsed, old)
    text, others = _line_parts(event, params, parsed, True)
    found = compiled.line_update(text, params.boilerplate_max_line_chars, list(others.items()), old)
    assert found is not None  # the ASCII blocks only
    lines, added, removed, count = found
    return lines, added, tuple(removed), count


def line_update_in_python(
    event: UpsertEvent, params: EngineParams, parsed: Sequence[str] | None, old: bytes
) -> _LineChange:
    """:func:`line_update` in Python (the compiled kernel's twin, which the tests compare it with)."""
    lines = document_lines(event, params, parsed)
    ordered = sorted(lines)
    known = set(unpack_lines(old))
    return (
        pack_lines(ordered),
        pack_added([(h, lines[h]) for h in ordered if h not in known]),
        tuple(sorted(known.difference(lines))),
        len(lines),
    )


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
    held = _positions_by_content(hashes)
    entries = []
    for content_hash in sorted(set(held) | set(old)):
        positions = held.get(content_hash, ())
        texts = tuple(originals[p] for p in positions)
        entries.append((content_hash, positions, texts, norms[positions[0]] if positions else ""))
    return hashes, msgspec.msgpack.encode(entries) if entries else b""


class SourceStage:
    """Handler of the ``source`` stage."""

    name = "source"

    def __init__(self, context: StageContext) -> None:
        self._params = context.params

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of input events, content statuses and boilerplate lists for one partition."""
        table = Table(state, SourceRecord)
        keyed = (UpsertEvent, DeleteEvent, AclEvent, SourceStatuses)
        table.prefetch(
            list(
                dict.fromkeys(
                    [
                        m.source_id
                        for m in messages
                        if isinstance(m, keyed)
                        or (isinstance(m, DecisionEvent) and m.subject_source is not None)
                    ]
                )
            )
        )
        snapshots = Table(state, BoilerplateSnapshot)
        ledger = Table(state, DecisionRecord)
        out: list[Message | Output] = []
        touched: dict[str, None] = {}
        # Status lists are taken in together, one call a source, before the next event of that source that follows
        # them (a source hears from each content partition in a round).
        arrived: dict[str, list[bytes]] = {}
        for message in messages:
            if isinstance(message, SourceStatuses):  # most of what the stage hears
                arrived.setdefault(message.source_id, []).append(message.statuses)
            elif isinstance(message, DecisionEvent):
                if message.subject_source is not None:
                    self._take_statuses(table, message.source_id, arrived.pop(message.source_id, []))
                    if not self._apply_preference(table, message, out):
                        continue
                else:
                    self._apply_decision(ledger, message, out)
                    continue
            elif isinstance(message, BoilerplateUpdate):
                key = _SNAPSHOT_PREFIX + message.collection
                snapshot = snapshots.get_or_new(key)
                if message.seq > snapshot.seq:
                    snapshot.seq, snapshot.lines = message.seq, dict(message.lines)
                    snapshots.mark(key)
                continue
            elif isinstance(message, (UpsertEvent, DeleteEvent, AclEvent)):
                self._take_statuses(table, message.source_id, arrived.pop(message.source_id, []))
                if not self._apply_event(table, snapshots, message, out):
                    continue
            else:  # pragma: no cover - routing guarantees the types above
                raise TypeError(f"source stage cannot handle {type(message).__name__}")
            touched[message.source_id] = None
        for source_id, lists in arrived.items():
            self._take_statuses(table, source_id, lists)
        for source_id in touched:
            self._emit_mapping(table, source_id, out)
        table.flush()
        snapshots.flush()
        ledger.flush()
        return out

    @staticmethod
    def _apply_decision(
        ledger: Table[DecisionRecord], event: DecisionEvent, out: list[Message | Output]
    ) -> None:
        """Keep the newest decision about a pair or a line and pass it on (both contents, or the collection).

        This is the ledger that makes a decision apply once: a replay or an older version stops here.
        """
        record = ledger.get_or_new(event.source_id)
        if event.version <= record.version:
            return
        record.version = event.version
        ledger.mark(event.source_id)
        if event.pair is not None:
            mark = PairMark(event.kind, event.version)
            low, high = event.pair
            out.append(PairDecision(low, high, mark))
            out.append(PairDecision(high, low, mark))
            if event.kind == "keep_separate" or (event.kind == "merge" and event.reason == "semantic"):
                # Resolved here whoever raised it (a semantic flag comes from the index writer, not a content); a
                # content resolves its own flag on a merge, which the permission guard may still refuse.
                out.append(Output("review", review_key(low, high), None))
        else:
            assert event.collection is not None and event.line is not None
            kind = event.kind.removeprefix("boilerplate_")
            out.append(LineDecision(event.collection, event.line, kind, event.version))
        out.append(Output("audit", event.subject, decision_audit_value(event)))

    @staticmethod
    def _apply_preference(
        table: Table[SourceRecord], event: DecisionEvent, out: list[Message | Output]
    ) -> bool:
        """Apply a prefer/unprefer decision to the source; return whether its contents must hear new attributes."""
        record = table.get(event.source_id)
        if record is None:  # no event of the source yet: it is not live until its first upsert
            record = SourceRecord(deleted=True)
            table.put(event.source_id, record)
        if event.version <= record.preferred_version:
            return False
        record.preferred_version = event.version
        table.mark(event.source_id)
        out.append(Output("audit", event.subject, decision_audit_value(event)))
        preferred = event.kind == "prefer"
        if preferred == record.preferred:
            return False
        record.preferred = preferred
        if record.deleted or record.attrs is None:
            return False
        record.attrs = msgspec.structs.replace(record.attrs, preferred=preferred)
        record.attrs_seq += 1
        for content_hash, positions in sorted(_positions_by_content(record.chunks).items()):
            out.append(_attrs_update(content_hash, event.source_id, record, positions))
        return True

    def _apply_event(
        self,
        table: Table[SourceRecord],
        snapshots: Table[BoilerplateSnapshot],
        event: UpsertEvent | DeleteEvent | AclEvent,
        out: list[Message | Output],
    ) -> bool:
        record = table.get_or_new(event.source_id)
        if event.version <= record.version:
            return False
        if isinstance(event, DeleteEvent):
            for content_hash in sorted(set(record.chunks)):
                out.append(
                    RefUpdate(content_hash, event.source_id, event.version, (), attrs_seq=record.attrs_seq)
                )
            if record.lines_collection:
                out.append(
                    LineUpdate(
                        record.lines_collection,
                        event.source_id,
                        event.version,
                        False,
                        b"",
                        unpack_lines(record.lines),
                    )
                )
            if record.mapped_version >= 0:
                out.append(Output("source-mappings", event.source_id, None))
            table.put(
                event.source_id,
                SourceRecord(
                    version=event.version,
                    deleted=True,
                    preferred=record.preferred,
                    preferred_version=record.preferred_version,
                    attrs_seq=record.attrs_seq,
                ),
            )
            return False
        if isinstance(event, AclEvent):
            record.version = event.version
            table.mark(event.source_id)
            if record.deleted or record.attrs is None:
                return False
            record.attrs = msgspec.structs.replace(record.attrs, acl=event.acl, preferred=record.preferred)
            for content_hash, positions in sorted(_positions_by_content(record.chunks).items()):
                out.append(_attrs_update(content_hash, event.source_id, record, positions))
        else:
            snapshot = snapshots.get(_SNAPSHOT_PREFIX + event.collection)
            known = snapshot.lines if snapshot is not None and snapshot.lines else None
            # The text's blocks, parsed once for its chunks and its lines.
            parsed: list[str] | None
            if event.chunks is None and not has_markup(event.content_type):
                parsed, originals, plains = plain_chunks(
                    event.text or "", event.content_type, self._params.max_chunk_chars, known
                )
            else:
                found = None if event.chunks is not None else blocks(event.text or "", event.content_type)
                chunks = document_chunks(event, self._params, _keeper(known), found)
                originals, plains = [c.original for c in chunks], [c.plain for c in chunks]
                parsed = None if found is None else [block.plain for block in found]
            self._report_lines(record, event, out, parsed)
            record.version, record.deleted = event.version, False
            attrs = event.attrs
            if record.preferred:
                attrs = msgspec.structs.replace(attrs, preferred=True)
            record.attrs, record.collection = attrs, event.collection
            record.chunks, refs = source_refs(plains, originals, record.chunks)
            table.mark(event.source_id)
            if refs:
                out.append(SourceRefs(event.source_id, record.version, record.attrs_seq, record.attrs, refs))
        kept = merge_statuses(record.chunks, record.statuses, [])  # those of contents it still holds
        if kept is not None:
            record.statuses = kept
        return True

    def _report_lines(
        self,
        record: SourceRecord,
        event: UpsertEvent,
        out: list[Message | Output],
        parsed: Sequence[str] | None,
    ) -> None:
        old = record.lines if record.lines_collection else b""
        if record.lines_collection and record.lines_collection != event.collection:
            gone = unpack_lines(record.lines)
            out.append(LineUpdate(record.lines_collection, event.source_id, event.version, False, b"", gone))
            old = b""
        lines, added, removed, count = line_update(event, self._params, parsed, old)
        if count or old:
            out.append(
                LineUpdate(event.collection, event.source_id, event.version, count > 0, added, removed)
            )
        record.lines = lines
        record.lines_collection = event.collection if count else ""

    @staticmethod
    def _take_statuses(table: Table[SourceRecord], source_id: str, lists: list[bytes]) -> None:
        """Keep what contents say of the source's positions that hold them: packed status lists, in the order they
        came (:func:`merge_statuses`). A source not live ignores them."""
        if not lists:
            return
        record = table.get(source_id)
        if record is None or record.deleted:
            return
        merged = merge_statuses(record.chunks, record.statuses, lists)
        if merged is not None:
            record.statuses = merged
            table.mark(source_id)

    def _emit_mapping(self, table: Table[SourceRecord], source_id: str, out: list[Message | Output]) -> None:
        record = table.get(source_id)
        if record is None or record.deleted:
            return
        # The mapping, its fingerprints and, if they changed, its record's value, in one call.
        found = source_mapping(
            source_id,
            record.chunks,
            record.statuses,
            record.version,
            record.mapped,
            record.mapped_version == record.version,
        )
        if found is None:
            return  # some content has not answered for this version yet
        mapped, changed = found
        if changed is None:
            return
        value, merged = changed
        for position, chunk_id in merged:
            out.append(
                Output(
                    "audit",
                    chunk_id,
                    audit_value(chunk_id, "merge", "exact", source_id=source_id, position=position),
                )
            )
        record.mapped, record.mapped_version = mapped, record.version
        table.mark(source_id)
        out.append(Output("source-mappings", source_id, msgspec.Raw(value)))


_Mapped = tuple[bytes, tuple[bytes, list[tuple[int, str]]] | None]


def source_mapping(
    source_id: str, chunks: Sequence[str], statuses: bytes, version: int, before: bytes, sent: bool
) -> _Mapped | None:
    """Return a source's mapping for ``version`` as :func:`mapping_in_python` says, compiled where the kernels are."""
    compiled = kernels.native()
    if compiled is None:
        return mapping_in_python(source_id, chunks, statuses, version, before, sent)
    return compiled.source_mapping(source_id, chunks, statuses, version, before, sent)  # type: ignore[no-any-return]


def merge_statuses(chunks: Sequence[str], statuses: bytes, incoming: Sequence[bytes]) -> bytes | None:
    """Take status lists into a source's statuses as :func:`merge_in_python` says, compiled where the kernels are."""
    compiled = kernels.native()
    if compiled is None:
        return merge_in_python(chunks, statuses, incoming)
    return compiled.merge_statuses(chunks, statuses, incoming)  # type: ignore[no-any-return]


def mapping_in_python(
    source_id: str,
    chunks: Sequence[str],
    statuses: bytes,
    version: int,
    before: bytes,
    sent: bool,
) -> _Mapped | None:
    """A source's mapping in Python (the compiled ``source_mapping``'s twin, which the tests compare it with).

    A source's mapping for ``version`` from its chunks and its contents' statuses (a packed status list): None
    until every content
    answered for that version. Else the fingerprint of each entry and, unless those equal ``before`` and ``sent``
    says the mapping sent last was for this version, the value of its ``source-mappings`` record as JSON, with the
    (position, chunk id) of each exact copy whose fingerprint is not the one ``before`` holds for its position.
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
    value = mapping_of_rows(source_id, version, [mapping_row(e) for e in entries])
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


def _attrs_update(
    content_hash: str, source_id: str, record: SourceRecord, positions: tuple[int, ...]
) -> RefUpdate:
    """Tell a content the source's new attributes alone (it keeps the texts; sources keep only hashes)."""
    return RefUpdate(
        content_hash,
        source_id,
        record.version,
        positions,
        attrs=record.attrs,
        attrs_only=True,
        attrs_seq=record.attrs_seq,
    )


def _positions_by_content(chunks: list[str]) -> dict[str, tuple[int, ...]]:
    positions: dict[str, list[int]] = {}
    for position, content_hash in enumerate(chunks):
        positions.setdefault(content_hash, []).append(position)
    return {h: tuple(p) for h, p in positions.items()}
