"""The content stage's discovery of near copies, from a new text's LSH bands to its verified neighbours.

1. A text long enough for near matching joins its bands (:meth:`Discovery.start`); the band stage answers with
   the contents found in them and how many of its bands each shares (:meth:`Discovery.on_band_answer`).
2. When every band has answered, the text asks at most ``max_candidates`` of them, those sharing the most bands,
   to verify the pair (:meth:`Discovery.choose_candidates`).
3. The receiver computes the exact shingle Jaccard and applies the fact guard (:meth:`Discovery.on_verify_request`)
   and answers; a pair above the threshold with the same facts becomes a *neighbour* on both sides
   (:meth:`Discovery.on_verify_result`). Neighbours then keep each other informed of their state
   (:meth:`Discovery.on_neighbor_update`).
4. Of a pair above the threshold that states other facts, the worse-ranked side raises the one ``fact_conflict``
   flag of its life, against the better-ranked text it would have joined (:meth:`Discovery.flag_conflict`).
5. A reviewer's decision about a pair reaches both sides (:meth:`Discovery.on_decision`) and overrides the rules of
   step 3 for that pair: ``keep_separate`` is never an edge and never flagged, ``merge`` is an edge whatever the
   Jaccard and the facts (the permission guard still applies when the content decides), ``reopen`` gives the pair
   back to the rules. Each verification between the two carries the sender's decision; the newer of the two is in
   force on both sides, and an answer computed under an older one than the receiver knows is ignored, so both
   sides agree whatever order the decision and the verifications arrive in.
"""

from __future__ import annotations

from collections.abc import Sequence

from streamdedup.core.facts import describe_fact_difference
from streamdedup.core.messages import (
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
    VerifyRequest,
    VerifyResult,
    content_id,
)
from streamdedup.core.model import Rank, covered
from streamdedup.core.records import audit_value, review_key, review_value
from streamdedup.core.shingles import jaccard_of_sets
from streamdedup.core.stages.content_work import Answer, Features, LateEdge, Work
from streamdedup.core.stages.context import StageContext
from streamdedup.core.state import Conflict, ContentRecord, NeighborEntry

__all__ = ["Discovery", "answer_result"]

_NO_RANK = Rank(0, 0, 0, "", "")


