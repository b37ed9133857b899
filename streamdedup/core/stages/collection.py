"""Stage ``collection``, keyed by collection: which normalized lines are boilerplate there (design §3), and which
member of each lineage of the collection is the newest (:mod:`.lineages`).

Sources report the lines each version adds and removes. The stage counts, per collection, the documents and the
documents containing each line; once a collection has ``boilerplate_min_docs`` documents, a line found in at
least ``boilerplate_fraction`` of them is boilerplate, unless the allow-list names it. A reviewer's decision
about a line overrides the counts: ``allow`` keeps it, ``strip`` strips it, ``auto`` gives it back to them. Every
change of the list is sent to every partition of the ``source`` stage, which strips those lines before chunking
from then on.

A document keeps the chunks it was cut into: a line that becomes boilerplate after a document was ingested
leaves that document's chunks as they are until its next version is ingested, which is chunked without it.

The counting of a batch's line updates is :func:`count_in_python`, or its compiled twin ``count_lines``
(``native/src/lines.rs``) where the kernels are compiled (:mod:`streamdedup.core.kernels`); the tests compare them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from streamdedup.core import kernels
from streamdedup.core.messages import (
    BoilerplateUpdate,
    LineageMember,
    LineDecision,
    LineUpdate,
    Message,
    Output,
)
from streamdedup.core.normalize import normalize
from streamdedup.core.stages.lineages import elect
from streamdedup.core.state import CollectionMember, CollectionRecord, LineMark, LineRecord, unpack_added
from streamdedup.core.tables import PartitionState, Table, reader, write_all

if TYPE_CHECKING:
    from streamdedup.core.stages.context import StageContext

__all__ = ["CollectionStage", "collection_key", "count_in_python", "line_hash", "line_key", "member_key"]


def line_hash(normalized_line: str) -> str:
    """Return the key of a normalized line."""
    return hashlib.blake2b(normalized_line.encode("utf-8"), digest_size=8).hexdigest()


def collection_key(collection: str) -> str:
    """Return the state key of a collection's record."""
    return f"c\x00{collection}"


def line_key(collection: str, hashed: str) -> str:
    """Return the state key of a line's count in a collection."""
    return f"l\x00{collection}\x00{hashed}"


def member_key(collection: str, source_id: str) -> str:
    """Return the state key of the last version of a source that a collection counted."""
    return f"m\x00{collection}\x00{source_id}"


#: A line update: collection, source_id, version, counted, added (packed: ``state.pack_added``), removed hashes.
Update = tuple[str, str, int, bool, bytes, Sequence[str]]
#: A line's count and normalized text, or None once no document holds it.
Line = tuple[int, str] | None
Counted = tuple[list[tuple[str, "bytes | None"]], list[bool], dict[str, int], dict[str, dict[str, Line]]]


