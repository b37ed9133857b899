"""Reviewers' decisions in the engine, on the bundled example's flags: keep_separate, merge, prefer, boilerplate.

Each test runs the example feed, finds the flag it is about in the outputs, and applies a decision as an input
event, the way the console and ``streamdedup decide`` do.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from streamdedup.contract.codec import decode_event, encode_event
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.model import DecisionEvent, DeleteEvent
from streamdedup.core.output_view import View
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.errors import InvalidEventError
from streamdedup.review.decisions import DecisionRefused, check_decision, decision_event, parse_decision
from streamdedup.store.memory import MemoryStore
from streamdedup.testing.invariants import check_invariants
from streamdedup.testing.reference import Reference, decisions_in_force, live_sources
from tests.helpers import upsert

EXAMPLE = Path(__file__).parents[2] / "examples" / "feed.jsonl"


def example_events() -> list:
    events = []
    for line in EXAMPLE.read_bytes().splitlines():
        try:
            events.append(decode_event(line))
        except InvalidEventError:
            continue  # the example holds one invalid line on purpose
    return events


class Run:
    """The example's state, with a view of its outputs, to which more events are applied."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.runner = EmbeddedRunner(engine, MemoryStore())
        self.view = View()
        self.events: list = []
        self.outputs: list[Output] = []
        self.flags: dict[str, dict] = {}
        self.apply(*example_events())

    def apply(self, *events) -> list[Output]:
        produced: list[Output] = []
        for event in events:
            produced += self.runner.process([event], lambda outputs: None)
            self.events.append(event)
        self.view.apply_all(produced)
        self.outputs += produced
        for output in produced:
            if output.topic == "review":
                if output.value is None:
                    self.flags.pop(output.key, None)
                else:
                    self.flags[output.key] = output.value
        return produced

    def decide(self, kind: str, key: str, **fields) -> list[Output]:
        data = decision_event(kind, by="ana", pair=tuple(key.split(":")), **fields)
        return self.apply(parse_decision(data))

    def flag(self, words: str) -> tuple[str, dict]:
        found = [(k, v) for k, v in self.flags.items() if words in json.dumps(v)]
        assert len(found) == 1, f"expected one open flag with {words!r}, found {len(found)}"
        return found[0]

    def sound(self) -> None:
        live, decisions = live_sources(self.events), decisions_in_force(self.events)
        assert check_invariants(self.view, live, threshold=0.8, shingle_size=5, decisions=decisions) == []
        assert self.view.compacted(with_revision=False) == Reference(self.engine, live, decisions).compacted()


@pytest.fixture
def run(engine) -> Run:
    return Run(engine)


def delete(source_id: str, version: int) -> DeleteEvent:
    return DeleteEvent(source_id=source_id, version=version)


def _side_text(flag: dict, token: str) -> str:
    return next(side["text"] for side in (flag["a"], flag["b"]) if token in side.get("text", ""))


def test_the_example_raises_the_three_flags_the_console_shows(run):
    reasons = sorted(v["reason"] for v in run.flags.values())
    assert reasons == ["acl_boundary", "fact_conflict", "fact_conflict"]
    run.flag("float16")
    run.flag("refund")


def test_keep_separate_resolves_the_flag_and_it_never_comes_back(engine):
    # The control: without a decision, the float16 text raises its flag again when it comes back to life.
    control = Run(engine)
    key, flag = control.flag("float16")
    text16 = _side_text(flag, "weights in float16")
    holders = [s for s in live_sources(control.events).values() if text16 in s.texts]
    deletes = [delete(s.source_id, s.version + 1) for s in holders]
    control.apply(*deletes)
    control.flags.clear()
    control.apply(upsert("reborn:float16", 1, [text16], acl=("eng",), day=800))
    assert key in control.flags, "the control should flag the reborn text again"

    run = Run(engine)
    produced = run.decide("keep_separate", key, reason="fact_conflict")
    assert Output("review", key, None) in produced
    audits = [o.value for o in produced if o.topic == "audit"]
    assert [(a["action"], a["reason"], a["by"], a["subject"]) for a in audits] == [
        ("decision", "keep_separate", "ana", key)
    ]
    assert key not in run.flags
    # A new copy of the same text raises no new flag; nor does the text reborn after every copy was deleted.
    produced = run.apply(upsert("copy:float16", 1, [text16], acl=("eng",), day=700))
    assert [o for o in produced if o.topic == "review"] == []
    run.apply(*deletes, delete("copy:float16", 2))
    produced = run.apply(upsert("reborn:float16", 1, [text16], acl=("eng",), day=800))
    assert [o for o in produced if o.topic == "review"] == []
    run.sound()