class Discovery:
    """Finds and verifies a content's near copies."""

    def __init__(self, context: StageContext, features: Features) -> None:
        self._params = context.params
        self._policy = context.policy
        self._scheme = context.scheme
        self._features = features

    def start(self, born: Sequence[Work], out: list[Message | Output]) -> None:
        """Compute the signatures of texts that came alive in this batch and join their bands."""
        params = self._params
        features = self._scheme.features(
            [w.record.norm for w in born], params.bands, params.rows, params.min_shingles
        )
        for work, (_, band_keys, sketch) in zip(born, features, strict=True):
            if band_keys is None:  # shorter texts match exactly only
                continue
            record = work.record
            record.indexed = True
            record.sketch = sketch
            record.pending_bands = band_keys
            out.append(BandJoin(work.key, record.epoch, tuple(band_keys)))

    def leave(self, key: str, record: ContentRecord) -> BandLeave:
        """Return the message that takes a content out of the bands it joined.

        The signature is computed again from the text rather than stored: it is the same, and 512 bytes of
        incompressible state per text cost more than one signature per death.
        """
        params = self._params
        [(_, band_keys, _)] = self._scheme.features([record.norm], params.bands, params.rows, 0)
        assert band_keys is not None  # asked for with min_shingles 0
        return BandLeave(key, record.epoch, tuple(band_keys))

    def on_band_answer(self, work: Work, message: BandAck) -> None:
        """Count the candidates of the bands answered (shared bands estimate Jaccard) until every band answered."""
        record = work.record
        if message.epoch != record.epoch:
            return
        pending = record.pending_bands
        answered = set(message.bands).intersection(pending)
        if not answered:
            return  # a duplicate answer
        record.pending_bands = [band_key for band_key in pending if band_key not in answered]
        candidates = record.candidates
        mine = content_id(work.key)
        for other, shared in message.candidates:  # named by content id
            if other != mine:
                candidates[other] = candidates.get(other, 0) + shared

    def choose_candidates(self, work: Work) -> None:
        """Verify the candidates sharing the most bands (at most ``max_candidates``; ties by content id).

        Candidates, and the requests pending and sent in this epoch, are named by content id.
        """
        record = work.record
        counts, record.candidates = record.candidates, {}
        known = set(record.checked) | {content_id(other) for other in record.neighbors}
        fresh = [h for h in counts if h not in known]
        limit = self._params.max_candidates
        if len(fresh) > limit:
            fresh.sort(key=lambda h: (-counts[h], h))
            del fresh[limit:]
        else:
            fresh.sort()
        work.to_verify.extend(h for h in fresh if h not in work.to_verify)

    def on_verify_request(self, work: Work, message: VerifyRequest, out: list[Message | Output]) -> None:
        """Verify the pair with the sender: exact shingle Jaccard, length and the fact guard; answer at settle.

        A reviewer's decision about the pair (this side's or the sender's, the newer) overrides them.
        """
        record = work.record
        decision = self._take_decision(work, message.sender, message.decision, out)
        if not record.alive:
            # Answered at settle: as dead, or verified then if the content comes alive later in the batch (an
            # answer "no edge" stamped with its new life's state would break a pair a decision merged).
            work.asked_while_dead.append(message)
            return
        features = self._features
        mine, theirs = features.shingles(record.norm), features.shingles(message.norm)
        similarity = jaccard_of_sets(mine, theirs)
        long_enough = min(len(mine), len(theirs)) >= self._params.min_shingles
        above = long_enough and similarity >= self._params.threshold
        conflict = None
        if decision is not None and decision.kind != "reopen":
            edge = decision.kind == "merge"
        else:
            if above and features.facts(record.norm) != (their_facts := features.facts(message.norm)):
                conflict = Conflict(
                    message.sender, similarity, message.info.rank or _NO_RANK, message.text, their_facts
                )
            edge = above and conflict is None
        if edge:
            self.remember(work, message.sender, similarity, message.info, message.report)
            # Told this content's state (its report too, if the sender is its canonical) at settle: a sender that
            # already was a neighbour asks again because it lost track of this one.
            work.new_neighbors.add(message.sender)
        elif decision is not None:
            self._forget(work, message.sender, message.info.seq)
        work.answers.append(Answer(message.sender, message.epoch, similarity, edge, conflict, decision))

    def on_verify_result(self, work: Work, message: VerifyResult, out: list[Message | Output]) -> None:
        """Take a verification's answer: a neighbour if it is an edge, a conflict to flag if the flag is ours.

        An answer computed under an older decision about the pair than this side knows says nothing about the pair.
        """
        record = work.record
        decision = self._take_decision(work, message.sender, message.decision, out)
        stale = decision is not None and (
            message.decision is None or message.decision.version < decision.version
        )
        asked = content_id(message.sender)
        if message.epoch == record.epoch and asked in record.pending_verify:
            record.pending_verify.remove(asked)
            if (
                message.conflict is not None
                and message.info.rank is not None
                and record.alive
                and not stale
                and not _settled(decision)
            ):
                # The receiver found the pair in conflict and left the flag to this side (the worse ranked).
                work.conflicts.append(
                    Conflict(
                        message.sender, message.jaccard, message.info.rank, message.text, message.conflict
                    )
                )
        if stale:
            return
        if message.edge:
            if record.alive:
                self.remember(work, message.sender, message.jaccard, message.info, message.report)
            else:
                work.late_edges[message.sender] = LateEdge(message.jaccard, message.info, message.report)
        elif decision is not None:
            self._forget(work, message.sender, message.info.seq)

    def on_decision(self, work: Work, message: PairDecision, out: list[Message | Output]) -> None:
        """Take a reviewer's decision about this content and another (from the ledger); older ones change nothing."""
        self._take_decision(work, message.other, message.mark, out, verify=True)

    def _take_decision(
        self,
        work: Work,
        other: str,
        mark: PairMark | None,
        out: list[Message | Output],
        *,
        verify: bool = False,
    ) -> PairMark | None:
        """Adopt ``mark`` about the pair with ``other`` if it is newer than the one held; return the one in force.

        ``verify``: ask ``other`` to verify the pair again where the decision calls for it (not needed when the
        mark came with a verification between the two, which settles the pair by itself).
        """
        record = work.record
        held = record.decisions.get(other)
        if mark is None or (held is not None and held.version >= mark.version):
            return held
        record.decisions[other] = mark
        key = work.key
        if record.conflict is not None and record.conflict.content_hash == other:
            record.conflict = None
        if mark.kind == "keep_separate":
            self._forget(work, other)
            self._resolve_flag(work, other, out)
            if other in record.flagged:
                record.flagged.remove(other)
            return mark
        if mark.kind == "merge":
            entry = record.neighbors.get(other)
            if other in record.flagged and entry is not None:  # this life's acl_boundary flag
                if covered(entry.info.readers, record.readers()):
                    # The better-ranked side joins this one instead: the one merge that I2 allows.
                    record.flagged.remove(other)
                    self._resolve_flag(work, other, out)
                else:
                    out.append(
                        Output(
                            "audit",
                            review_key(key, other),
                            audit_value(
                                None,
                                "decision_refused",
                                "merge",
                                subject=review_key(key, other),
                                detail="neither copy is readable by every reader of the other (I2)",
                            ),
                        )
                    )
            else:
                # A fact_conflict flag (or a flag of an earlier life: if the permission guard still keeps the two
                # apart, the content flags them again when it decides).
                self._resolve_flag(work, other, out)
            if verify and record.alive and other not in record.neighbors:
                work.decided_verify.append(other)
            return mark
        # reopen: the rules decide again.
        self._forget(work, other)
        if verify and record.alive:
            work.decided_verify.append(other)
        return mark

    @staticmethod
    def _resolve_flag(work: Work, other: str, out: list[Message | Output]) -> None:
        """Resolve the flag this content raised against ``other``, if it raised one (a tombstone on ``review``)."""
        record = work.record
        if record.flag_partner == other:
            record.flag_partner, record.conflicted = "", False
        if other in record.raised:
            record.raised.remove(other)
            out.append(Output("review", review_key(work.key, other), None))

    @staticmethod
    def _forget(work: Work, other: str, seq: int | None = None) -> None:
        """Drop ``other`` as a neighbour (unless ``seq`` is older than what is known of it)."""
        record = work.record
        entry = record.neighbors.get(other)
        if entry is None or (seq is not None and seq < entry.info.seq):
            return
        del record.neighbors[other]
        record.members.pop(other, None)
        work.new_neighbors.discard(other)

    def decision_for(self, work: Work, other: str) -> PairMark | None:
        """Return the decision held about the pair with ``other`` (a whole hash, or a band candidate's id)."""
        decisions = work.record.decisions
        if not decisions:
            return None
        if len(other) != len(work.key):
            return next((m for h, m in sorted(decisions.items()) if content_id(h) == other), None)
        return decisions.get(other)

    def on_neighbor_update(self, work: Work, message: NeighborUpdate) -> None:
        """Take a neighbour's new state (and its report, if this content is its canonical); stale ones are ignored."""
        record = work.record
        entry = record.neighbors.get(message.sender)
        if entry is None:
            if message.info.role != "dead":
                work.strangers.add(message.sender)
            return
        if message.info.seq < entry.info.seq:
            return  # stale; an equal one may bring the report a verification's copy of the state did not
        if message.info.role == "dead":
            del record.neighbors[message.sender]
            record.members.pop(message.sender, None)
            return
        entry.info = message.info
        if message.info.target == work.key and message.report is not None:
            record.members[message.sender] = message.report
        else:
            record.members.pop(message.sender, None)

    def remember(
        self, work: Work, other: str, similarity: float, info: Info, report: MemberReport | None = None
    ) -> None:
        """Hold ``other`` as a verified neighbour (or update its state), with its report if it is a member here."""
        record = work.record
        if _settled(record.decisions.get(other), "keep_separate"):
            return
        entry = record.neighbors.get(other)
        if entry is None:
            entry = record.neighbors[other] = NeighborEntry(jaccard=similarity, info=info)
            work.new_neighbors.add(other)
        elif info.seq > entry.info.seq:
            entry.info = info
        elif info.seq < entry.info.seq:
            return  # stale
        if entry.info.target != work.key:
            record.members.pop(other, None)
        elif report is not None:
            record.members[other] = report

    def answers(self, work: Work, rank: Rank) -> list[tuple[Answer, tuple[str, ...] | None]]:
        """Return the answers owed, each with the fact tokens to send when the sender is to flag the pair.

        Of a pair in conflict the worse-ranked side raises the flag: this content (the conflict joins its own),
        or the sender, which is then sent this content's fact tokens and text.
        """
        owed: list[tuple[Answer, tuple[str, ...] | None]] = []
        my_key = None
        for answer in work.answers:
            facts_for_them = None
            if answer.conflict is not None:
                my_key = my_key or self._policy.sort_key(rank)
                if self._policy.sort_key(answer.conflict.rank) < my_key:
                    work.conflicts.append(answer.conflict)
                else:
                    facts_for_them = self._features.facts(work.record.norm)
            owed.append((answer, facts_for_them))
        return owed

    def flag_conflict(self, work: Work, out: list[Message | Output]) -> None:
        """Raise the content's one ``fact_conflict`` flag, against the better-ranked text it would have joined.

        Of the texts above the threshold that state other facts and outrank this one, that is the one ``decide``
        would have picked (highest Jaccard, then best rank). While its own discovery is still running, the best so
        far is kept and the flag waits for the rest.
        """
        record, policy = work.record, self._policy
        if record.conflicted or (not work.conflicts and record.conflict is None):
            return
        found = list(work.conflicts)
        if record.conflict is not None:
            found.append(record.conflict)
        found = [c for c in found if not _settled(record.decisions.get(c.content_hash))]
        if not found:
            record.conflict = None
            return
        best = min(found, key=lambda c: (-c.jaccard, policy.sort_key(c.rank)))
        if record.pending_bands or record.pending_verify:
            record.conflict = best
            return
        record.conflicted, record.conflict, record.flag_partner = True, None, best.content_hash
        if best.content_hash not in record.raised:
            record.raised.append(best.content_hash)
        # Described from the lower content hash's side, so both sides of a pair would describe it alike.
        mine = self._features.facts(record.norm)
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

    def ask_and_answer(
        self,
        work: Work,
        info: Info,
        report: MemberReport | None,
        owed: list[tuple[Answer, tuple[str, ...] | None]],
        out: list[Message | Output],
    ) -> None:
        """Send this batch's verify requests and the answers owed, with the content's settled state.

        The content's canonical also gets its report with them: it may hold no entry of this content to take a
        report from another message (it asks again because it lost track of it).
        """
        record = work.record
        target = record.target if report is not None else ""
        for other in work.to_verify:
            out.append(_request(work, other, info, self.decision_for(work, other), sketch=record.sketch))
        if not record.pending_bands:
            record.sketch = b""  # its band candidates are chosen and asked: not needed any more
        asking = set(work.to_verify)
        for other in sorted(work.strangers - set(record.neighbors)):
            if content_id(other) not in asking:
                # It holds this content as a neighbour but this content lost track of it: verify the pair again.
                work.decided_verify.append(other)
        for other in dict.fromkeys(work.decided_verify):
            if content_id(other) in asking:
                continue
            asking.add(content_id(other))
            out.append(
                _request(work, other, info, record.decisions.get(other), report if other == target else None)
            )
        for answer, facts in owed:
            out.append(answer_result(work, answer, info, facts, report if answer.sender == target else None))


def _request(
    work: Work,
    other: str,
    info: Info,
    decision: PairMark | None,
    report: MemberReport | None = None,
    *,
    sketch: bytes = b"",
) -> VerifyRequest:
    record = work.record
    return VerifyRequest(
        other, work.key, record.epoch, record.norm, record.text, info, decision, report, sketch
    )


def answer_result(
    work: Work, answer: Answer, info: Info, facts: tuple[str, ...] | None, report: MemberReport | None
) -> VerifyResult:
    """Return the answer to a verify request, with the content's state (and its text, if the asker flags)."""
    return VerifyResult(
        answer.sender,
        work.key,
        answer.epoch,
        answer.jaccard,
        answer.edge,
        info,
        facts,
        "" if facts is None else work.record.text,
        answer.decision,
        report,
    )


def _settled(mark: PairMark | None, kind: str | None = None) -> bool:
    """Whether a reviewer settled the pair (``kind``, or either ``keep_separate`` or ``merge``)."""
    if mark is None:
        return False
    return mark.kind == kind if kind is not None else mark.kind in ("keep_separate", "merge")
