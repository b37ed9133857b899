"""The content stage's source positions: which sources hold a content, counted per copy in O(1).

Each source that holds the content has one :class:`RefEntry` (its positions, attributes and any original texts
that differ from the content's). The content record keeps what every copy needs without reading the others: the
number of live positions, the live sources per principal (its readers), and ``top``, the first
``max_chunk_sources`` positions in the canonical policy's order (``top[0]`` is the canonical position). All refs
are read only when ``top`` can no longer be known otherwise.
"""

from __future__ import annotations

import msgspec

from streamdedup.core.messages import RefUpdate, SourceRef
from streamdedup.core.stages.content_work import Work
from streamdedup.core.stages.context import StageContext
from streamdedup.core.state import ContentRecord, RefEntry, TopRef, ref_key, ref_prefix

__all__ = ["SourcePositions", "source_refs"]

_ref_decoder = msgspec.msgpack.Decoder(RefEntry)


class SourcePositions:
    """Applies source updates to a content's refs, counts and first positions."""

    def __init__(self, context: StageContext) -> None:
        self._policy = context.policy
        self._limit = context.params.max_chunk_sources

    def apply(self, work: Work, message: RefUpdate) -> bool:
        """Apply a source's new positions (empty: it no longer holds the content); False for an older version."""
        record = work.record
        key = ref_key(work.key, message.source_id)
        entry = work.refs.get(key)
        if message.texts and not record.has_text:
            # The content's texts, stored once for every copy (taken from any version: they never change).
            record.set_texts(message.texts[0], message.norm)
        if entry is not None and (message.version, message.attrs_seq) <= (entry.version, entry.attrs_seq):
            return False
        if message.positions:
            if message.attrs_only:
                same_positions = entry is not None and entry.positions == message.positions
                texts = entry.texts if same_positions and entry is not None else ()
            else:
                texts = () if all(t == record.text for t in message.texts) else message.texts
            new = RefEntry(
                version=message.version,
                positions=message.positions,
                texts=texts,
                attrs=message.attrs,
                attrs_seq=message.attrs_seq,
            )
            work.answer_sources.add(message.source_id)
        else:
            new = RefEntry(version=message.version, attrs_seq=message.attrs_seq)
        work.refs.put(key, new)
        complete = len(record.top) == record.positions
        if entry is not None and entry.positions and entry.attrs is not None:
            _count(record, entry, -1)
        if new.positions:
            _count(record, new, +1)
        self._place(work, message.source_id, new, complete)
        return True

    def ensure_top(self, work: Work) -> None:
        """Read all refs again if the first positions cannot be known from the record alone."""
        record = work.record
        if work.refill or len(record.top) != min(self._limit, record.positions):
            self._refill(work)

    def live(self, work: Work) -> dict[str, RefEntry]:
        """Return every live source of the content with its entry (reads all of them: for rare events only)."""
        work.refs.flush()
        decode = _ref_decoder.decode
        prefix = ref_prefix(work.key)
        found = {}
        for key, raw in work.state.scan(prefix):
            entry = decode(raw)
            if entry.positions and entry.attrs is not None:
                found[key[len(prefix) :]] = entry
        return found

    def _order(self, ref: TopRef) -> tuple[object, ...]:
        return self._policy.ref_order(ref.source_id, ref.position, ref.attrs)

    def _place(self, work: Work, source_id: str, entry: RefEntry, complete: bool) -> None:
        """Keep ``record.top`` the first live positions in policy order after ``source_id``'s change."""
        record = work.record
        kept = [t for t in record.top if t.source_id != source_id]
        fresh = [
            TopRef(source_id, p, entry.attrs, entry.texts[i] if entry.texts else "")
            for i, p in enumerate(entry.positions)
            if entry.attrs is not None
        ]
        if complete or len(kept) == len(record.top):
            # Every position was listed, or none of this source's were: the listed ones and the source's new
            # ones hold the first positions of all.
            merged = sorted(kept + fresh, key=self._order)
        else:
            # Positions of this source left the list: the others listed are still the first of theirs, and a new
            # position of this source is known to belong only if it sorts before the last of them.
            bound = self._order(kept[-1]) if kept else None
            merged = sorted(
                kept + [t for t in fresh if bound is not None and self._order(t) < bound], key=self._order
            )
            if len(merged) < min(self._limit, record.positions):
                work.refill = True
        record.top = merged[: self._limit]

    def _refill(self, work: Work) -> None:
        """Rebuild the counts and the first positions from all the content's refs."""
        record = work.record
        tops: list[TopRef] = []
        record.positions, record.principals = 0, {}
        for source_id, entry in self.live(work).items():
            _count(record, entry, +1)
            tops.extend(
                TopRef(source_id, p, entry.attrs, entry.texts[i] if entry.texts else "")  # type: ignore[arg-type]
                for i, p in enumerate(entry.positions)
            )
        tops.sort(key=self._order)
        record.top = tops[: self._limit]
        work.refill = False


def _count(record: ContentRecord, entry: RefEntry, sign: int) -> None:
    """Add (``sign`` 1) or remove (-1) a live ref's positions and readers in the content's counts."""
    record.positions += sign * len(entry.positions)
    principals = record.principals
    # In the ACL's order (each principal once), as the compiled stage counts: the same bytes for the same record.
    for principal in dict.fromkeys(entry.attrs.acl) if entry.attrs is not None else ():
        count = principals.get(principal, 0) + sign
        if count > 0:
            principals[principal] = count
        else:
            principals.pop(principal, None)


def source_refs(top: list[TopRef]) -> tuple[SourceRef, ...]:
    """Return the first positions as the :class:`SourceRef` of messages and records."""
    return tuple(SourceRef(t.source_id, t.position, t.attrs) for t in top)