class CollectionStage:
    """Handler of the ``collection`` stage."""

    name = "collection"

    def __init__(self, context: StageContext) -> None:
        self._params = context.params
        self._allow = {normalize(line) for line in context.params.boilerplate_allow}

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of line updates, decisions and lineage memberships for one partition; announce changed
        boilerplate lists and lineage statuses."""
        members = [m for m in messages if isinstance(m, LineageMember)]
        if not members:
            return self._count(messages, state)
        out = self._count([m for m in messages if not isinstance(m, LineageMember)], state)
        out.extend(elect(members, state))
        return out

    def _count(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply line updates and decisions; return the changed boilerplate lists."""
        collections = Table(state, CollectionRecord)
        named = [m.collection for m in messages if isinstance(m, (LineDecision, LineUpdate))]
        collections.prefetch([collection_key(c) for c in dict.fromkeys(named)])
        # Decisions change a collection's reviewed lines, updates its counts: the two commute, so decisions are
        # applied first and the updates of the batch are counted in one call. Collections are re-evaluated in the
        # order of the first message that changed them.
        decided: dict[str, set[str]] = {}
        changed_by: list[str | None] = []
        updates: list[Update] = []
        for message in messages:
            if isinstance(message, LineDecision):
                record = collections.get_or_new(collection_key(message.collection))
                hashed = line_hash(message.line)
                known = record.decided.get(hashed)
                if known is None or message.version > known.version:
                    record.decided[hashed] = LineMark(message.kind, message.version, message.line)
                    collections.mark(collection_key(message.collection))
                    decided.setdefault(message.collection, set()).add(hashed)
                    changed_by.append(message.collection)
                else:
                    changed_by.append(None)
            elif isinstance(message, LineUpdate):
                updates.append(
                    (message.collection, message.source_id, message.version, message.counted, message.added,
                     message.removed)
                )  # fmt: skip
                changed_by.append(message.collection)
            else:  # pragma: no cover - routing guarantees the types above
                raise TypeError(f"collection stage cannot handle {type(message).__name__}")
        found: dict[str, dict[str, Line]] = {}
        if updates:
            records = {u[0]: collections.get(collection_key(u[0])) for u in updates}
            docs = {c: r.docs for c, r in records.items() if r is not None}
            watch = {c: {*r.boilerplate, *r.decided} for c, r in records.items() if r is not None}
            compiled = kernels.native()
            count = count_in_python if compiled is None else compiled.count_lines
            writes, applied, totals, found = count(
                updates, reader(state), docs, watch, self._params.boilerplate_min_docs,
                self._params.boilerplate_fraction,
            )  # fmt: skip
            write_all(state, writes)
            for collection, total in totals.items():
                collections.get_or_new(collection_key(collection)).docs = total
                collections.mark(collection_key(collection))
            verdicts = iter(applied)
            changed_by = [
                c if not isinstance(m, LineUpdate) or next(verdicts) else None
                for c, m in zip(changed_by, messages, strict=True)
            ]
        out: list[Message | Output] = []
        read = reader(state)
        for collection in dict.fromkeys(c for c in changed_by if c is not None):
            record = collections.get_or_new(collection_key(collection))
            lines = found.get(collection, {})
            # The other candidates are lines the batch did not change: their counts as stored, in one read.
            others = sorted((decided.get(collection, set()) | record.boilerplate.keys()) - lines.keys())
            stored = read([line_key(collection, hashed) for hashed in others])
            lines = {**lines, **{h: _line(raw) for h, raw in zip(others, stored, strict=True)}}
            if self._reevaluate(record, lines):
                record.seq += 1
                out.append(
                    BoilerplateUpdate(collection, record.seq, dict(sorted(record.boilerplate.items())))
                )
        collections.flush()
        return out

    def _reevaluate(self, record: CollectionRecord, lines: Mapping[str, Line]) -> bool:
        """Decide again whether each candidate line in ``lines`` (by hash: count and text, or None) is boilerplate."""
        params = self._params
        enabled = params.boilerplate_min_docs > 0 and record.docs >= params.boilerplate_min_docs
        threshold = params.boilerplate_fraction * record.docs
        changed = False
        for hashed in sorted(lines):
            line = lines[hashed]
            mark = record.decided.get(hashed)
            if mark is not None and mark.kind != "auto":
                boilerplate = mark.kind == "strip"
            else:
                boilerplate = (
                    enabled and line is not None and line[0] >= threshold and line[1] not in self._allow
                )
            if boilerplate and hashed not in record.boilerplate:
                record.boilerplate[hashed] = line[1] if line is not None else mark.text  # type: ignore[union-attr]
                changed = True
            elif not boilerplate and hashed in record.boilerplate:
                del record.boilerplate[hashed]
                changed = True
        return changed


_LINE = msgspec.msgpack.Decoder(LineRecord)
_MEMBER = msgspec.msgpack.Decoder(CollectionMember)
_ENCODER = msgspec.msgpack.Encoder()


def _line(raw: bytes | None) -> Line:
    if raw is None:
        return None
    line = _LINE.decode(raw)
    return (line.count, line.text)


