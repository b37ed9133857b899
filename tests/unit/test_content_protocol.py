"""The content stage's protocol, message by message: what each message does to a content and what it sends.

Each test drives the stage directly with one partition's state, as a driver would.
"""

import msgspec
import pytest

from streamdedup.core.messages import (
    BandAck,
    BandJoin,
    BandLeave,
    Info,
    MemberReport,
    NeighborUpdate,
    Output,
    PairMark,
    RefUpdate,
    SourceRef,
    SourceStatuses,
    VerifyRequest,
    VerifyResult,
    content_id,
)
from streamdedup.core.model import Rank, SourceAttrs
from streamdedup.core.normalize import content_hash, normalize
from streamdedup.core.shingles import jaccard
from streamdedup.core.sketches import sketches
from streamdedup.core.stages.content import ContentStage, ContentStageInPython
from streamdedup.core.stages.content_settle import Settlement
from streamdedup.core.state import ContentIds, ContentRecord, id_key, unpack_statuses
from streamdedup.core.tables import Table
from streamdedup.store.base import Transaction
from streamdedup.store.memory import MemoryStore

WORDS = ["".join(chr(97 + (i * 7 + j * 3) % 26) for j in range(6)) for i in range(40)]
TEXT = " ".join(WORDS)
NEAR = " ".join([*WORDS[:38], "changed", WORDS[39]])  # one word changed: Jaccard about 0.86
THIRTY = " ".join([*WORDS[:38], "30", WORDS[39]])
FOURTEEN = " ".join([*WORDS[:38], "14", WORDS[39]])
SHORT = "too short to match"


def _attrs(day: int = 1, acl: tuple[str, ...] = ("*",)) -> SourceAttrs:
    return SourceAttrs(acl=acl, modified_at=day * 86_400_000_000)


def _ref(text: str, source: str = "s", version: int = 1, positions=(0,), day: int = 1) -> RefUpdate:
    if not positions:
        return RefUpdate(content_hash(text), source, version, ())
    return RefUpdate(
        content_hash(text), source, version, positions, (text,) * len(positions), text, _attrs(day)
    )


def _rank(text: str, source: str, day: int) -> Rank:
    return Rank(0, day * 86_400_000_000, len(text), source, content_hash(text))


def _stored(state, key, record_type):
    """The record stored under ``key``, decoded (not a batch's cached copy: the compiled stage writes bytes)."""
    raw = state.get(key)
    return None if raw is None else msgspec.msgpack.decode(raw, type=record_type)


@pytest.fixture(params=["compiled", "python"])
def stage(engine, request):
    """The content stage, compiled and its Python twin: each test holds for both."""
    txn = Transaction(MemoryStore())
    handler = (ContentStage if request.param == "compiled" else ContentStageInPython)(engine.context)

    def send(*messages):
        return handler.handle(list(messages), txn.partition("content", 0))

    send.record = lambda text: _stored(txn.partition("content", 0), content_hash(text), ContentRecord)
    send.state = txn.partition("content", 0)
    send.txn = txn
    return send


def _of(out, kind):
    return [m for m in out if isinstance(m, kind)]


def _statuses(out):
    """What the batch told sources: (source_id, chunk id, the status as the source keeps it), sources in order."""
    return [
        (m.source_id, e.content_hash if e.chunk_id == "=" else e.chunk_id, e)
        for m in _of(out, SourceStatuses)
        for e in unpack_statuses(m.statuses).values()
    ]


def _outputs(out, topic):
    return [m for m in out if isinstance(m, Output) and m.topic == topic]


def _settled(stage, text, source="s", day=1):
    """Bring a content to life and through discovery with no candidates: a canonical."""
    (join,) = _of(stage(_ref(text, source, day=day)), BandJoin)
    return stage(BandAck(join.content_hash, join.epoch, join.band_keys))


# -- RefUpdate -------------------------------------------------------------------------------------------------


def test_a_first_live_position_brings_the_content_to_life_and_joins_its_bands(stage, engine):
    out = stage(_ref(TEXT))
    (join,) = _of(out, BandJoin)
    assert len(join.band_keys) == engine.params.bands and join.epoch == 1
    assert _statuses(out) == [] and _outputs(out, "canonical-chunks") == []  # decided after discovery
    assert stage.record(TEXT).alive and stage.record(TEXT).positions == 1