def test_merge_of_a_fact_conflict_makes_one_chunk_and_resolves_the_flag(run):
    key, _ = run.flag("refund")
    before = {s: m["chunks"][0]["chunk_id"] for s, m in run.view.mappings.items() if "refund" in s}
    assert len(set(before.values())) == 2
    produced = run.decide("merge", key, reason="fact_conflict")
    assert Output("review", key, None) in produced
    after = {s: m["chunks"][0] for s, m in run.view.mappings.items() if "refund" in s}
    assert len({e["chunk_id"] for e in after.values()}) == 1
    # The public page is the canonical (its readers cover the support macro's); the macro is near it.
    assert after["web:help/refunds"]["relation"] == "canonical"
    assert after["zendesk:macros/refund-reply"]["relation"] == "near"
    assert after["zendesk:macros/refund-reply"]["jaccard"] < 1.0
    run.sound()
    # Without the decision the invariants see what the decision allowed: a near relation across different facts.
    live = live_sources(run.events)
    problems = check_invariants(run.view, live, threshold=0.8, shingle_size=5)
    assert any(p.startswith("I6") for p in problems)
    # Reopening gives the pair back to the rules: two chunks and the flag again.
    run.decide("reopen", key)
    assert len({run.view.mappings[s]["chunks"][0]["chunk_id"] for s in after}) == 2
    assert run.flags[key]["reason"] == "fact_conflict"
    run.sound()


def test_a_merge_of_an_acl_boundary_flag_is_refused(run):
    key, flag = (
        run.flag("pricing")
        if any("pricing" in json.dumps(v) for v in run.flags.values())
        else next((k, v) for k, v in run.flags.items() if v["reason"] == "acl_boundary")
    )
    assert flag["reason"] == "acl_boundary"
    event = decision_event("merge", by="ana", pair=tuple(key.split(":")))
    with pytest.raises(DecisionRefused, match="acl_boundary"):
        check_decision(event, flag)
    with pytest.raises(DecisionRefused, match="acl_boundary"):
        decision_event("merge", by="ana", pair=tuple(key.split(":")), reason="acl_boundary")
    with pytest.raises(InvalidEventError, match="acl_boundary"):
        decode_event(json.dumps({**event, "reason": "acl_boundary"}))
    assert key in run.flags


def test_prefer_makes_a_source_the_canonical_of_its_cluster_and_unprefer_undoes_it(run):
    chunk_id = run.view.mappings["confluence:support/reset-password"]["chunks"][0]["chunk_id"]
    assert run.view.chunks[chunk_id]["canonical"]["source_id"] == "confluence:eng/reset-password"
    prefer = parse_decision(decision_event("prefer", by="ana", source_id="confluence:support/reset-password"))
    produced = run.apply(prefer)
    assert run.view.chunks[chunk_id]["canonical"]["source_id"] == "confluence:support/reset-password"
    assert {(o.value["action"], o.value["reason"]) for o in produced if o.topic == "audit"} >= {
        ("decision", "prefer"),
        ("swap", "preferred by a reviewer"),
    }
    run.sound()
    # The preference holds across a new version of the source.
    first = next(e for e in example_events() if e.source_id == "confluence:support/reset-password")
    run.apply(msgspec.structs.replace(first, version=5))
    assert run.view.chunks[chunk_id]["canonical"]["source_id"] == "confluence:support/reset-password"
    run.apply(
        parse_decision(decision_event("unprefer", by="ana", source_id="confluence:support/reset-password"))
    )
    assert run.view.chunks[chunk_id]["canonical"]["source_id"] == "confluence:eng/reset-password"
    run.sound()


