"""Stage ``source``, keyed by source_id: versions, chunk lists and the source mapping.

It applies input events in version order (older or equal versions are ignored, a delete leaves a version
tombstone), chunks documents (markup-aware, without the collection's known boilerplate lines), tells each
content which positions of the source hold it, reports the document's lines to its collection, and emits the
source's mapping once every position's content has answered for the source's current version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from streamdedup.core.lineage import Membership
from streamdedup.core.markup import blocks, has_markup
from streamdedup.core.messages import (
    BoilerplateUpdate,
    LineageMember,
    LineageStatus,
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
from streamdedup.core.model import AclEvent, DecisionEvent, DeleteEvent, UpsertEvent, format_timestamp
from streamdedup.core.records import audit_value, decision_audit_value, review_key
from streamdedup.core.retained import decision_key, source_key
from streamdedup.core.stages.source_chunks import document_chunks, line_keeper, line_update, plain_chunks
from streamdedup.core.stages.source_mappings import (
    merge_statuses,
    positions_by_content,
    source_mapping,
    source_refs,
)
from streamdedup.core.state import BoilerplateSnapshot, DecisionRecord, Retained, SourceRecord, unpack_lines
from streamdedup.core.tables import PartitionState, Table
from streamdedup.errors import InvalidEventError

if TYPE_CHECKING:
    from streamdedup.core.stages.context import StageContext

__all__ = ["SourceStage"]

_SNAPSHOT_PREFIX = "\x00boilerplate\x00"
# What the stage applies to a source, after the status lists that arrived for it before.
_APPLIED = (DecisionEvent, UpsertEvent, DeleteEvent, AclEvent, LineageStatus)


class SourceStage:
    """Handler of the ``source`` stage."""

    name = "source"

    def __init__(self, context: StageContext) -> None:
        self._params = context.params
        self._audit_exact = context.audit_exact_copies
        self._lineages = context.lineages

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of input events, content statuses and boilerplate lists for one partition."""
        table = Table(state, SourceRecord)
        keyed = (UpsertEvent, DeleteEvent, AclEvent, SourceStatuses, LineageStatus)
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
        # The retained record (streamdedup.core.retained): each source's and decision's latest event.
        kept = Table(state, Retained)
        kept.prefetch([source_key(m.source_id) for m in messages if isinstance(m, AclEvent)])
        out: list[Message | Output] = []
        touched: dict[str, None] = {}
        # Status lists are taken in together, one call a source, before the next event of that source that follows
        # them (a source hears from each content partition in a round).
        arrived: dict[str, list[bytes]] = {}
        for message in messages:
            if isinstance(message, SourceStatuses):  # most of what the stage hears
                arrived.setdefault(message.source_id, []).append(message.statuses)
                touched[message.source_id] = None
                continue
            if isinstance(message, BoilerplateUpdate):
                self._keep_boilerplate(snapshots, message)
                continue
            if isinstance(message, DecisionEvent) and message.subject_source is None:
                if self._apply_decision(ledger, message, out):
                    kept.put(decision_key(message), Retained(message))
                continue
            if not isinstance(message, _APPLIED):  # pragma: no cover - routing guarantees the types above
                raise TypeError(f"source stage cannot handle {type(message).__name__}")
            self._take_statuses(table, message.source_id, arrived.pop(message.source_id, []))
            if isinstance(message, DecisionEvent):
                applied = self._apply_preference(table, kept, message, out)
            elif isinstance(message, LineageStatus):
                applied = _apply_lineage_status(table, message, out)
            else:
                applied = self._apply_event(table, snapshots, kept, message, out)
            if applied:
                touched[message.source_id] = None
        for source_id, lists in arrived.items():
            self._take_statuses(table, source_id, lists)
        for source_id in touched:
            self._emit_mapping(table, source_id, out)
        table.flush()
        snapshots.flush()
        ledger.flush()
        kept.flush()
        return out

    @staticmethod
    def _keep_boilerplate(snapshots: Table[BoilerplateSnapshot], message: BoilerplateUpdate) -> None:
        """Keep a collection's boilerplate list, if it is newer than the one held."""
        key = _SNAPSHOT_PREFIX + message.collection
        snapshot = snapshots.get_or_new(key)
        if message.seq > snapshot.seq:
            snapshot.seq, snapshot.lines = message.seq, dict(message.lines)
            snapshots.mark(key)

    @staticmethod
    def _apply_decision(
        ledger: Table[DecisionRecord], event: DecisionEvent, out: list[Message | Output]
    ) -> bool:
        """Keep the newest decision about a pair or a line and pass it on (both contents, or the collection);
        return whether it is newer than the one in force.

        This is the ledger that makes a decision apply once: a replay or an older version stops here.
        """
        record = ledger.get_or_new(event.source_id)
        if event.version <= record.version:
            return False
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
        return True

    @staticmethod
    def _apply_preference(
        table: Table[SourceRecord], kept: Table[Retained], event: DecisionEvent, out: list[Message | Output]
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
        kept.put(decision_key(event), Retained(event))
        out.append(Output("audit", event.subject, decision_audit_value(event)))
        preferred = event.kind == "prefer"
        if preferred == record.preferred:
            return False
        record.preferred = preferred
        if record.deleted or record.attrs is None:
            return False
        _announce_attrs(record, event.source_id, out, preferred=preferred)
        return True

    def _apply_event(
        self,
        table: Table[SourceRecord],
        snapshots: Table[BoilerplateSnapshot],
        kept: Table[Retained],
        event: UpsertEvent | DeleteEvent | AclEvent,
        out: list[Message | Output],
    ) -> bool:
        """Apply an input event newer than the source's version; return whether the source's mapping may change."""
        record = table.get_or_new(event.source_id)
        if event.version <= record.version:
            return False
        key = source_key(event.source_id)
        if isinstance(event, DeleteEvent):
            self._apply_delete(table, record, event, out)
            kept.put(key, Retained(event))
            return False
        if isinstance(event, AclEvent):
            _retain_acl(kept, key, event)
            if not self._apply_acl(table, record, event, out):
                return False
        else:
            self._apply_upsert(table, snapshots, record, event, out)
            kept.put(key, Retained(event))
        statuses = merge_statuses(record.chunks, record.statuses, [])  # those of contents it still holds
        if statuses is not None:
            record.statuses = statuses
        return True

    @staticmethod
    def _apply_delete(
        table: Table[SourceRecord], record: SourceRecord, event: DeleteEvent, out: list[Message | Output]
    ) -> None:
        """Tell the source's contents and its collection that it is gone, and leave a version tombstone."""
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
        if record.lineage and not record.deleted:
            out.append(
                LineageMember(record.lineage_collection, record.lineage, event.source_id, event.version)
            )
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

    @staticmethod
    def _apply_acl(
        table: Table[SourceRecord], record: SourceRecord, event: AclEvent, out: list[Message | Output]
    ) -> bool:
        """Apply an ACL change; return whether the source is live (its contents then hear its new attributes)."""
        record.version = event.version
        table.mark(event.source_id)
        if record.deleted or record.attrs is None:
            return False
        record.attrs = msgspec.structs.replace(record.attrs, acl=event.acl, preferred=record.preferred)
        for content_hash, positions in sorted(positions_by_content(record.chunks).items()):
            out.append(_attrs_update(content_hash, event.source_id, record, positions))
        return True

    def _apply_upsert(
        self,
        table: Table[SourceRecord],
        snapshots: Table[BoilerplateSnapshot],
        record: SourceRecord,
        event: UpsertEvent,
        out: list[Message | Output],
    ) -> None:
        """Chunk a new version, report its lines, and tell the contents of either version what it holds."""
        if event.data is not None:
            raise InvalidEventError(
                "a document's bytes reach the engine unconverted; drivers convert them first (streamdedup.convert)",
                field="data",
            )
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
            chunks = document_chunks(event, self._params, line_keeper(known), found)
            originals, plains = [c.original for c in chunks], [c.plain for c in chunks]
            parsed = None if found is None else [block.plain for block in found]
        self._report_lines(record, event, out, parsed)
        outdated_by = self._join_lineage(record, event, out)
        record.version, record.deleted = event.version, False
        attrs = event.attrs
        if record.preferred or outdated_by:
            attrs = msgspec.structs.replace(attrs, preferred=record.preferred, outdated_by=outdated_by)
        record.attrs, record.collection = attrs, event.collection
        record.chunks, refs = source_refs(plains, originals, record.chunks)
        table.mark(event.source_id)
        if refs:
            out.append(SourceRefs(event.source_id, record.version, record.attrs_seq, record.attrs, refs))

    def _join_lineage(self, record: SourceRecord, event: UpsertEvent, out: list[Message | Output]) -> str:
        """Tell the lineages the source leaves and joins with this version; return the status its new version
        starts with (what the previous one was told, in the same lineage; else current until told)."""
        membership: Membership | None = None
        if self._lineages or event.lineage is not None:
            membership = self._lineages.of_event(
                event.collection,
                event.source_id,
                format_timestamp(event.attrs.modified_at),
                event.lineage,
                event.lineage_version,
            )
        held = (record.lineage_collection, record.lineage) if record.lineage and not record.deleted else None
        joined = (event.collection, membership.lineage) if membership is not None else None
        if held is not None and held != joined:
            out.append(LineageMember(held[0], held[1], event.source_id, event.version))
        if joined is None or membership is None:
            record.lineage = record.lineage_collection = ""
            record.lineage_version, record.lineage_seq = -1, 0
            return ""
        out.append(LineageMember(joined[0], joined[1], event.source_id, event.version, membership.order))
        outdated_by = record.attrs.outdated_by if held == joined and record.attrs is not None else ""
        if held != joined:
            record.lineage_collection, record.lineage, record.lineage_seq = joined[0], joined[1], 0
        record.lineage_version = event.version
        return outdated_by

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
        if record is None or record.deleted or record.attrs is None:
            return
        # The mapping, its fingerprints and, if they changed, its record's value, in one call.
        found = source_mapping(
            source_id,
            record.attrs,
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
        # The positions that became copies of a known text, audited only when asked for (audit_exact_copies): the
        # mapping says "exact" of them all the same.
        if self._audit_exact:
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


def _apply_lineage_status(
    table: Table[SourceRecord], status: LineageStatus, out: list[Message | Output]
) -> bool:
    """Take a lineage's status about the version the source joined it with, if it is the newest heard; return
    whether the source's contents must hear its new attributes (current, or outdated by another member)."""
    record = table.get(status.source_id)
    if record is None or record.deleted or record.attrs is None:
        return False
    joined = (record.lineage_collection, record.lineage, record.lineage_version)
    if joined != (status.collection, status.lineage, status.version) or status.seq <= record.lineage_seq:
        return False
    record.lineage_seq = status.seq
    table.mark(status.source_id)
    if record.attrs.outdated_by == status.outdated_by:
        return False
    _announce_attrs(record, status.source_id, out, outdated_by=status.outdated_by)
    return True


def _retain_acl(kept: Table[Retained], key: str, event: AclEvent) -> None:
    """Keep the source's latest upsert with the new ACL and version; a source not live keeps its version alone (a
    delete at that version leaves an engine exactly as such an ``acl`` event does)."""
    held = kept.get(key)
    if held is not None and isinstance(held.event, UpsertEvent):
        attrs = msgspec.structs.replace(held.event.attrs, acl=event.acl)
        kept.put(key, Retained(msgspec.structs.replace(held.event, version=event.version, attrs=attrs)))
    else:
        kept.put(key, Retained(DeleteEvent(source_id=event.source_id, version=event.version)))


def _announce_attrs(
    record: SourceRecord, source_id: str, out: list[Message | Output], **changes: Any
) -> None:
    """Change the attributes of a live version in place (a preference, a lineage status) and tell every content
    the source holds, as a change within the version (``attrs_seq``)."""
    assert record.attrs is not None
    record.attrs = msgspec.structs.replace(record.attrs, **changes)
    record.attrs_seq += 1
    for content_hash, positions in sorted(positions_by_content(record.chunks).items()):
        out.append(_attrs_update(content_hash, source_id, record, positions))


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
