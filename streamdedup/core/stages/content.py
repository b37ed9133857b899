"""Stage ``content``, keyed by content hash: one distinct normalized text, its sources and its cluster.

A content comes alive with its first live source position and dies with its last. While alive it

1. keeps which sources hold it (:mod:`~streamdedup.core.stages.content_sources`);
2. joins its LSH bands (long enough texts only) and asks the best candidates the bands name to verify the pair
   with the exact shingle Jaccard and the fact guard; verified pairs become *neighbours* on both sides
   (:mod:`~streamdedup.core.stages.content_discovery`);
3. decides, once discovery is complete, whether it is a canonical or a member of a better-ranked canonical
   (:mod:`streamdedup.core.clustering`), tells its neighbours, its canonical and its sources, and as a canonical
   writes its chunk to ``canonical-chunks`` (:mod:`~streamdedup.core.stages.content_settle`).

A batch is applied message by message, and each content it touched is settled once at the end. Every message
carries the sender's whole current state with a sequence number, so duplicates and stale messages are ignored and
the outcome does not depend on delivery order.

:class:`ContentStageInPython` applies a batch with the modules named above; where the package's kernels are
compiled (:mod:`streamdedup.core.kernels`), the engine applies it with their ``ContentKernel``
(``native/src/content/``) instead, which reads and writes the same records. The tests compare the two message by
message and record by record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from streamdedup.core import kernels
from streamdedup.core.facts import describe_fact_difference, fact_tokens
from streamdedup.core.messages import (
    CONTENT_ID_CHARS,
    BandAck,
    BandJoin,
    BandLeave,
    Info,
    MemberReport,
    Message,
    NeighborUpdate,
    Output,
    PairDecision,
    PairMark,
    RefUpdate,
    SourceRef,
    SourceRefs,
    SourceStatuses,
    VerifyRequest,
    VerifyResult,
    content_id,
    unpack_refs,
)
from streamdedup.core.model import Rank, SourceAttrs, format_timestamp
from streamdedup.core.normalize import normalize
from streamdedup.core.records import audit_value
from streamdedup.core.sketches import agreements, dismiss_below, estimate
from streamdedup.core.stages.content_discovery import Discovery
from streamdedup.core.stages.content_settle import Settlement
from streamdedup.core.stages.content_sources import SourcePositions
from streamdedup.core.stages.content_work import Features, Work
from streamdedup.core.stages.context import StageContext
from streamdedup.core.state import ContentIds, ContentRecord, RefEntry, id_key, ref_key
from streamdedup.core.tables import PartitionState, Table, reader, write_all

__all__ = ["ContentStage", "ContentStageInPython"]


_DEFAULT_JACCARD = ContentRecord().jaccard


def _by_id(message: Message) -> bool:
    """Whether ``message`` is a verify request naming its receiver by content id (a band's candidate)."""
    return isinstance(message, VerifyRequest) and len(message.content_hash) == CONTENT_ID_CHARS


class ContentStage:
    """Handler of the ``content`` stage: the compiled kernel where the kernels are compiled, else
    :class:`ContentStageInPython`."""

    name = "content"

    def __init__(self, context: StageContext) -> None:
        compiled = kernels.native()
        self._in_python: ContentStageInPython | None = None
        if compiled is None or context.scheme.compiled is None:
            self._in_python = ContentStageInPython(context)
            return
        params = context.params
        classes = (
            RefUpdate, SourceRefs, BandAck, VerifyRequest, VerifyResult, PairDecision, NeighborUpdate, SourceStatuses,
            BandJoin, BandLeave, Output, Info, Rank, PairMark, MemberReport, SourceRef, SourceAttrs, msgspec.Raw,
        )  # fmt: skip
        self._kernel = compiled.ContentKernel(
            {kind.__name__: kind for kind in classes},
            {
                "threshold": params.threshold,
                "min_shingles": params.min_shingles,
                "max_candidates": params.max_candidates,
                "max_chunk_sources": params.max_chunk_sources,
                "shingle_size": params.shingle_size,
                "num_perm": params.num_perm,
                "bands": params.bands,
                "rows": params.rows,
                "dismiss_below": dismiss_below(params.threshold, params.num_perm),
            },
            list(context.policy.criteria),
            {
                "normalize": normalize,
                "fact_tokens": lambda norm: tuple(fact_tokens(norm)),
                "describe_fact_difference": describe_fact_difference,
                "format_timestamp": format_timestamp,
            },
            context.scheme.compiled,
        )

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of messages for one partition and emit what follows from them."""
        if self._in_python is not None:
            return self._in_python.handle(messages, state)
        writes, out = self._kernel.apply(list(messages), reader(state), state.scan)
        write_all(state, writes)
        return out  # type: ignore[no-any-return]


class ContentStageInPython:
    """Handler of the ``content`` stage in Python (the compiled ``ContentKernel``'s twin)."""

    name = "content"

    def __init__(self, context: StageContext) -> None:
        self._params = context.params
        self._features = Features(context.params.shingle_size)
        self.positions = SourcePositions(context)
        self.discovery = Discovery(context, self._features)
        self.settlement = Settlement(context, self.positions, self.discovery)
        discovery = self.discovery
        self._appliers: dict[type, Callable[[Work, Message, list[Message | Output]], None]] = {
            RefUpdate: self._on_ref_update,  # type: ignore[dict-item]
            BandAck: lambda work, message, out: discovery.on_band_answer(work, message),  # type: ignore[arg-type]
            VerifyRequest: discovery.on_verify_request,  # type: ignore[dict-item]
            VerifyResult: discovery.on_verify_result,  # type: ignore[dict-item]
            PairDecision: discovery.on_decision,  # type: ignore[dict-item]
            NeighborUpdate: lambda work, message, out: discovery.on_neighbor_update(work, message),  # type: ignore[arg-type]
        }

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of messages for one partition and emit what follows from them."""
        out: list[Message | Output] = []
        if any(isinstance(m, SourceRefs) for m in messages):
            messages = [r for m in messages for r in (unpack_refs(m) if isinstance(m, SourceRefs) else (m,))]
        ids = Table(state, ContentIds)
        if any(_by_id(m) for m in messages):
            messages = self._resolve(messages, ids, out)
        table = Table(state, ContentRecord)
        refs = Table(state, RefEntry)
        self._prefetch(messages, table, refs)
        works: dict[str, Work] = {}
        only_asked: set[str] = set()  # contents this batch only asked to verify pairs
        appliers = self._appliers
        for message in messages:
            key = message.content_hash  # type: ignore[union-attr]
            work = works.get(key)
            if work is None:
                record = table.get_or_new(key)
                work = Work(key, record, record.role, record.target, record.canonical_ref, refs, state)
                works[key] = work
                if type(message) is VerifyRequest:
                    only_asked.add(key)
            elif type(message) is not VerifyRequest:
                only_asked.discard(key)
            applier = appliers.get(type(message))
            if applier is None:  # pragma: no cover - routing guarantees the types above
                raise TypeError(f"content stage cannot handle {type(message).__name__}")
            applier(work, message, out)
        born = [w for w in works.values() if w.born]
        if born:
            self.discovery.start(born, out)
            self._index([w for w in born if w.record.indexed], ids)
        settlement = self.settlement
        for key, work in works.items():
            if key in only_asked and settlement.answer_unchanged(work, out):
                continue  # nothing changed: not settled again, not written back
            settlement.settle(work, out)
            if work.record.jaccard == _DEFAULT_JACCARD:
                # msgspec leaves out a default by identity: the same bytes as the compiled stage's record.
                work.record.jaccard = _DEFAULT_JACCARD
            table.mark(key)
        settlement.tell(out)
        table.flush()
        refs.flush()
        ids.flush()
        self._features.clear()
        return out

    @staticmethod
    def _prefetch(messages: Sequence[Message], table: Table[ContentRecord], refs: Table[RefEntry]) -> None:
        """Read the records of a batch's contents, and the refs it will need, with one bulk read each."""
        table.prefetch(list(dict.fromkeys(m.content_hash for m in messages)))  # type: ignore[union-attr]
        # The refs that change, and those of the canonical positions they may move from (a swap reads them).
        wanted = {ref_key(m.content_hash, m.source_id): None for m in messages if isinstance(m, RefUpdate)}
        for m in messages:
            if isinstance(m, RefUpdate) and (found := table.cached(m.content_hash)) and found.canonical_ref:
                wanted[ref_key(m.content_hash, found.canonical_ref[0])] = None
        refs.prefetch(list(wanted))

    def _resolve(
        self, messages: Sequence[Message], ids: Table[ContentIds], out: list[Message | Output]
    ) -> list[Message]:
        """Address each verify request that names a band candidate by content id to the contents carrying it.

        An id no content here carries (none joined a band with it) is answered at once as a dead content, and so
        is a content whose sketch agrees with the sender's on too few fields for the pair to reach the threshold
        (unless a reviewer's decision about the pair came with the request): its record is not even read.
        """
        ids.prefetch(list(dict.fromkeys(id_key(m.content_hash) for m in messages if _by_id(m))))  # type: ignore[union-attr]
        fields = self._params.num_perm
        needed = dismiss_below(self._params.threshold, fields)
        resolved: list[Message] = []
        for message in messages:
            if not isinstance(message, VerifyRequest) or not _by_id(message):
                resolved.append(message)
                continue
            found = ids.get(id_key(message.content_hash))
            if found is None or not found.hashes:
                dead = Info(0, "dead")
                out.append(
                    VerifyResult(message.sender, message.content_hash, message.epoch, 0.0, False, dead)
                )
                continue
            theirs = message.sketch if message.decision is None else b""
            for index, content_hash in enumerate(found.hashes):
                mine = found.sketches[index] if theirs and index < len(found.sketches) else b""
                if (
                    mine
                    and len(mine) == len(theirs)
                    and (agreed := agreements(mine, theirs, fields)) < needed
                ):
                    # Far below the threshold: no edge, whatever this content's state (its Info is not read).
                    unread = Info(0, "pending")
                    out.append(
                        VerifyResult(
                            message.sender,
                            content_hash,
                            message.epoch,
                            estimate(agreed, fields),
                            False,
                            unread,
                        )
                    )
                else:
                    resolved.append(msgspec.structs.replace(message, content_hash=content_hash))
        return resolved

    @staticmethod
    def _index(works: list[Work], ids: Table[ContentIds]) -> None:
        """List contents that joined their bands under their content id, with their sketches (kept after death)."""
        pairs = [(id_key(content_id(work.key)), work) for work in works]
        ids.prefetch(list(dict.fromkeys(index_key for index_key, _ in pairs)))
        for index_key, work in pairs:
            entry = ids.get_or_new(index_key)
            if len(entry.sketches) < len(entry.hashes):  # written before sketches were kept
                entry.sketches.extend(b"" for _ in range(len(entry.hashes) - len(entry.sketches)))
            if work.key not in entry.hashes:
                entry.hashes.append(work.key)
                entry.sketches.append(work.record.sketch)
                ids.mark(index_key)
            elif not entry.sketches[at := entry.hashes.index(work.key)]:
                entry.sketches[at] = work.record.sketch
                ids.mark(index_key)

    def _on_ref_update(self, work: Work, message: RefUpdate, out: list[Message | Output]) -> None:
        """Apply a source's positions; the content comes alive with its first live one and dies with its last."""
        if not self.positions.apply(work, message):
            return
        record = work.record
        alive = record.positions > 0 and record.has_text
        if alive and not record.alive:
            self._birth(work)
        elif record.alive and not alive:
            self._death(work, out)

    def _birth(self, work: Work) -> None:
        record = work.record
        record.alive = True
        record.epoch += 1
        record.role, record.target, record.jaccard = "pending", "", 1.0
        record.candidates, record.conflict = {}, None
        work.was_role, work.was_target, work.was_ref = "pending", "", None
        work.born = True
        # A reviewer merged this text with another: verify the pair again in this life, bands or not.
        work.decided_verify.extend(h for h, mark in sorted(record.decisions.items()) if mark.kind == "merge")

    def _death(self, work: Work, out: list[Message | Output]) -> None:
        """Leave the bands, retract the chunk, tell the neighbours; keep only what a later life needs."""
        record = work.record
        key = work.key
        if record.indexed:
            out.append(self.discovery.leave(key, record))
        if record.role == "canonical":
            out.append(Output("audit", key, audit_value(key, "retract", "no live source")))
        if record.record_digest:
            out.append(Output("canonical-chunks", key, None))
        record.seq += 1
        dead = Info(record.seq, "dead")
        for other in sorted(record.neighbors):
            out.append(NeighborUpdate(other, key, dead))
        keep = {
            "seq": record.seq,
            "epoch": record.epoch,
            "revision": record.revision,
            "has_text": record.has_text,
            "text": record.text,
            "norm_stored": record.norm_stored,
            "length": record.length,
            "decisions": record.decisions,
            "raised": record.raised,
        }
        fresh = ContentRecord(**keep, role="dead", sent_info=dead)  # type: ignore[arg-type]
        for name in fresh.__struct_fields__:
            setattr(record, name, getattr(fresh, name))
        work.born = False
        work.was_role, work.was_target, work.was_ref = "dead", "", None
        work.to_verify.clear()
        work.decided_verify.clear()
        work.new_neighbors.clear()