def test_replays_and_older_decisions_change_nothing(run):
    key, _ = run.flag("refund")
    first = parse_decision(decision_event("merge", by="ana", pair=tuple(key.split(":")), version=10))
    run.apply(first)
    assert run.apply(first) == []
    older = parse_decision(decision_event("keep_separate", by="bo", pair=tuple(key.split(":")), version=9))
    assert run.apply(older) == []
    equal = parse_decision(decision_event("reopen", by="bo", pair=tuple(key.split(":")), version=10))
    assert run.apply(equal) == []
    prefer = parse_decision(decision_event("prefer", by="ana", source_id="web:help/refunds", version=3))
    run.apply(prefer)
    compacted = run.view.compacted()
    assert run.apply(prefer) == []
    assert (
        run.apply(
            parse_decision(decision_event("unprefer", by="bo", source_id="web:help/refunds", version=2))
        )
        == []
    )
    assert run.view.compacted() == compacted


def test_boilerplate_decisions_override_the_counts():
    engine = Engine(EngineParams(boilerplate_min_docs=4, boilerplate_fraction=0.5))
    footer = "Questions? Write to help@example.com"
    rare = "Internal: do not forward"
    docs = [
        decode_event(json.dumps({
            "schema": "streamdedup.document/v1", "op": "upsert", "source_id": f"kb/{i}", "version": 1,
            "modified_at": "2024-01-01T00:00:00Z", "acl": ["*"], "collection": "kb",
            "text": f"Article {i} explains topic number {i} in words of its own.\n{footer}"
                    + (f"\n{rare}" if i == 0 else ""),
        }))
        for i in range(6)
    ]  # fmt: skip
    runner = EmbeddedRunner(engine, MemoryStore())
    view = View()

    def texts_of(source_id: str) -> list[str]:
        return [view.chunks[e["chunk_id"]]["text"] for e in view.mappings[source_id]["chunks"]]

    for doc in docs:
        view.apply_all(runner.process([doc], lambda o: None))
    late = msgspec.structs.replace(docs[5], version=2)
    view.apply_all(runner.process([late], lambda o: None))
    assert not any(footer in t for t in texts_of("kb/5")), "the footer is boilerplate by its counts"
    allow = parse_decision(decision_event("boilerplate_allow", by="ana", collection="kb", line=footer))
    strip = parse_decision(decision_event("boilerplate_strip", by="ana", collection="kb", line=rare))
    produced = runner.process([allow, strip], lambda o: None)
    view.apply_all(produced)
    assert [o.value["reason"] for o in produced if o.topic == "audit"] == [
        "boilerplate_allow",
        "boilerplate_strip",
    ]
    view.apply_all(runner.process([msgspec.structs.replace(docs[5], version=3)], lambda o: None))
    view.apply_all(runner.process([msgspec.structs.replace(docs[0], version=2)], lambda o: None))
    assert any(footer in t for t in texts_of("kb/5")), "allowed: the footer stays"
    assert not any(rare in t for t in texts_of("kb/0")), "stripped: the rare line goes"
    auto = parse_decision(decision_event("boilerplate_auto", by="bo", collection="kb", line=footer))
    view.apply_all(runner.process([auto], lambda o: None))
    view.apply_all(runner.process([msgspec.structs.replace(docs[5], version=4)], lambda o: None))
    assert not any(footer in t for t in texts_of("kb/5")), "auto: the counts decide again"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"decision": "merge", "pair": ["a" * 64]}, "pair"),
        ({"decision": "merge", "pair": ["a" * 64, "a" * 64]}, "pair"),
        ({"decision": "merge", "pair": ["A" * 64, "b" * 64]}, "pair"),
        ({"decision": "approve", "pair": ["a" * 64, "b" * 64]}, "decision"),
        ({"decision": "prefer", "pair": ["a" * 64, "b" * 64]}, "source_id"),
        ({"decision": "prefer", "source_id": "a\x00b"}, "source_id"),
        ({"decision": "boilerplate_strip", "line": "x"}, "line"),
        ({"decision": "keep_separate", "pair": ["a" * 64, "b" * 64], "by": ""}, "by"),
        ({"decision": "keep_separate", "pair": ["a" * 64, "b" * 64], "reason": "dislike"}, "reason"),
        ({"decision": "keep_separate", "pair": ["a" * 64, "b" * 64], "extra": 1}, "extra"),
        ({"decision": "keep_separate", "pair": ["a" * 64, "b" * 64], "version": -1}, "version"),
    ],
)
def test_invalid_decisions_are_refused_naming_the_field(data, field):
    event = {"schema": "streamdedup.decision/v1", "version": 1, "by": "ana", **data}
    with pytest.raises(InvalidEventError) as caught:
        decode_event(json.dumps(event))
    assert caught.value.field == field