def test_a_text_too_short_for_near_matching_is_decided_at_once(stage):
    out = stage(_ref(SHORT))
    assert _of(out, BandJoin) == []
    ((source_id, chunk_id, status),) = _statuses(out)
    assert (source_id, chunk_id, status.relation) == ("s", content_hash(SHORT), "canonical")
    assert status.canonical_position == 0  # the canonical position is this source's
    (chunk,) = _outputs(out, "canonical-chunks")
    record = chunk.record()
    assert record["source_count"] == 1 and record["canonical"] == {"source_id": "s", "position": 0}


def test_an_older_version_of_a_source_is_ignored(stage):
    stage(_ref(SHORT, version=2))
    assert stage(_ref(SHORT, version=1, positions=(0, 1))) == []
    assert stage.record(SHORT).positions == 1


def test_a_new_copy_is_counted_and_its_source_told_its_chunk(stage):
    stage(_ref(SHORT, "a", day=2))
    out = stage(_ref(SHORT, "b", day=1))
    ((source_id, chunk_id, status),) = _statuses(out)
    assert (source_id, chunk_id, status.canonical_position) == ("b", content_hash(SHORT), -1)  # not in "b"
    (chunk,) = _outputs(out, "canonical-chunks")
    assert chunk.record()["canonical"] == {
        "source_id": "a",
        "position": 0,
    }  # "a" is newer: it stays canonical
    assert chunk.record()["source_count"] == 2 and chunk.record()["revision"] == 2


def test_the_last_position_gone_leaves_the_bands_and_retracts_the_chunk(stage):
    _settled(stage, TEXT)
    out = stage(_ref(TEXT, version=2, positions=()))
    (leave,) = _of(out, BandLeave)
    assert leave.content_hash == content_hash(TEXT)
    assert [o.value for o in _outputs(out, "canonical-chunks")] == [None]
    assert [o.value["action"] for o in _outputs(out, "audit")] == ["retract"]
    assert not stage.record(TEXT).alive


# -- BandAck ---------------------------------------------------------------------------------------------------


def test_a_band_answer_without_candidates_completes_discovery_as_a_canonical(stage):
    out = _settled(stage, TEXT)
    ((_, chunk_id, status),) = _statuses(out)
    assert (chunk_id, status.relation) == (content_hash(TEXT), "canonical")
    assert len(_outputs(out, "canonical-chunks")) == 1
    assert stage.record(TEXT).role == "canonical"


def test_a_band_answer_for_another_epoch_or_a_second_time_changes_nothing(stage):
    (join,) = _of(stage(_ref(TEXT)), BandJoin)
    assert stage(BandAck(join.content_hash, join.epoch + 1, join.band_keys, (("f" * 64, 3),))) == []
    stage(BandAck(join.content_hash, join.epoch, join.band_keys))
    again = stage(BandAck(join.content_hash, join.epoch, join.band_keys, (("f" * 64, 3),)))
    assert _of(again, VerifyRequest) == []


# -- VerifyRequest ---------------------------------------------------------------------------------------------


def test_a_verify_request_from_a_near_copy_is_answered_with_an_edge_and_makes_it_a_neighbour(stage):
    _settled(stage, TEXT)
    sender = content_hash(NEAR)
    info = Info(3, "pending", _rank(NEAR, "n", 2), ("*",))
    out = stage(VerifyRequest(content_hash(TEXT), sender, 1, NEAR, NEAR, info))
    (result,) = _of(out, VerifyResult)
    assert result.content_hash == sender and result.edge and 0.8 <= result.jaccard < 1
    assert result.conflict is None and result.info.role == "canonical"
    assert sender in stage.record(TEXT).neighbors


