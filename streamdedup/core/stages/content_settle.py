"""The content stage's settling: once a batch is applied, a content decides and says what changed.

For each content the batch touched, :meth:`Settlement.settle`

1. finishes discovery's part (adopts late edges, chooses candidates, raises a conflict flag when due);
2. decides, when discovery is complete, whether the content is a canonical or a member of a better-ranked
   canonical (:func:`streamdedup.core.clustering.decide`), with the audit and review records that go with it;
3. tells its neighbours its new state (its canonical, its member report too), and its sources their chunk;
4. as a canonical, writes its ``canonical-chunks`` record, when its value changed.
"""

from __future__ import annotations

import hashlib

import msgspec

from streamdedup.core.clustering import decide, split_reason
from streamdedup.core.messages import (
    Info,
    MemberReport,
    Message,
    NeighborUpdate,
    Output,
    SourceStatuses,
    VerifyResult,
    content_id,
)
from streamdedup.core.model import Rank
from streamdedup.core.records import audit_value, chunk_value, review_key, review_value
from streamdedup.core.stages.content_discovery import Discovery, answer_result
from streamdedup.core.stages.content_sources import SourcePositions, source_refs
from streamdedup.core.stages.content_work import Work
from streamdedup.core.stages.context import StageContext
from streamdedup.core.state import ChunkStatus, RefEntry, StatusEntry, TopRef, pack_statuses, ref_key

__all__ = ["Settlement"]

# A chunk value is built in one fixed order, so its encoding is deterministic without sorting keys.
_digest_encoder = msgspec.msgpack.Encoder()