def count_in_python(
    updates: Sequence[Update],
    read: Callable[[list[str]], Sequence[bytes | None]],
    docs: Mapping[str, int],
    watch: Mapping[str, set[str]],
    min_docs: int,
    fraction: float,
) -> Counted:
    """The collection stage's counting in Python (the compiled ``count_lines``' twin, which the tests compare it with).

    It applies ``updates`` in order to their sources' member records and their lines' counts, read with one call
    of ``read`` (member keys, then line keys, each once). An update applies only if its version is newer than the
    member's. It returns the changed records in key order (None once gone), whether each update applied, the
    document count of each collection an update applied to (from ``docs``), and per such collection the changed
    lines that may be boilerplate now: those in ``watch``, and, once the collection has ``min_docs`` documents
    (``min_docs`` positive), those in at least ``fraction`` of them.
    """
    member_keys = [member_key(u[0], u[1]) for u in updates]
    added_lines = [unpack_added(u[4]) for u in updates]
    line_keys = [
        line_key(u[0], h)
        for u, added in zip(updates, added_lines, strict=True)
        for h in (*(a[0] for a in added), *u[5])
    ]
    keys = list(dict.fromkeys([*member_keys, *line_keys]))
    stored = dict(zip(keys, read(keys), strict=True))
    members: dict[str, CollectionMember | None] = {}
    lines: dict[str, LineRecord | None] = {}
    changed: set[str] = set()
    applied: list[bool] = []
    totals: dict[str, int] = {}
    touched: dict[str, dict[str, str]] = {}  # collection -> line hash -> line key, in order of change

    def line_of(key: str) -> LineRecord | None:
        if key not in lines:
            raw = stored[key]
            lines[key] = None if raw is None else _LINE.decode(raw)
        return lines[key]

    for (collection, _, version, counted, _, removed), key, added in zip(
        updates, member_keys, added_lines, strict=True
    ):
        if key not in members:
            raw = stored[key]
            members[key] = None if raw is None else _MEMBER.decode(raw)
        member = members[key] or CollectionMember()
        if version <= member.version:
            applied.append(False)
            continue
        applied.append(True)
        total = totals.get(collection, docs.get(collection, 0))
        totals[collection] = total + int(counted) - int(member.counted)
        members[key] = CollectionMember(version=version, counted=counted)
        changed.add(key)
        changes = touched.setdefault(collection, {})
        for hashed, text in added:
            at = line_key(collection, hashed)
            line = line_of(at)
            lines[at] = LineRecord(count=(0 if line is None else line.count) + 1, text=text)
            changed.add(at)
            changes.setdefault(hashed, at)
        for hashed in removed:
            at = line_key(collection, hashed)
            line = line_of(at)
            if line is None:
                continue
            lines[at] = LineRecord(count=line.count - 1, text=line.text) if line.count > 1 else None
            changed.add(at)
            changes.setdefault(hashed, at)
    writes: list[tuple[str, bytes | None]] = []
    for key in sorted(changed):
        record = members[key] if key in members else lines[key]
        writes.append((key, None if record is None else _ENCODER.encode(record)))
    return writes, applied, totals, _candidates(touched, totals, lines, watch, min_docs, fraction)


def _candidates(
    touched: dict[str, dict[str, str]],
    totals: dict[str, int],
    lines: dict[str, LineRecord | None],
    watch: Mapping[str, set[str]],
    min_docs: int,
    fraction: float,
) -> dict[str, dict[str, Line]]:
    """Per collection, the changed lines (``touched``: line hash -> line key) that may be boilerplate now."""
    found: dict[str, dict[str, Line]] = {}
    for collection, changes in touched.items():
        total = totals[collection]
        enabled = min_docs > 0 and total >= min_docs
        threshold = fraction * total
        watched = watch.get(collection, set())
        found[collection] = {}
        for hashed, at in changes.items():
            line = lines[at]
            if hashed in watched or (enabled and line is not None and line.count >= threshold):
                found[collection][hashed] = None if line is None else (line.count, line.text)
    return found