def test_a_verify_request_that_changes_nothing_is_answered_with_the_settled_state_and_nothing_written(
    stage, monkeypatch
):
    _settled(stage, TEXT)
    far = " ".join(reversed(WORDS))  # the same words, no shared shingle: no edge
    request = VerifyRequest(
        content_hash(TEXT), content_hash(far), 1, far, far, Info(3, "pending", _rank(far, "f", 2), ("*",))
    )
    stage.txn.commit()
    out = stage(request)
    assert not any(stage.txn.changes.values())  # the content's record is not written again
    (result,) = out  # the answer, and nothing else
    record = stage.record(TEXT)
    assert (result.edge, result.jaccard, result.info) == (False, 0.0, record.sent_info)
    assert result.info.role == "canonical"
    # Settled as usual, the content sends the same answer (and writes the same record).
    monkeypatch.setattr(Settlement, "answer_unchanged", lambda self, work, out: False)
    assert stage(request) == out
    assert stage.record(TEXT) == record


def test_a_pair_in_fact_conflict_is_flagged_by_the_receiver_when_the_sender_ranks_better(stage):
    _settled(stage, THIRTY, "old", day=1)
    info = Info(3, "pending", _rank(FOURTEEN, "new", 5), ("*",))
    out = stage(VerifyRequest(content_hash(THIRTY), content_hash(FOURTEEN), 1, FOURTEEN, FOURTEEN, info))
    (result,) = _of(out, VerifyResult)
    assert not result.edge and result.conflict is None  # the receiver flags
    (flag,) = _outputs(out, "review")
    assert (
        flag.value["reason"] == "fact_conflict"
        and "14" in flag.value["detail"]
        and "30" in flag.value["detail"]
    )
    assert stage.record(THIRTY).conflicted and stage.record(THIRTY).neighbors == {}


def test_a_pair_in_fact_conflict_is_left_to_the_sender_when_the_receiver_ranks_better(stage):
    _settled(stage, THIRTY, "new", day=5)
    info = Info(3, "pending", _rank(FOURTEEN, "old", 1), ("*",))
    out = stage(VerifyRequest(content_hash(THIRTY), content_hash(FOURTEEN), 1, FOURTEEN, FOURTEEN, info))
    (result,) = _of(out, VerifyResult)
    assert not result.edge and result.conflict == ("30",) and result.text == THIRTY
    assert _outputs(out, "review") == []


def test_a_request_naming_a_band_candidate_by_its_content_id_reaches_the_content(stage):
    _settled(stage, TEXT)
    info = Info(3, "pending", _rank(NEAR, "n", 2), ("*",))
    out = stage(VerifyRequest(content_id(content_hash(TEXT)), content_hash(NEAR), 1, NEAR, NEAR, info))
    (result,) = _of(out, VerifyResult)
    # answered by the content under its whole hash, which the asker then holds as a neighbour
    assert (result.content_hash, result.sender, result.edge) == (content_hash(NEAR), content_hash(TEXT), True)
    assert content_hash(NEAR) in stage.record(TEXT).neighbors


def test_every_content_carrying_a_content_id_answers_a_request_by_that_id(stage, engine):
    # Two texts whose hashes share their first 8 bytes (made so here; about 3 in 10,000 among 10^8 texts): a
    # band bucket cannot tell them apart, so both verify the pair, and only the real near copy becomes an edge.
    _settled(stage, TEXT)
    other = content_hash(THIRTY)
    clash = content_id(content_hash(TEXT)) + other[16:]
    stage(RefUpdate(clash, "c", 1, (0,), (THIRTY,), THIRTY, _attrs(1)))
    index = Table(stage.state, ContentIds)
    entry = index.get_or_new(id_key(content_id(clash)))
    entry.hashes.append(clash)
    index.mark(id_key(content_id(clash)))
    index.flush()
    info = Info(3, "pending", _rank(NEAR, "n", 2), ("*",))
    out = stage(VerifyRequest(content_id(clash), content_hash(NEAR), 1, NEAR, NEAR, info))
    results = {r.sender: r for r in _of(out, VerifyResult)}
    assert set(results) == {content_hash(TEXT), clash}
    assert results[content_hash(TEXT)].edge and not results[clash].edge


def test_a_request_by_a_content_id_nobody_here_carries_is_answered_as_dead(stage):
    info = Info(3, "pending", _rank(NEAR, "n", 2), ("*",))
    (result,) = _of(stage(VerifyRequest("0" * 16, content_hash(NEAR), 1, NEAR, NEAR, info)), VerifyResult)
    assert (result.content_hash, result.sender) == (content_hash(NEAR), "0" * 16)
    assert (result.edge, result.jaccard, result.info.role) == (False, 0.0, "dead")


