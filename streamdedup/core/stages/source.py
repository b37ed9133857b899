"""Stage ``source``, keyed by source_id: versions, chunk lists and the source mapping.

It applies input events in version order (older or equal versions are ignored, a delete leaves a version
tombstone), tells each content which positions of the source hold it, and emits the source's mapping once every
position's content has answered for the source's current version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from streamdedup.core.chunking import paragraphs
from streamdedup.core.messages import ContentStatus, Message, Output, RefUpdate
from streamdedup.core.model import AclEvent, DeleteEvent, UpsertEvent
from streamdedup.core.normalize import normalize
from streamdedup.core.records import audit_value, mapping_value
from streamdedup.core.state import MappingEntry, PartitionState, SourceRecord, Table

if TYPE_CHECKING:
    from streamdedup.core.engine import Engine

__all__ = ["SourceStage", "chunk_texts"]


def chunk_texts(event: UpsertEvent) -> list[str]:
    """Return the original chunk texts of an upsert: its ``chunks`` as given, or its ``text`` split."""
    if event.chunks is not None:
        return list(event.chunks)
    return paragraphs(event.text or "")


class SourceStage:
    """Handler of the ``source`` stage."""

    name = "source"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of input events and content statuses for one partition."""
        table = Table(state, SourceRecord)
        out: list[Message | Output] = []
        touched: dict[str, None] = {}
        for message in messages:
            if isinstance(message, ContentStatus):
                self._apply_status(table, message)
            elif isinstance(message, (UpsertEvent, DeleteEvent, AclEvent)):
                if not self._apply_event(table, message, out):
                    continue
            else:  # pragma: no cover - routing guarantees the types above
                raise TypeError(f"source stage cannot handle {type(message).__name__}")
            touched[message.source_id] = None
        for source_id in touched:
            self._emit_mapping(table, source_id, out)
        table.flush()
        return out

    def _apply_event(
        self,
        table: Table[SourceRecord],
        event: UpsertEvent | DeleteEvent | AclEvent,
        out: list[Message | Output],
    ) -> bool:
        record = table.get_or_new(event.source_id)
        if event.version <= record.version:
            return False
        old = _positions_by_content(record.chunks)
        if isinstance(event, DeleteEvent):
            for content_hash in sorted(old):
                out.append(RefUpdate(content_hash, event.source_id, event.version, ()))
            if record.mapping is not None:
                out.append(Output("source-mappings", event.source_id, None))
            table.put(event.source_id, SourceRecord(version=event.version, deleted=True))
            return False
        if isinstance(event, AclEvent):
            record.version = event.version
            table.mark(event.source_id)
            if record.deleted or record.attrs is None:
                return False
            record.attrs = msgspec.structs.replace(record.attrs, acl=event.acl)
            new_chunks, new_texts = record.chunks, record.texts
            norms = [normalize(t) for t in new_texts]
        else:
            new_texts = chunk_texts(event)
            norms = [normalize(t) for t in new_texts]
            new_chunks = [hashlib.sha256(n.encode("utf-8")).hexdigest() for n in norms]
            record.version, record.deleted = event.version, False
            record.attrs, record.collection = event.attrs, event.collection
            record.chunks, record.texts = new_chunks, new_texts
            table.mark(event.source_id)
        new = _positions_by_content(new_chunks)
        for content_hash in sorted(set(old) | set(new)):
            positions = new.get(content_hash, ())
            out.append(
                RefUpdate(
                    content_hash,
                    event.source_id,
                    record.version,
                    positions,
                    tuple(new_texts[p] for p in positions),
                    norms[positions[0]] if positions else "",
                    record.attrs if positions else None,
                )
            )
        record.statuses = {h: s for h, s in record.statuses.items() if h in new}
        return True

    def _apply_status(self, table: Table[SourceRecord], status: ContentStatus) -> None:
        record = table.get(status.source_id)
        if record is None or record.deleted or status.content_hash not in record.chunks:
            return
        known = record.statuses.get(status.content_hash)
        if known is not None and (known.seq, known.version) >= (status.seq, status.version):
            return
        record.statuses[status.content_hash] = status
        table.mark(status.source_id)

    def _emit_mapping(self, table: Table[SourceRecord], source_id: str, out: list[Message | Output]) -> None:
        record = table.get(source_id)
        if record is None or record.deleted:
            return
        entries: list[MappingEntry] = []
        for position, content_hash in enumerate(record.chunks):
            status = record.statuses.get(content_hash)
            if status is None or status.version != record.version or not status.chunk_id:
                return  # some content has not answered for this version yet
            if status.relation == "near":
                relation, jaccard = "near", status.jaccard
            elif status.canonical_ref == (source_id, position):
                relation, jaccard = "canonical", 1.0
            else:
                relation, jaccard = "exact", 1.0
            entries.append(MappingEntry(position, content_hash, status.chunk_id, relation, jaccard))  # type: ignore[arg-type]
        if entries == record.mapping and record.mapped_version == record.version:
            return
        previous = {e.position: e for e in record.mapping or ()}
        for entry in entries:
            if entry.relation == "exact" and previous.get(entry.position) != entry:
                out.append(
                    Output(
                        "audit",
                        entry.chunk_id,
                        audit_value(
                            entry.chunk_id, "merge", "exact", source_id=source_id, position=entry.position
                        ),
                    )
                )
        record.mapping, record.mapped_version = entries, record.version
        table.mark(source_id)
        out.append(Output("source-mappings", source_id, mapping_value(source_id, record.version, entries)))


def _positions_by_content(chunks: list[str]) -> dict[str, tuple[int, ...]]:
    positions: dict[str, list[int]] = {}
    for position, content_hash in enumerate(chunks):
        positions.setdefault(content_hash, []).append(position)
    return {h: tuple(p) for h, p in positions.items()}
