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
from streamdedup.core.facts import describe_fact_difference, fact_tokens
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
from streamdedup.core.model import Rank
from streamdedup.core.records import audit_value, chunk_value, review_key, review_value
from streamdedup.core.shingles import jaccard_of_sets, shingle_set
from streamdedup.core.state import (
    Conflict,
    ContentRecord,
    NeighborEntry,
    PartitionState,
    RefEntry,
    Table,
    TopRef,
    ref_key,
    ref_prefix,
)

if TYPE_CHECKING:
    from streamdedup.core.engine import Engine

__all__ = ["ContentStage"]

_json = msgspec.json.Encoder(order="deterministic")


@dataclass(slots=True)
class _Work:
    """What one batch did to one content, settled once after all its messages are applied."""

    key: str
    record: ContentRecord
    was_role: str
    was_target: str
    was_ref: tuple[str, int] | None
    refs: Table[RefEntry]
    state: PartitionState
    born: bool = False
    refill: bool = False  # the first positions (record.top) must be read again from the content's refs
    answer_sources: set[str] = field(default_factory=set)
    to_verify: list[str] = field(default_factory=list)
    # Answers owed to verify requests: (sender, epoch, similarity, edge, the sender as a conflict or None).
    results: list[tuple[str, int, float, bool, Conflict | None]] = field(default_factory=list)
    # Better-ranked texts above the threshold that state other facts, met in this batch: this content flags.
    conflicts: list[Conflict] = field(default_factory=list)
    new_neighbors: set[str] = field(default_factory=set)
    # Contents that hold this one as a neighbour although it does not hold them (yet): told at settle, either
    # adopted as neighbours (edge known, content alive), re-verified (edge unknown) or told it is dead.
    late_edges: dict[str, tuple[float, Info]] = field(default_factory=dict)
    strangers: set[str] = field(default_factory=set)