def _sketch(engine, text):
    signatures, _ = engine.scheme.signatures([normalize(text)])
    return sketches(signatures)[0]


def test_a_band_candidate_far_below_the_threshold_is_dismissed_by_its_sketch_without_reading_its_record(
    stage, engine
):
    _settled(stage, TEXT)
    before = msgspec.msgpack.encode(stage.record(TEXT))
    far = " ".join(reversed(WORDS))  # the same words, no shared shingle
    info = Info(3, "pending", _rank(far, "f", 2), ("*",))
    request = VerifyRequest(
        content_id(content_hash(TEXT)), content_hash(far), 1, far, far, info, sketch=_sketch(engine, far)
    )
    (result,) = _of(stage(request), VerifyResult)
    assert (result.content_hash, result.sender, result.edge) == (content_hash(far), content_hash(TEXT), False)
    # Answered from the content id index: not with the content's state (a canonical), and the content unchanged.
    assert result.jaccard < 0.5 and result.info == Info(0, "pending")
    assert stage.record(TEXT).role == "canonical"
    assert msgspec.msgpack.encode(stage.record(TEXT)) == before


def test_a_band_candidate_whose_sketch_may_reach_the_threshold_is_verified_exactly(stage, engine):
    _settled(stage, TEXT)
    info = Info(3, "pending", _rank(NEAR, "n", 2), ("*",))
    request = VerifyRequest(
        content_id(content_hash(TEXT)), content_hash(NEAR), 1, NEAR, NEAR, info, sketch=_sketch(engine, NEAR)
    )
    (result,) = _of(stage(request), VerifyResult)
    assert result.edge and result.jaccard == jaccard(normalize(TEXT), normalize(NEAR), 5)


def test_a_band_candidate_with_a_decision_about_the_pair_is_verified_whatever_its_sketch(stage, engine):
    _settled(stage, TEXT)
    far = " ".join(reversed(WORDS))
    info = Info(3, "pending", _rank(far, "f", 2), ("*",))
    request = VerifyRequest(
        content_id(content_hash(TEXT)),
        content_hash(far),
        1,
        far,
        far,
        info,
        PairMark("merge", 1),
        sketch=_sketch(engine, far),
    )
    (result,) = _of(stage(request), VerifyResult)
    assert result.edge and result.info.role == "canonical"  # the merge decision made it an edge
    assert content_hash(far) in stage.record(TEXT).neighbors


def test_a_content_that_asks_its_band_candidates_sends_its_sketch_and_then_forgets_it(stage, engine):
    request = _asking(stage, NEAR, TEXT)
    assert request.sketch == _sketch(engine, NEAR) and len(request.sketch) == engine.params.num_perm // 4
    assert stage.record(NEAR).sketch == b""
    index = _stored(stage.state, id_key(content_id(content_hash(NEAR))), ContentIds)
    assert index.sketches == [_sketch(engine, NEAR)]


def test_a_content_that_joins_its_bands_is_listed_under_its_content_id(stage):
    _settled(stage, TEXT)
    stage(_ref(SHORT))  # too short for near matching: never a candidate, not listed
    assert _stored(stage.state, id_key(content_id(content_hash(TEXT))), ContentIds).hashes == [
        content_hash(TEXT)
    ]
    assert _stored(stage.state, id_key(content_id(content_hash(SHORT))), ContentIds) is None


def test_a_dead_content_answers_a_verify_request_as_dead(stage):
    _settled(stage, TEXT)
    stage(_ref(TEXT, version=2, positions=()))
    info = Info(3, "pending", _rank(NEAR, "n", 2), ("*",))
    (result,) = _of(
        stage(VerifyRequest(content_hash(TEXT), content_hash(NEAR), 1, NEAR, NEAR, info)), VerifyResult
    )
    assert (result.edge, result.jaccard, result.info.role) == (False, 0.0, "dead")


# -- VerifyResult ----------------------------------------------------------------------------------------------


