"""Stage ``collection``, keyed by collection: which normalized lines are boilerplate there (design §3).

Sources report the lines each version adds and removes. The stage counts, per collection, the documents and the
documents containing each line; once a collection has ``boilerplate_min_docs`` documents, a line found in at
least ``boilerplate_fraction`` of them is boilerplate, unless the allow-list names it. A reviewer's decision
about a line overrides the counts: ``allow`` keeps it, ``strip`` strips it, ``auto`` gives it back to them. Every
change of the list is sent to every partition of the ``source`` stage, which strips those lines before chunking
from then on.

A document keeps the chunks it was cut into: a line that becomes boilerplate after a document was ingested
leaves that document's chunks as they are until its next version is ingested, which is chunked without it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamdedup.core.messages import BoilerplateUpdate, LineDecision, LineUpdate, Message, Output
from streamdedup.core.normalize import normalize
from streamdedup.core.state import (
    CollectionMember,
    CollectionRecord,
    LineMark,
    LineRecord,
    PartitionState,
    Table,
)

if TYPE_CHECKING:
    from streamdedup.core.stages.context import StageContext

__all__ = ["CollectionStage", "collection_key", "line_hash", "line_key"]


def line_hash(normalized_line: str) -> str:
    """Return the key of a normalized line."""
    return hashlib.blake2b(normalized_line.encode("utf-8"), digest_size=8).hexdigest()


def collection_key(collection: str) -> str:
    """Return the state key of a collection's record."""
    return f"c\x00{collection}"


def line_key(collection: str, hashed: str) -> str:
    """Return the state key of a line's count in a collection."""
    return f"l\x00{collection}\x00{hashed}"


class CollectionStage:
    """Handler of the ``collection`` stage."""

    name = "collection"

    def __init__(self, context: StageContext) -> None:
        self._params = context.params
        self._allow = {normalize(line) for line in context.params.boilerplate_allow}

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of line updates for one partition; announce changed boilerplate lists."""
        collections = Table(state, CollectionRecord)
        lines = Table(state, LineRecord)
        members = Table(state, CollectionMember)
        updates = [m for m in messages if isinstance(m, LineUpdate)]
        members.prefetch([f"m\x00{m.collection}\x00{m.source_id}" for m in updates])
        keys = {line_key(m.collection, hashed): None for m in updates for hashed, _ in m.added}
        keys.update((line_key(m.collection, hashed), None) for m in updates for hashed in m.removed)
        lines.prefetch(list(keys))
        touched: dict[str, set[str]] = {}
        for message in messages:
            if isinstance(message, LineDecision):
                record = collections.get_or_new(collection_key(message.collection))
                hashed = line_hash(message.line)
                known = record.decided.get(hashed)
                if known is None or message.version > known.version:
                    record.decided[hashed] = LineMark(message.kind, message.version, message.line)
                    collections.mark(collection_key(message.collection))
                    touched.setdefault(message.collection, set()).add(hashed)
                continue
            if not isinstance(message, LineUpdate):  # pragma: no cover - routing guarantees the type
                raise TypeError(f"collection stage cannot handle {type(message).__name__}")
            member_key = f"m\x00{message.collection}\x00{message.source_id}"
            member = members.get_or_new(member_key)
            if message.version <= member.version:
                continue  # a duplicate or an older version
            record = collections.get_or_new(collection_key(message.collection))
            record.docs += int(message.counted) - int(member.counted)
            member.version, member.counted = message.version, message.counted
            members.mark(member_key)
            collections.mark(collection_key(message.collection))
            changed = touched.setdefault(message.collection, set())
            for hashed, text in message.added:
                key = line_key(message.collection, hashed)
                line = lines.get_or_new(key)
                line.count += 1
                line.text = text
                lines.mark(key)
                changed.add(hashed)
            for hashed in message.removed:
                key = line_key(message.collection, hashed)
                found = lines.get(key)
                if found is None:
                    continue
                found.count -= 1
                if found.count <= 0:
                    lines.delete(key)
                else:
                    lines.mark(key)
                changed.add(hashed)
        out: list[Message | Output] = []
        for collection, changed in touched.items():
            record = collections.get_or_new(collection_key(collection))
            if self._reevaluate(record, collection, changed | set(record.boilerplate), lines):
                record.seq += 1
                out.append(
                    BoilerplateUpdate(collection, record.seq, dict(sorted(record.boilerplate.items())))
                )
        collections.flush()
        lines.flush()
        members.flush()
        return out

    def _reevaluate(
        self, record: CollectionRecord, collection: str, candidates: set[str], lines: Table[LineRecord]
    ) -> bool:
        params = self._params
        enabled = params.boilerplate_min_docs > 0 and record.docs >= params.boilerplate_min_docs
        threshold = params.boilerplate_fraction * record.docs
        changed = False
        for hashed in sorted(candidates):
            line = lines.get(line_key(collection, hashed))
            mark = record.decided.get(hashed)
            if mark is not None and mark.kind != "auto":
                boilerplate = mark.kind == "strip"
            else:
                boilerplate = (
                    enabled and line is not None and line.count >= threshold and line.text not in self._allow
                )
            if boilerplate and hashed not in record.boilerplate:
                record.boilerplate[hashed] = line.text if line is not None else mark.text  # type: ignore[union-attr]
                changed = True
            elif not boilerplate and hashed in record.boilerplate:
                del record.boilerplate[hashed]
                changed = True
        return changed
