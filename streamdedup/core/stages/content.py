"""Stage ``content``, keyed by content hash: one distinct normalized text, its sources and its cluster.

A content comes alive with its first live source position and dies with its last. While alive it

1. joins its LSH bands (long enough texts only) and asks every candidate the bands name to verify the pair with
   the exact shingle Jaccard and the fact guard; verified pairs become *neighbours* on both sides;
2. decides, once discovery is complete, whether it is a canonical or a member of a better-ranked canonical
   (:mod:`streamdedup.core.clustering`), and tells its neighbours, its canonical and its sources;
3. as a canonical, writes its chunk to ``canonical-chunks`` (key: its content hash) from its own source positions
   and the reports of its members.

Every message carries the sender's whole current state with a sequence number, so duplicates and stale messages
are ignored and the outcome does not depend on delivery order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from streamdedup.core.clustering import decide, split_reason
from streamdedup.core.facts import describe_conflict, fact_tokens
from streamdedup.core.messages import (
    BandAck,
    BandJoin,
    BandLeave,
    ContentStatus,
    Info,
    MemberReport,
    Message,
    NeighborUpdate,
    Output,
    RefUpdate,
    SourceRef,
    VerifyRequest,
    VerifyResult,
)
from streamdedup.core.model import Rank, SourceAttrs, union_readers
from streamdedup.core.records import audit_value, chunk_value, review_key, review_value
from streamdedup.core.shingles import jaccard_of_sets, shingle_set
from streamdedup.core.state import ContentRecord, NeighborEntry, PartitionState, RefEntry, Table

if TYPE_CHECKING:
    from streamdedup.core.engine import Engine

__all__ = ["ContentStage"]

_json = msgspec.json.Encoder(order="deterministic")


@dataclass
class _Work:
    """What one batch did to one content, settled once after all its messages are applied."""

    key: str
    record: ContentRecord
    was_role: str
    was_target: str
    was_ref: tuple[str, int] | None
    born: bool = False
    answer_sources: set[str] = field(default_factory=set)
    to_verify: list[str] = field(default_factory=list)
    results: list[tuple[str, int, float, bool]] = field(default_factory=list)
    new_neighbors: set[str] = field(default_factory=set)
    # Contents that hold this one as a neighbour although it does not hold them (yet): told at settle, either
    # adopted as neighbours (edge known, content alive), re-verified (edge unknown) or told it is dead.
    late_edges: dict[str, tuple[float, Info]] = field(default_factory=dict)
    strangers: set[str] = field(default_factory=set)
    # The content's own shingle set and fact tokens, computed once per batch for all the pairs it verifies.
    shingles: tuple[str, frozenset[str], list[str]] | None = None


class ContentStage:
    """Handler of the ``content`` stage."""

    name = "content"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._params = engine.params
        self._policy = engine.policy

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of messages for one partition and emit what follows from them."""
        table = Table(state, ContentRecord)
        table.prefetch(list(dict.fromkeys(m.content_hash for m in messages)))  # type: ignore[union-attr]
        out: list[Message | Output] = []
        works: dict[str, _Work] = {}
        for message in messages:
            key = message.content_hash  # type: ignore[union-attr]
            work = works.get(key)
            if work is None:
                record = table.get_or_new(key)
                work = _Work(key, record, record.role, record.target, record.canonical_ref)
                works[key] = work
            self._apply(work, message, out)
        born = [w for w in works.values() if w.born]
        if born:
            self._start_discovery(born, out)
        for key, work in works.items():
            self._settle(work, out)
            table.mark(key)
        table.flush()
        return out

    # -- applying messages -------------------------------------------------------------------------------------

    def _apply(self, work: _Work, message: Message, out: list[Message | Output]) -> None:
        record = work.record
        if isinstance(message, RefUpdate):
            self._apply_ref(work, message, out)
        elif isinstance(message, BandAck):
            if message.epoch != record.epoch:
                return
            for band_key, members in message.bands:
                if band_key not in record.pending_bands:
                    continue  # a duplicate answer
                record.pending_bands.remove(band_key)
                for other in members:
                    if (
                        other != work.key
                        and other not in record.checked
                        and other not in record.neighbors
                        and other not in work.to_verify
                    ):
                        work.to_verify.append(other)
        elif isinstance(message, VerifyRequest):
            self._apply_verify_request(work, message, out)
        elif isinstance(message, VerifyResult):
            if message.epoch == record.epoch and message.sender in record.pending_verify:
                record.pending_verify.remove(message.sender)
            if message.edge:
                if record.alive:
                    self._remember(work, message.sender, message.jaccard, message.info)
                else:
                    work.late_edges[message.sender] = (message.jaccard, message.info)
        elif isinstance(message, NeighborUpdate):
            entry = record.neighbors.get(message.sender)
            if entry is None:
                if message.info.role != "dead":
                    work.strangers.add(message.sender)
                return
            if message.info.seq <= entry.info.seq:
                return
            if message.info.role == "dead":
                del record.neighbors[message.sender]
                record.members.pop(message.sender, None)
                return
            entry.info = message.info
            if message.info.target == work.key and message.report is not None:
                record.members[message.sender] = message.report
            else:
                record.members.pop(message.sender, None)
        else:  # pragma: no cover - routing guarantees the types above
            raise TypeError(f"content stage cannot handle {type(message).__name__}")

    def _apply_ref(self, work: _Work, message: RefUpdate, out: list[Message | Output]) -> None:
        record = work.record
        entry = record.refs.get(message.source_id)
        if entry is not None and message.version <= entry.version:
            return
        if message.positions:
            if not record.alive:
                record.text, record.norm = message.texts[0], message.norm
            same = all(t == record.text for t in message.texts)
            record.refs[message.source_id] = RefEntry(
                version=message.version,
                positions=message.positions,
                texts=() if same else message.texts,
                attrs=message.attrs,
            )
            work.answer_sources.add(message.source_id)
        else:
            record.refs[message.source_id] = RefEntry(version=message.version)
        alive = any(ref.positions for ref in record.refs.values())
        if alive and not record.alive:
            self._birth(work)
        elif record.alive and not alive:
            self._death(work, out)

    def _apply_verify_request(self, work: _Work, message: VerifyRequest, out: list[Message | Output]) -> None:
        record = work.record
        if not record.alive:
            work.results.append((message.sender, message.epoch, 0.0, False))
            return
        size = self._params.shingle_size
        if work.shingles is None or work.shingles[0] != record.norm:
            work.shingles = (record.norm, shingle_set(record.norm, size), fact_tokens(record.norm))
        mine, theirs = work.shingles[1], shingle_set(message.norm, size)
        similarity = jaccard_of_sets(mine, theirs)
        long_enough = min(len(mine), len(theirs)) >= self._params.min_shingles
        above = long_enough and similarity >= self._params.threshold
        conflict = above and work.shingles[2] != fact_tokens(message.norm)
        if conflict:
            out.append(
                Output(
                    "review",
                    review_key(work.key, message.sender),
                    review_value(
                        "fact_conflict",
                        {"content_hash": work.key, "text": record.text},
                        {"content_hash": message.sender, "text": message.text},
                        similarity,
                        describe_conflict(record.norm, message.norm),
                    ),
                )
            )
        edge = above and not conflict
        if edge:
            self._remember(work, message.sender, similarity, message.info)
        work.results.append((message.sender, message.epoch, similarity, edge))

    def _remember(self, work: _Work, other: str, similarity: float, info: Info) -> None:
        record = work.record
        entry = record.neighbors.get(other)
        if entry is None:
            record.neighbors[other] = NeighborEntry(jaccard=similarity, info=info)
            work.new_neighbors.add(other)
        elif info.seq > entry.info.seq:
            entry.info = info

    # -- life cycle --------------------------------------------------------------------------------------------

    def _birth(self, work: _Work) -> None:
        record = work.record
        record.alive = True
        record.epoch += 1
        record.role, record.target, record.jaccard = "pending", "", 1.0
        work.was_role, work.was_target, work.was_ref = "pending", "", None
        work.born = True

    def _death(self, work: _Work, out: list[Message | Output]) -> None:
        record = work.record
        key = work.key
        if record.indexed:
            out.append(BandLeave(key, record.epoch, tuple(self._band_keys(record))))
        if record.role == "canonical":
            out.append(Output("audit", key, audit_value(key, "retract", "no live source")))
        if record.record_digest:
            out.append(Output("canonical-chunks", key, None))
        record.seq += 1
        dead = Info(record.seq, "dead")
        for other in sorted(record.neighbors):
            out.append(NeighborUpdate(other, key, dead))
        keep = {"seq": record.seq, "epoch": record.epoch, "refs": record.refs, "revision": record.revision}
        fresh = ContentRecord(**keep, role="dead", sent_info=dead)  # type: ignore[arg-type]
        for name in fresh.__struct_fields__:
            setattr(record, name, getattr(fresh, name))
        work.born = False
        work.was_role, work.was_target, work.was_ref = "dead", "", None
        work.to_verify.clear()
        work.new_neighbors.clear()

    def _band_keys(self, record: ContentRecord) -> list[str]:
        scheme = self._engine.scheme
        signature = scheme.from_bytes(record.signature)
        return scheme.band_keys(signature, self._params.bands, self._params.rows)

    def _start_discovery(self, born: list[_Work], out: list[Message | Output]) -> None:
        scheme = self._engine.scheme
        signatures, distinct = scheme.signatures([w.record.norm for w in born])
        minimum = self._params.min_shingles
        for work, signature, count in zip(born, signatures, distinct, strict=True):
            if count < minimum:
                continue  # too short for near matching: exact copies only
            record = work.record
            record.signature = scheme.to_bytes(signature)
            record.indexed = True
            record.pending_bands = scheme.band_keys(signature, self._params.bands, self._params.rows)
            out.append(BandJoin(work.key, record.epoch, tuple(record.pending_bands)))

    # -- settling ----------------------------------------------------------------------------------------------

    def _settle(self, work: _Work, out: list[Message | Output]) -> None:
        record, key = work.record, work.key
        if not record.alive:
            dead = Info(record.seq, "dead")
            for sender, epoch, _, _ in work.results:
                out.append(VerifyResult(sender, key, epoch, 0.0, False, dead))
            for other in sorted(set(work.late_edges) | work.strangers):
                out.append(NeighborUpdate(other, key, dead))
            return
        for other, (similarity, info) in sorted(work.late_edges.items()):
            self._remember(work, other, similarity, info)
        refs = record.live_refs()
        ref_keys = [(s, p, a) for s, p, a, _ in refs]
        best = self._policy.best_ref(ref_keys)
        rank = self._policy.rank_of(key, len(record.norm), best)
        readers = union_readers([a.acl for _, _, a, _ in refs])
        record.pending_verify.extend(work.to_verify)
        record.checked.extend(work.to_verify)
        if not record.pending_bands and not record.pending_verify:
            self._decide(work, rank, readers, out)
        canonical_ref = (best[0], best[1]) if record.role == "canonical" else None
        record.canonical_ref = canonical_ref
        if canonical_ref is not None and work.was_role == "canonical" and work.was_ref != canonical_ref:
            out.append(self._source_swap(key, work.was_ref, canonical_ref, ref_keys))
        info = Info(record.seq, record.role, rank, readers, record.target)
        report = (
            MemberReport(record.jaccard, tuple(SourceRef(s, p, a) for s, p, a, _ in refs))
            if record.role == "member"
            else None
        )
        chunk_id = key if record.role == "canonical" else record.target
        status = (chunk_id, "near" if record.role == "member" else "canonical", record.jaccard, canonical_ref)
        info_changed = record.sent_info is None or _differs(record.sent_info, info)
        report_changed = report != record.sent_report
        status_changed = status != record.sent_status
        if info_changed or report_changed or status_changed:
            record.seq += 1
            info = msgspec.structs.replace(info, seq=record.seq)
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
        self._tell_sources(work, status, status_changed, out)
        self._emit_chunk(work, readers, refs, out)
        for other in work.to_verify:
            out.append(VerifyRequest(other, key, record.epoch, record.norm, record.text, info))
        for other in sorted(work.strangers - set(record.neighbors) - set(work.to_verify)):
            # It holds this content as a neighbour but this content lost track of it: verify the pair again.
            out.append(VerifyRequest(other, key, record.epoch, record.norm, record.text, info))
        for sender, epoch, similarity, edge in work.results:
            out.append(VerifyResult(sender, key, epoch, similarity, edge, info))

    def _source_swap(
        self,
        key: str,
        before: tuple[str, int] | None,
        after: tuple[str, int],
        ref_keys: list[tuple[str, int, SourceAttrs]],
    ) -> Output:
        """Audit a new canonical source position among the exact copies of a chunk."""
        attrs = {(s, p): a for s, p, a in ref_keys}
        if before is None or tuple(before) not in attrs:
            reason = "canonical source removed"
        else:
            old, new = attrs[tuple(before)], attrs[after]  # type: ignore[index]
            reason = self._policy.reason(
                Rank(new.authority, new.modified_at, 0, after[0], ""),
                Rank(old.authority, old.modified_at, 0, before[0], ""),
            )
        moved = {"source_id": after[0], "position": after[1]}
        return Output("audit", key, audit_value(key, "swap", reason, canonical=moved))

    def _decide(self, work: _Work, rank: Rank, readers: tuple[str, ...], out: list[Message | Output]) -> None:
        record, key = work.record, work.key
        neighbors = [(h, e.jaccard, e.info) for h, e in sorted(record.neighbors.items())]
        decision = decide(rank, readers, neighbors, self._policy, first=record.role == "pending")
        if decision is None:
            return
        for other in decision.refused:
            if other in record.flagged:
                continue
            record.flagged.append(other)
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
            if old_role == "canonical" and target_entry.info.rank is not None:
                reason = self._policy.reason(target_entry.info.rank, rank)
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
        self,
        work: _Work,
        status: tuple[str, str, float, tuple[str, int] | None],
        changed: bool,
        out: list[Message | Output],
    ) -> None:
        record, key = work.record, work.key
        chunk_id, relation, similarity, canonical_ref = status
        previous, record.sent_status = record.sent_status, status
        if not chunk_id:
            return
        live = [s for s, ref in record.refs.items() if ref.positions]
        if not changed:
            recipients = sorted(
                s for s in work.answer_sources if s in record.refs and record.refs[s].positions
            )
        elif previous is not None and previous[:3] == status[:3]:
            # Only the canonical position moved: its old and new sources change relation, nobody else does (the
            # rest still see a canonical position that is not theirs, so their copies stay "exact").
            moved = {ref[0] for ref in (previous[3], canonical_ref) if ref is not None}
            recipients = sorted(s for s in live if s in moved or s in work.answer_sources)
        else:
            recipients = sorted(live)
        for source_id in recipients:
            out.append(
                ContentStatus(
                    source_id,
                    key,
                    record.seq,
                    record.refs[source_id].version,
                    chunk_id,
                    relation,  # type: ignore[arg-type]
                    similarity,
                    canonical_ref,
                )
            )

    def _emit_chunk(
        self,
        work: _Work,
        readers: tuple[str, ...],
        refs: list[tuple[str, int, SourceAttrs, str]],
        out: list[Message | Output],
    ) -> None:
        record, key = work.record, work.key
        if record.role != "canonical" or record.canonical_ref is None:
            if record.record_digest:
                out.append(Output("canonical-chunks", key, None))
                record.record_digest = ""
            return
        canonical = record.canonical_ref
        text = next(t for s, p, _, t in refs if (s, p) == canonical)
        value = chunk_value(
            content_hash=key,
            text=text,
            canonical=canonical,
            readers=readers,
            own_refs=[SourceRef(s, p, a) for s, p, a, _ in refs],
            members=record.members,
        )
        digest = hashlib.blake2b(_json.encode(value), digest_size=16).hexdigest()
        if digest == record.record_digest:
            return
        record.record_digest = digest
        record.revision += 1
        out.append(Output("canonical-chunks", key, {**value, "revision": record.revision}))


def _differs(a: Info, b: Info) -> bool:
    return (a.role, a.rank, a.readers, a.target) != (b.role, b.rank, b.readers, b.target)