def _asking(stage, text, candidate, day=1):
    """A content that asked ``candidate`` to verify the pair; returns the request."""
    (join,) = _of(stage(_ref(text, "me", day=day)), BandJoin)
    out = stage(
        BandAck(join.content_hash, join.epoch, join.band_keys, ((content_id(content_hash(candidate)), 5),))
    )
    (request,) = _of(out, VerifyRequest)
    return request


def test_the_last_verify_result_completes_discovery_and_joins_the_better_canonical(stage):
    request = _asking(stage, NEAR, TEXT, day=1)
    assert request.content_hash == content_id(content_hash(TEXT)) and stage.record(NEAR).role == "pending"
    canonical = Info(4, "canonical", _rank(TEXT, "other", 9), ("*",))
    out = stage(VerifyResult(content_hash(NEAR), content_hash(TEXT), request.epoch, 0.86, True, canonical))
    assert stage.record(NEAR).role == "member" and stage.record(NEAR).target == content_hash(TEXT)
    ((_, chunk_id, status),) = _statuses(out)
    assert (chunk_id, status.relation) == (content_hash(TEXT), "near")
    (update,) = _of(out, NeighborUpdate)  # the canonical hears of its new member, with the member's report
    assert update.content_hash == content_hash(TEXT) and update.report is not None
    assert [o.value["action"] for o in _outputs(out, "audit")] == ["merge"]


def test_a_verify_result_that_leaves_the_flag_to_this_side_raises_it_once(stage):
    request = _asking(stage, FOURTEEN, THIRTY, day=1)
    better = Info(4, "canonical", _rank(THIRTY, "other", 9), ("*",))
    result = VerifyResult(
        content_hash(FOURTEEN), content_hash(THIRTY), request.epoch, 0.9, False, better, ("30",), THIRTY
    )
    (flag,) = _outputs(stage(result), "review")
    assert flag.value["reason"] == "fact_conflict" and {flag.value["a"]["text"], flag.value["b"]["text"]} == {
        THIRTY,
        FOURTEEN,
    }
    assert _outputs(stage(result), "review") == []  # a duplicate result raises nothing more
    assert stage.record(FOURTEEN).role == "canonical"


# -- NeighborUpdate --------------------------------------------------------------------------------------------


def test_a_members_report_is_listed_in_its_canonicals_chunk_and_a_stale_update_is_ignored(stage):
    _settled(stage, TEXT, "c", day=9)
    member = content_hash(NEAR)
    info = Info(3, "pending", _rank(NEAR, "m", 1), ("*",))
    stage(VerifyRequest(content_hash(TEXT), member, 1, NEAR, NEAR, info))  # now neighbours
    report = MemberReport(0.86, (SourceRef("m", 0, _attrs(1)),), 1, _rank(NEAR, "m", 1))
    joined = Info(5, "member", _rank(NEAR, "m", 1), ("*",), content_hash(TEXT))
    out = stage(NeighborUpdate(content_hash(TEXT), member, joined, report))
    (chunk,) = _outputs(out, "canonical-chunks")
    assert chunk.record()["member_count"] == 2 and chunk.record()["source_count"] == 2
    assert stage(NeighborUpdate(content_hash(TEXT), member, Info(4, "member"), None)) == []  # older seq


def test_a_dead_neighbour_is_dropped_with_its_report(stage):
    _settled(stage, TEXT, "c", day=9)
    member = content_hash(NEAR)
    info = Info(3, "pending", _rank(NEAR, "m", 1), ("*",))
    stage(VerifyRequest(content_hash(TEXT), member, 1, NEAR, NEAR, info))
    report = MemberReport(0.86, (SourceRef("m", 0, _attrs(1)),), 1, _rank(NEAR, "m", 1))
    stage(
        NeighborUpdate(
            content_hash(TEXT), member, Info(5, "member", info.rank, ("*",), content_hash(TEXT)), report
        )
    )
    out = stage(NeighborUpdate(content_hash(TEXT), member, Info(6, "dead")))
    (chunk,) = _outputs(out, "canonical-chunks")
    assert chunk.record()["member_count"] == 1 and member not in stage.record(TEXT).neighbors