class Settlement:
    """Settles each content a batch touched."""

    def __init__(self, context: StageContext, positions: SourcePositions, discovery: Discovery) -> None:
        self._params = context.params
        self._policy = context.policy
        self._positions = positions
        self._discovery = discovery
        self._told: dict[str, list[StatusEntry]] = {}  # what the batch tells each source, sent when it ends

    def tell(self, out: list[Message | Output]) -> None:
        """Send each source the batch told something its list of statuses (sources in order, each list packed)."""
        told, self._told = self._told, {}
        out.extend(SourceStatuses(source_id, pack_statuses(told[source_id])) for source_id in sorted(told))

    def settle(self, work: Work, out: list[Message | Output]) -> None:
        """Settle one content after its batch (see the module's steps)."""
        record, key = work.record, work.key
        if not record.alive:
            dead = Info(record.seq, "dead")
            unanswered = [(a.sender, a.epoch, a.decision) for a in work.answers]
            unanswered += [(m.sender, m.epoch, record.decisions.get(m.sender)) for m in work.asked_while_dead]
            for sender, epoch, decision in unanswered:
                out.append(VerifyResult(sender, key, epoch, 0.0, False, dead, None, "", decision))
            for other in sorted(set(work.late_edges) | work.strangers):
                out.append(NeighborUpdate(other, key, dead))
            return
        discovery = self._discovery
        for other, edge in sorted(work.late_edges.items()):
            discovery.remember(work, other, edge.jaccard, edge.info, edge.report)
        for asked in work.asked_while_dead:  # it came alive later in the batch: verify now
            discovery.on_verify_request(work, asked, out)
        work.asked_while_dead.clear()
        self._positions.ensure_top(work)
        first = record.top[0]
        best = (first.source_id, first.position, first.attrs)
        rank = self._policy.rank_of(key, record.length, best)
        readers = record.readers()
        owed = discovery.answers(work, rank)
        if record.candidates and not record.pending_bands:
            discovery.choose_candidates(work)
        # A decided verification whose text a band candidate's request reaches anyway is not sent twice.
        asking = set(work.to_verify)
        work.decided_verify = [h for h in dict.fromkeys(work.decided_verify) if content_id(h) not in asking]
        decided = [content_id(h) for h in work.decided_verify]
        record.pending_verify.extend(work.to_verify)
        record.pending_verify.extend(decided)
        record.checked.extend(work.to_verify)
        record.checked.extend(h for h in decided if h not in record.checked)
        discovery.flag_conflict(work, out)
        if not record.pending_bands and not record.pending_verify:
            self._decide(work, rank, readers, out)
        canonical_ref = (best[0], best[1]) if record.role == "canonical" else None
        record.canonical_ref = canonical_ref
        if canonical_ref is not None and work.was_role == "canonical" and work.was_ref != canonical_ref:
            out.append(self._source_swap(work, work.was_ref, first))
        info = Info(record.seq, record.role, rank, readers, record.target)
        report = (
            MemberReport(record.jaccard, source_refs(record.top), record.positions, rank)
            if record.role == "member"
            else None
        )
        status = ChunkStatus(
            key if record.role == "canonical" else record.target,
            "near" if record.role == "member" else "canonical",
            record.jaccard,
            canonical_ref,
        )
        info_changed = record.sent_info is None or _differs(record.sent_info, info)
        report_changed = report != record.sent_report
        status_changed = status != record.sent_status
        if info_changed or report_changed or status_changed:
            record.seq += 1
            info = msgspec.structs.replace(info, seq=record.seq)
        self._tell_neighbors(work, info, report, info_changed, report_changed, out)
        self._tell_sources(work, status, status_changed, out)
        self._emit_chunk(work, readers, out)
        discovery.ask_and_answer(work, info, report, owed, out)

    def answer_unchanged(self, work: Work, out: list[Message | Output]) -> bool:
        """Answer verify requests that changed nothing with the state last settled; False to settle as usual.

        For a content that a batch only asked to verify pairs. If it is settled (alive, its discovery complete)
        and none of the pairs is an edge, a conflict or under a reviewer's decision, ``settle`` would decide the
        same, send nothing but the answers and write the same record. Most band candidates are such pairs.
        """
        record = work.record
        info = record.sent_info
        if (
            not record.alive
            or info is None
            or info.seq != record.seq
            or not record.top
            or record.pending_bands
            or record.pending_verify
        ):
            return False
        answers = work.answers
        if any(a.edge or a.conflict is not None or a.decision is not None for a in answers):
            return False
        report = record.sent_report
        target = record.target if report is not None else ""
        for answer in answers:
            out.append(answer_result(work, answer, info, None, report if answer.sender == target else None))
        return True

    def _tell_neighbors(
        self,
        work: Work,
        info: Info,
        report: MemberReport | None,
        info_changed: bool,
        report_changed: bool,
        out: list[Message | Output],
    ) -> None:
        """Tell every neighbour a changed state, the canonical a changed report, and new neighbours either way."""
        record, key = work.record, work.key
        told: set[str] = set()
        if info_changed:
            told = set(record.neighbors)
        elif report_changed and record.target:
            told = {record.target}
        told |= work.new_neighbors
        for other in sorted(told):
            if other in record.neighbors:
                out.append(NeighborUpdate(other, key, info, report if other == record.target else None))
        record.sent_info, record.sent_report = info, report

    def _source_swap(self, work: Work, before: tuple[str, int] | None, after: TopRef) -> Output:
        """Audit a new canonical source position among the exact copies of a chunk."""
        key = work.key
        entry = None if before is None else work.refs.get(ref_key(key, before[0]))
        if before is None or entry is None or entry.attrs is None or before[1] not in entry.positions:
            reason = "canonical source removed"
        else:
            old, new = entry.attrs, after.attrs
            reason = self._policy.reason(
                Rank(
                    new.authority,
                    new.modified_at,
                    0,
                    after.source_id,
                    "",
                    new.preferred,
                    bool(new.outdated_by),
                ),
                Rank(old.authority, old.modified_at, 0, before[0], "", old.preferred, bool(old.outdated_by)),
            )
        moved = {"source_id": after.source_id, "position": after.position}
        return Output("audit", key, audit_value(key, "swap", reason, canonical=moved))

    def _decide(self, work: Work, rank: Rank, readers: tuple[str, ...], out: list[Message | Output]) -> None:
        """Place the content in its cluster; flag better canonicals its readers block; audit a changed place."""
        record, key = work.record, work.key
        neighbors = [(h, e.jaccard, e.info) for h, e in sorted(record.neighbors.items())]
        merged = (
            [h for h, mark in record.decisions.items() if mark.kind == "merge"] if record.decisions else ()
        )
        decision = decide(
            rank, readers, neighbors, self._policy, first=record.role == "pending", merged=merged
        )
        if decision is None:
            return
        for other in decision.refused:
            if other in record.flagged:
                continue
            record.flagged.append(other)
            if other not in record.raised:
                record.raised.append(other)
            entry = record.neighbors[other]
            out.append(
                Output(
                    "review",
                    review_key(key, other),
                    review_value(
                        "acl_boundary",
                        {"content_hash": key, "acl": list(readers)},
                        {"content_hash": other, "acl": list(entry.info.readers)},
                        entry.jaccard,
                        "the better-ranked copy is not readable by every reader of the other",
                    ),
                )
            )
        old_role, old_target = work.was_role, work.was_target
        record.role, record.target, record.jaccard = decision.role, decision.target, decision.jaccard  # type: ignore[assignment]
        if (old_role, old_target) == (record.role, record.target):
            return
        near = {"content_hash": key, "jaccard": round(record.jaccard, 6)}
        old_entry = record.neighbors.get(old_target)
        if old_role == "member":
            reason = split_reason(rank, readers, old_entry.info if old_entry else None, self._policy)
            if record.role == "canonical" and old_entry is None:
                out.append(
                    Output("audit", key, audit_value(key, "swap", reason, previous_chunk_id=old_target))
                )
            else:
                out.append(
                    Output("audit", old_target, audit_value(old_target, "split", reason, content_hash=key))
                )
        if record.role == "member":
            target_entry = record.neighbors[record.target]
            target_rank = target_entry.info.rank
            if old_role == "canonical" and target_rank is not None:
                reason = (
                    self._policy.reason(target_rank, rank)
                    if self._policy.better(target_rank, rank)
                    else "merged by a reviewer"
                )
                out.append(
                    Output(
                        "audit",
                        record.target,
                        audit_value(record.target, "swap", reason, previous_chunk_id=key, **near),
                    )
                )
            else:
                out.append(
                    Output("audit", record.target, audit_value(record.target, "merge", "near", **near))
                )

    def _tell_sources(
        self, work: Work, status: ChunkStatus, changed: bool, out: list[Message | Output]
    ) -> None:
        """Send the content's chunk to the sources that need to hear it."""
        record, key = work.record, work.key
        previous, record.sent_status = record.sent_status, status
        if not status.chunk_id:
            return
        live: dict[str, RefEntry]
        if changed and (previous is None or _chunk_of(previous) != _chunk_of(status)):
            # Every live source sees a new chunk or relation.
            if len(record.top) == record.positions:
                listed = {t.source_id for t in record.top}
                live = {s: e for s in listed if (e := work.refs.get(ref_key(key, s))) is not None}
            else:
                live = self._positions.live(work)
        else:
            # Only the sources that sent an update, and, if the canonical position moved, its old and new sources
            # (the rest still see a canonical position that is not theirs, so their copies stay "exact").
            wanted = set(work.answer_sources)
            if changed and previous is not None:
                wanted |= {
                    ref[0] for ref in (previous.canonical_ref, status.canonical_ref) if ref is not None
                }
            live = {s: e for s in wanted if (e := work.refs.get(ref_key(key, s))) is not None and e.positions}
        # As the source keeps it: the content's own hash as "=", the canonical position only if it is that source's.
        chunk_id = "=" if status.chunk_id == key else status.chunk_id
        ref = status.canonical_ref
        for source_id in sorted(live):
            self._told.setdefault(source_id, []).append(
                StatusEntry(
                    key,
                    record.seq,
                    live[source_id].version,
                    chunk_id,
                    status.relation,
                    status.jaccard,
                    ref[1] if ref is not None and ref[0] == source_id else -1,
                )
            )

    def _emit_chunk(self, work: Work, readers: tuple[str, ...], out: list[Message | Output]) -> None:
        """Write the canonical's chunk record if its value changed (a tombstone if it is no longer a canonical)."""
        record, key = work.record, work.key
        if record.role != "canonical" or record.canonical_ref is None:
            if record.record_digest:
                out.append(Output("canonical-chunks", key, None))
                record.record_digest = ""
            return
        first = record.top[0]
        value = chunk_value(
            content_hash=key,
            text=first.text or record.text,
            canonical=record.canonical_ref,
            readers=readers,
            own_refs=record.top,
            own_count=record.positions,
            members=record.members,
            policy=self._policy,
            max_sources=self._params.max_chunk_sources,
        )
        digest = hashlib.blake2b(_digest_encoder.encode(value), digest_size=16).hexdigest()
        if digest == record.record_digest:
            return
        record.record_digest = digest
        record.revision += 1
        out.append(Output("canonical-chunks", key, {**value, "revision": record.revision}))


def _chunk_of(status: ChunkStatus) -> tuple[str, str, float]:
    return (status.chunk_id, status.relation, status.jaccard)


def _differs(a: Info, b: Info) -> bool:
    return (a.role, a.rank, a.readers, a.target) != (b.role, b.rank, b.readers, b.target)