def test_a_decision_round_trips_through_the_codec():
    data = decision_event(
        "keep_separate", by="ana", pair=("b" * 64, "a" * 64), note="two versions", version=7
    )
    event = decode_event(json.dumps(data))
    assert isinstance(event, DecisionEvent)
    assert event.pair == ("a" * 64, "b" * 64) and event.subject == f"{'a' * 64}:{'b' * 64}"
    assert json.loads(encode_event(event)) == data


def test_the_decide_command_applies_prints_and_refuses(tmp_path):
    from typer.testing import CliRunner

    from streamdedup.cli.main import app

    state, out = tmp_path / "state", tmp_path / "out.jsonl"
    cli = CliRunner()
    ran = cli.invoke(
        app, ["run", str(EXAMPLE), "--state", str(state), "--out", str(out), "--batch-size", "1"]
    )
    assert ran.exit_code == 0, ran.output
    flags = {}
    for line in out.read_text().splitlines():
        record = json.loads(line)
        if record["topic"] == "review":
            flags[record["value"]["reason"] + ("-refund" if "refund" in line else "")] = record["key"]
    embedded = ["--state", str(state), "--out", str(out), "--by", "ana"]

    refused = cli.invoke(app, ["decide", "merge", flags["acl_boundary"], *embedded])
    assert refused.exit_code == 1 and "acl_boundary" in " ".join(refused.output.split())
    refused = cli.invoke(
        app, ["decide", "merge", flags["acl_boundary"], "--print", "--reason", "acl_boundary"]
    )
    assert refused.exit_code == 1

    merged = cli.invoke(app, ["decide", "merge", flags["fact_conflict-refund"], *embedded])
    assert merged.exit_code == 0, merged.output
    appended = [json.loads(line) for line in out.read_text().splitlines()][-8:]
    assert {"topic": "review", "key": flags["fact_conflict-refund"], "value": None} in appended
    decision = next(
        r["value"] for r in appended if r["topic"] == "audit" and r["value"]["action"] == "decision"
    )
    assert (decision["reason"], decision["by"], decision["decision"]["reason"]) == (
        "merge",
        "ana",
        "fact_conflict",
    )

    printed = cli.invoke(app, ["decide", "prefer", "web:help/refunds", "--print", "--version", "4"])
    assert printed.exit_code == 0, printed.output
    event = json.loads(printed.stdout.splitlines()[0])
    assert parse_decision(event).subject == "source:web:help/refunds" and event["version"] == 4

    neither = cli.invoke(app, ["decide", "reopen", flags["fact_conflict-refund"]])
    assert neither.exit_code == 1 and "--print" in neither.output