class ContentStage:
    """Handler of the ``content`` stage."""

    name = "content"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._params = engine.params
        self._policy = engine.policy
        # Shingle sets and fact tokens of the texts met in one batch (a new text asks many others to verify it).
        self._features: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of messages for one partition and emit what follows from them."""
        table = Table(state, ContentRecord)
        table.prefetch(list(dict.fromkeys(m.content_hash for m in messages)))  # type: ignore[union-attr]
        refs = Table(state, RefEntry)
        # The refs that change, and those of the canonical positions they may move from (a swap reads them).
        wanted = {ref_key(m.content_hash, m.source_id): None for m in messages if isinstance(m, RefUpdate)}
        for m in messages:
            if isinstance(m, RefUpdate) and (found := table.cached(m.content_hash)) and found.canonical_ref:
                wanted[ref_key(m.content_hash, found.canonical_ref[0])] = None
        refs.prefetch(list(wanted))
        out: list[Message | Output] = []
        works: dict[str, _Work] = {}
        for message in messages:
            key = message.content_hash  # type: ignore[union-attr]
            work = works.get(key)
            if work is None:
                record = table.get_or_new(key)
                work = _Work(key, record, record.role, record.target, record.canonical_ref, refs, state)
                works[key] = work
            self._apply(work, message, out)
        born = [w for w in works.values() if w.born]
        if born:
            self._start_discovery(born, out)
        for key, work in works.items():
            self._settle(work, out)
            table.mark(key)
        table.flush()
        refs.flush()
        self._features.clear()
        return out

    def _text_features(self, norm: str) -> tuple[frozenset[str], tuple[str, ...]]:
        found = self._features.get(norm)
        if found is None:
            found = self._features[norm] = (
                shingle_set(norm, self._params.shingle_size),
                tuple(fact_tokens(norm)),
            )
        return found

    def _facts(self, norm: str) -> tuple[str, ...]:
        return self._text_features(norm)[1]

    # -- applying messages -------------------------------------------------------------------------------------

    def _apply(self, work: _Work, message: Message, out: list[Message | Output]) -> None:
        record = work.record
        if isinstance(message, RefUpdate):
            self._apply_ref(work, message, out)
        elif isinstance(message, BandAck):
            if message.epoch != record.epoch:
                return
            # Candidates are counted by the bands they share (an estimate of Jaccard) until every band answered.
            pending = record.pending_bands
            answered = set(message.bands).intersection(pending)
            if not answered:
                return  # a duplicate answer
            record.pending_bands = [band_key for band_key in pending if band_key not in answered]
            candidates = record.candidates
            for other, shared in message.candidates:
                if other != work.key:
                    candidates[other] = candidates.get(other, 0) + shared
        elif isinstance(message, VerifyRequest):
            self._apply_verify_request(work, message, out)
        elif isinstance(message, VerifyResult):
            if message.epoch == record.epoch and message.sender in record.pending_verify:
                record.pending_verify.remove(message.sender)
                if message.conflict is not None and message.info.rank is not None and record.alive:
                    # The receiver found the pair in conflict and left the flag to this side (the worse ranked).
                    work.conflicts.append(
                        Conflict(
                            message.sender, message.jaccard, message.info.rank, message.text, message.conflict
                        )
                    )
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
        key = ref_key(work.key, message.source_id)
        entry = work.refs.get(key)
        if message.texts and not record.has_text:
            # The content's texts, stored once for every copy (taken from any version: they never change).
            record.text, record.norm, record.has_text = message.texts[0], message.norm, True
        if entry is not None and message.version <= entry.version:
            return
        if message.positions:
            if message.attrs_only:
                same_positions = entry is not None and entry.positions == message.positions
                texts = entry.texts if same_positions and entry is not None else ()
            else:
                texts = () if all(t == record.text for t in message.texts) else message.texts
            new = RefEntry(
                version=message.version, positions=message.positions, texts=texts, attrs=message.attrs
            )
            work.answer_sources.add(message.source_id)
        else:
            new = RefEntry(version=message.version)
        work.refs.put(key, new)
        complete = len(record.top) == record.positions
        if entry is not None and entry.positions and entry.attrs is not None:
            _count(record, entry, -1)
        if new.positions:
            _count(record, new, +1)
        self._place(work, message.source_id, new, complete)
        alive = record.positions > 0 and record.has_text
        if alive and not record.alive:
            self._birth(work)
        elif record.alive and not alive:
            self._death(work, out)

    def _order(self, ref: TopRef) -> tuple[object, ...]:
        return self._policy.ref_order(ref.source_id, ref.position, ref.attrs)

    def _place(self, work: _Work, source_id: str, entry: RefEntry, complete: bool) -> None:
        """Keep ``record.top`` the first live positions in policy order after ``source_id``'s change."""
        record = work.record
        limit = self._params.max_chunk_sources
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
            if len(merged) < min(limit, record.positions):
                work.refill = True
        record.top = merged[:limit]

    def _scan_refs(self, work: _Work) -> dict[str, RefEntry]:
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

    def _refill(self, work: _Work) -> None:
        """Rebuild the counts and the first positions from all the content's refs."""
        record = work.record
        live = self._scan_refs(work)
        tops: list[TopRef] = []
        record.positions, record.principals = 0, {}
        for source_id, entry in live.items():
            _count(record, entry, +1)
            tops.extend(
                TopRef(source_id, p, entry.attrs, entry.texts[i] if entry.texts else "")  # type: ignore[arg-type]
                for i, p in enumerate(entry.positions)
            )
        tops.sort(key=self._order)
        record.top = tops[: self._params.max_chunk_sources]
        work.refill = False

    def _apply_verify_request(self, work: _Work, message: VerifyRequest, out: list[Message | Output]) -> None:
        record = work.record
        if not record.alive:
            work.results.append((message.sender, message.epoch, 0.0, False, None))
            return
        mine, my_facts = self._text_features(record.norm)
        theirs, their_facts = self._text_features(message.norm)
        similarity = jaccard_of_sets(mine, theirs)
        long_enough = min(len(mine), len(theirs)) >= self._params.min_shingles
        above = long_enough and similarity >= self._params.threshold
        conflict = None
        if above and my_facts != their_facts:
            rank = message.info.rank or Rank(0, 0, 0, "", "")
            conflict = Conflict(message.sender, similarity, rank, message.text, their_facts)
        edge = above and conflict is None
        if edge:
            self._remember(work, message.sender, similarity, message.info)
        work.results.append((message.sender, message.epoch, similarity, edge, conflict))

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
        record.candidates, record.conflict = {}, None
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
        keep = {
            "seq": record.seq,
            "epoch": record.epoch,
            "revision": record.revision,
            "has_text": record.has_text,
            "text": record.text,
            "norm": record.norm,
        }
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
            for sender, epoch, _, _, _ in work.results:
                out.append(VerifyResult(sender, key, epoch, 0.0, False, dead))
            for other in sorted(set(work.late_edges) | work.strangers):
                out.append(NeighborUpdate(other, key, dead))
            return
        for other, (similarity, info) in sorted(work.late_edges.items()):
            self._remember(work, other, similarity, info)
        if work.refill or len(record.top) != min(self._params.max_chunk_sources, record.positions):
            self._refill(work)
        first = record.top[0]
        best = (first.source_id, first.position, first.attrs)
        rank = self._policy.rank_of(key, len(record.norm), best)
        readers = record.readers()
        owed: list[tuple[str, int, float, bool, tuple[str, ...] | None]] = []
        my_key = None
        for sender, epoch, similarity, edge, conflict in work.results:
            # Of a pair in conflict, the worse-ranked side raises the flag: this one, or the sender when told so.
            facts_for_them = None
            if conflict is not None:
                my_key = my_key or self._policy.sort_key(rank)
                if self._policy.sort_key(conflict.rank) < my_key:
                    work.conflicts.append(conflict)
                else:
                    facts_for_them = self._facts(record.norm)
            owed.append((sender, epoch, similarity, edge, facts_for_them))
        if record.candidates and not record.pending_bands:
            self._choose_candidates(work)
        record.pending_verify.extend(work.to_verify)
        record.checked.extend(work.to_verify)
        if not record.conflicted and (work.conflicts or record.conflict is not None):
            self._flag_conflict(work, out)
        if not record.pending_bands and not record.pending_verify:
            self._decide(work, rank, readers, out)
        canonical_ref = (best[0], best[1]) if record.role == "canonical" else None
        record.canonical_ref = canonical_ref
        if canonical_ref is not None and work.was_role == "canonical" and work.was_ref != canonical_ref:
            out.append(self._source_swap(work, work.was_ref, first))
        info = Info(record.seq, record.role, rank, readers, record.target)
        report = (
            MemberReport(record.jaccard, _source_refs(record.top), record.positions, rank)
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
        self._emit_chunk(work, readers, out)
        for other in work.to_verify:
            out.append(VerifyRequest(other, key, record.epoch, record.norm, record.text, info))
        for other in sorted(work.strangers - set(record.neighbors) - set(work.to_verify)):
            # It holds this content as a neighbour but this content lost track of it: verify the pair again.
            out.append(VerifyRequest(other, key, record.epoch, record.norm, record.text, info))
        for sender, epoch, similarity, edge, facts in owed:
            text = "" if facts is None else record.text
            out.append(VerifyResult(sender, key, epoch, similarity, edge, info, facts, text))

    def _choose_candidates(self, work: _Work) -> None:
        """Verify the candidates sharing the most bands (at most ``max_candidates``; ties by content hash)."""
        record = work.record
        counts, record.candidates = record.candidates, {}
        known = set(record.checked) | set(record.neighbors)
        fresh = [h for h in counts if h not in known]
        if len(fresh) > self._params.max_candidates:
            fresh.sort(key=lambda h: (-counts[h], h))
            del fresh[self._params.max_candidates :]
        else:
            fresh.sort()
        work.to_verify.extend(h for h in fresh if h not in work.to_verify)

    def _flag_conflict(self, work: _Work, out: list[Message | Output]) -> None:
        """Raise the content's one ``fact_conflict`` flag, against the better-ranked text it would have joined.

        Of the texts above the threshold that state other facts and outrank this one, that is the one ``decide``
        would have picked (highest Jaccard, then best rank). While its own discovery is still running, the best so
        far is kept and the flag waits for the rest.
        """
        record, policy = work.record, self._policy
        found = list(work.conflicts)
        if record.conflict is not None:
            found.append(record.conflict)
        if not found:
            return
        best = min(found, key=lambda c: (-c.jaccard, policy.sort_key(c.rank)))
        if record.pending_bands or record.pending_verify:
            record.conflict = best
            return
        record.conflicted, record.conflict = True, None
        # Described from the lower content hash's side, so both sides of a pair would describe it alike.
        mine = self._facts(record.norm)
        low, high = (mine, best.facts) if work.key < best.content_hash else (best.facts, mine)
        out.append(
            Output(
                "review",
                review_key(work.key, best.content_hash),
                review_value(
                    "fact_conflict",
                    {"content_hash": work.key, "text": record.text},
                    {"content_hash": best.content_hash, "text": best.text},
                    best.jaccard,
                    describe_fact_difference(list(low), list(high)),
                ),
            )
        )

    def _source_swap(self, work: _Work, before: tuple[str, int] | None, after: TopRef) -> Output:
        """Audit a new canonical source position among the exact copies of a chunk."""
        key = work.key
        entry = None if before is None else work.refs.get(ref_key(key, before[0]))
        if before is None or entry is None or entry.attrs is None or before[1] not in entry.positions:
            reason = "canonical source removed"
        else:
            old, new = entry.attrs, after.attrs
            reason = self._policy.reason(
                Rank(new.authority, new.modified_at, 0, after.source_id, ""),
                Rank(old.authority, old.modified_at, 0, before[0], ""),
            )
        moved = {"source_id": after.source_id, "position": after.position}
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
        if changed and (previous is None or previous[:3] != status[:3]):
            # Every live source sees a new chunk or relation.
            if len(record.top) == record.positions:
                listed = {t.source_id for t in record.top}
                live = {s: e for s in listed if (e := work.refs.get(ref_key(key, s))) is not None}
            else:
                live = self._scan_refs(work)
        else:
            # Only the sources that sent an update, and, if the canonical position moved, its old and new sources
            # (the rest still see a canonical position that is not theirs, so their copies stay "exact").
            wanted = set(work.answer_sources)
            if changed:
                wanted |= {ref[0] for ref in (previous[3], canonical_ref) if ref is not None}  # type: ignore[index]
            live = {s: e for s in wanted if (e := work.refs.get(ref_key(key, s))) is not None and e.positions}
        for source_id in sorted(live):
            out.append(
                ContentStatus(
                    source_id,
                    key,
                    record.seq,
                    live[source_id].version,
                    chunk_id,
                    relation,  # type: ignore[arg-type]
                    similarity,
                    canonical_ref,
                )
            )

    def _emit_chunk(self, work: _Work, readers: tuple[str, ...], out: list[Message | Output]) -> None:
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
            own_refs=_source_refs(record.top),
            own_count=record.positions,
            members=record.members,
            policy=self._policy,
            max_sources=self._params.max_chunk_sources,
        )
        digest = hashlib.blake2b(_json.encode(value), digest_size=16).hexdigest()
        if digest == record.record_digest:
            return
        record.record_digest = digest
        record.revision += 1
        out.append(Output("canonical-chunks", key, {**value, "revision": record.revision}))


_ref_decoder = msgspec.msgpack.Decoder(RefEntry)


def _count(record: ContentRecord, entry: RefEntry, sign: int) -> None:
    """Add (``sign`` 1) or remove (-1) a live ref's positions and readers in the content's counts."""
    record.positions += sign * len(entry.positions)
    principals = record.principals
    for principal in set(entry.attrs.acl) if entry.attrs is not None else ():
        count = principals.get(principal, 0) + sign
        if count > 0:
            principals[principal] = count
        else:
            principals.pop(principal, None)


def _source_refs(top: list[TopRef]) -> tuple[SourceRef, ...]:
    return tuple(SourceRef(t.source_id, t.position, t.attrs) for t in top)


def _differs(a: Info, b: Info) -> bool:
    return (a.role, a.rank, a.readers, a.target) != (b.role, b.rank, b.readers, b.target)
