"""The review console: the fold of the outputs, the sample's statistics, the verdicts file, and the application."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from typer.testing import CliRunner

from streamdedup.cli.main import app as cli
from streamdedup.core.messages import Output
from streamdedup.core.params import EngineParams
from streamdedup.errors import StateError, StreamDedupError
from streamdedup.query.calibration import VerifiedPair
from streamdedup.review.console.data import (
    ConsoleData,
    differing_facts,
    line_subject,
    marked_pair,
    output_of_line,
    pair_subject,
    similarity_of,
)
from streamdedup.review.console.output_feeds import OutputFileFeed
from streamdedup.review.console.reader import StateReader
from streamdedup.review.console.stats import (
    Verdict,
    draw_sample,
    guard_tally,
    merge_precision,
    suggest_threshold,
    wilson_interval,
)
from streamdedup.review.console.verdicts import VerdictFile
from streamdedup.review.console.web import ConsoleConfig, create_app

EXAMPLE = Path(__file__).parents[2] / "examples" / "feed.jsonl"
PARAMS = EngineParams()
A, B, C = "a" * 64, "b" * 64, "c" * 64


def flag(
    reason: str, a: dict[str, Any], b: dict[str, Any], jaccard: float = 0.88, **more: Any
) -> dict[str, Any]:
    return {"schema": "streamdedup.review/v1", "reason": reason, "a": a, "b": b, "jaccard": jaccard, **more}


def decided(subject: str, kind: str, by: str = "ana", version: int = 1_700_000_000_000_000) -> Output:
    event = {"schema": "streamdedup.decision/v1", "decision": kind, "by": by, "version": version}
    value = {
        "schema": "streamdedup.audit/v1",
        "chunk_id": None,
        "action": "decision",
        "reason": kind,
        "decision": event,
        "by": by,
    }
    return Output("audit", subject, value)


def chunk(content_hash: str, text: str, sources: list[dict[str, Any]], members: list[str] = ()) -> Output:
    return Output(
        "canonical-chunks",
        content_hash,
        {
            "chunk_id": content_hash,
            "content_hash": content_hash,
            "text": text,
            "acl": sorted({a for s in sources for a in s["acl"]}),
            "members": [{"content_hash": content_hash, "relation": "canonical", "jaccard": 1.0}]
            + [{"content_hash": m, "relation": "near", "jaccard": 0.9} for m in members],
            "sources": sources,
            "source_count": len(sources),
        },
    )


def source(
    source_id: str, content_hash: str, acl: list[str], modified_at: str, **more: Any
) -> dict[str, Any]:
    return {
        "source_id": source_id,
        "position": 0,
        "content_hash": content_hash,
        "acl": acl,
        "modified_at": modified_at,
        "uri": f"https://example.com/{source_id}",
        **more,
    }


# --- the fold -----------------------------------------------------------------------------------------------------


def test_flags_are_open_until_tombstoned_and_listed_newest_first():
    data = ConsoleData().apply_all(
        [
            Output("review", f"{A}:{B}", flag("fact_conflict", {"content_hash": A}, {"content_hash": B})),
            Output("review", f"{A}:{C}", flag("acl_boundary", {"content_hash": A}, {"content_hash": C})),
            Output("review", f"{A}:{B}", None),
        ]
    )
    assert [f.key for f in data.open_flags()] == [f"{A}:{C}"]
    (resolved,) = data.resolved_flags()
    assert resolved.key == f"{A}:{B}" and resolved.reason == "fact_conflict"  # the last value is kept
    data.apply(Output("review", f"{B}:{C}", flag("semantic", {"content_hash": B}, {"content_hash": C})))
    assert [f.key for f in data.open_flags()] == [f"{B}:{C}", f"{A}:{C}"]
    # a flag raised again moves to the front
    data.apply(Output("review", f"{A}:{C}", flag("acl_boundary", {"content_hash": A}, {"content_hash": C})))
    assert [f.key for f in data.open_flags()] == [f"{A}:{C}", f"{B}:{C}"]


def test_the_latest_decision_per_subject_and_a_reopen_opens_the_flag_again():
    key = f"{A}:{B}"
    data = ConsoleData().apply_all(
        [
            Output("review", key, flag("fact_conflict", {"content_hash": A}, {"content_hash": B})),
            Output("review", key, None),
            decided(key, "keep_separate", by="ana"),
            Output("audit", "x", {"action": "merge", "reason": "near"}),  # not a decision
            decided(line_subject("docs", "all rights reserved"), "boilerplate_strip", by="bo"),
        ]
    )
    decision = data.decision(key)
    assert decision is not None
    assert (decision.kind, decision.by, decision.when) == ("keep_separate", "ana", "2023-11-14T22:13:20Z")
    assert data.decision(line_subject("docs", "all rights reserved")).kind == "boilerplate_strip"
    assert data.decision("x") is None
    assert data.open_flags() == [] and [f.key for f in data.resolved_flags()] == [key]
    data.apply(decided(key, "reopen", by="bo", version=1_700_000_000_000_001))
    assert [f.key for f in data.open_flags()] == [key]
    assert data.resolved_flags() == []


def test_a_decision_after_the_flag_resolves_it_until_the_flag_is_raised_again():
    key = f"{A}:{B}"
    raised = Output("review", key, flag("fact_conflict", {"content_hash": A}, {"content_hash": B}))
    data = ConsoleData().apply_all([raised, decided(key, "merge")])  # the tombstone has not arrived yet
    assert data.open_flags() == [] and [f.key for f in data.resolved_flags()] == [key]
    data.apply(raised)  # raised again after the decision
    assert [f.key for f in data.open_flags()] == [key]
    assert data.decision(key).kind == "merge"  # still shown with the flag


def test_a_side_is_completed_from_the_chunk_records():
    key = pair_subject(B, A)
    data = ConsoleData().apply_all(
        [
            chunk(
                A,
                "refunds within 30 days",
                [source("web:r", A, ["*"], "2024-01-05T12:00:00Z", title="Refunds")],
            ),
            chunk(
                B,
                "refunds within 14 days",
                [
                    source("zd:r", B, ["support"], "2024-03-28T09:40:00Z"),
                    source("zd:copy", B, ["sales"], "2024-04-01T00:00:00Z"),
                ],
            ),
            Output(
                "review", key, flag("acl_boundary", {"content_hash": A, "acl": ["*"]}, {"content_hash": B})
            ),
        ]
    )
    (item,) = data.open_flags()
    a, b = data.side(item, "a"), data.side(item, "b")
    assert (a.text, a.acl, a.relation, a.chunk_id) == ("refunds within 30 days", ("*",), "canonical", A)
    assert [(s.source_id, s.title, s.uri) for s in a.sources] == [
        ("web:r", "Refunds", "https://example.com/web:r")
    ]
    assert b.acl == ("sales", "support")  # the chunk's ACL: the flag's side names none
    assert b.modified_at == "2024-04-01T00:00:00Z"  # the newest of its sources'
    assert [s.source_id for s in b.sources] == ["zd:copy", "zd:r"] and not b.more_sources
    # after a merge, B is a near member of A's chunk and its own chunk is gone
    data.apply(Output("canonical-chunks", B, None))
    data.apply(
        chunk(
            A,
            "refunds within 30 days",
            [
                source("web:r", A, ["*"], "2024-01-05T12:00:00Z"),
                source("zd:r", B, ["support"], "2024-03-28T09:40:00Z"),
            ],
            [B],
        )
    )
    b = data.side(item, "b")
    assert (b.relation, b.chunk_id, b.text) == ("near", A, None)
    assert [s.source_id for s in b.sources] == ["zd:r"]
    data.apply(Output("canonical-chunks", A, None))
    assert data.side(item, "b").relation == "gone" and data.side(item, "b").sources == ()
    # a popular text: its chunk record lists the first sources only
    popular = chunk(A, "refunds within 30 days", [source("web:r", A, ["*"], "2024-01-05T12:00:00Z")])
    popular.value["source_count"] = 150
    data.apply(popular)
    assert data.side(item, "a").more_sources and len(data.side(item, "a").sources) == 1


def test_output_lines_of_a_file_are_read_as_records():
    output = output_of_line({"topic": "review", "key": "k", "value": None})
    assert output == Output("review", "k", None)
    with pytest.raises(ValueError, match="not an output line"):
        output_of_line({"topic": "review", "key": 3, "value": None})
    with pytest.raises(ValueError, match="not an output line"):
        output_of_line({"topic": "review", "key": "k", "value": [1]})


def test_words_and_fact_tokens_that_differ_are_marked():
    left, right = marked_pair(
        "Load the weights in float16, then\nserve.", "Load the weights in float32, then\nserve."
    )
    assert [(s.text, s.mark) for s in left if s.mark] == [("float16,", "fact")]
    assert [(s.text, s.mark) for s in right if s.mark] == [("float32,", "fact")]
    assert (
        "".join(s.text for s in left) == "Load the weights in float16, then\nserve."
    )  # the text is kept whole
    left, right = marked_pair("credited automatically to you", "credited proportionally to you")
    assert [(s.text, s.mark) for s in left if s.mark] == [("automatically", "diff")]
    assert [(s.text, s.mark) for s in right if s.mark] == [("proportionally", "diff")]
    assert differing_facts("within 30 days, not 2", "within 14 days, not 2") == (["30"], ["14"])


def test_semantic_flags_show_their_cosine():
    assert similarity_of({"reason": "semantic", "jaccard": 0.4, "cosine": 0.93}) == ("cosine", 0.93)
    assert similarity_of({"reason": "semantic", "jaccard": 0.4, "detail": "cosine 0.912"}) == (
        "cosine",
        0.912,
    )
    assert similarity_of({"reason": "semantic", "jaccard": 0.4, "detail": "close"}) == ("jaccard", 0.4)
    assert similarity_of({"reason": "acl_boundary", "jaccard": 0.85, "cosine": 0.99}) == ("jaccard", 0.85)


# --- the statistics -----------------------------------------------------------------------------------------------


def test_wilson_interval_matches_the_formula_and_stays_in_bounds():
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and math.isclose(high, 0.27753, abs_tol=1e-5)
    low, high = wilson_interval(10, 10)
    assert math.isclose(low, 0.72247, abs_tol=1e-5) and high == 1.0
    low, high = wilson_interval(45, 50)
    assert math.isclose(low, 0.78640, abs_tol=1e-5) and math.isclose(high, 0.95653, abs_tol=1e-5)
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_merge_precision_counts_pairs_at_or_above_the_threshold_without_fact_conflicts():
    verdicts = [
        Verdict(0.95, True),
        Verdict(0.8, False),  # exactly at the threshold: counted
        Verdict(0.79, False),  # below: not merged
        Verdict(0.9, False, fact_conflict=True),  # the guard keeps it apart at any threshold
    ]
    precision = merge_precision(verdicts, 0.8)
    assert (precision.judged, precision.correct, precision.estimate) == (2, 1, 0.5)
    assert precision.interval == wilson_interval(1, 2)
    assert (
        merge_precision(verdicts, 0.99).estimate is None and merge_precision(verdicts, 0.99).interval is None
    )
    assert guard_tally(verdicts).judged == 1 and guard_tally(verdicts).kept_apart_rightly == 1


def test_the_suggested_threshold_is_the_lowest_that_reaches_the_target_by_the_lower_bound():
    # 80 correct verdicts from 0.6 up: the lower bound at 0.6 is 80 / (80 + z^2) > 0.95
    correct = [Verdict(0.6 + 0.003 * i, True) for i in range(80)]
    advice = suggest_threshold(correct, 0.8)
    assert advice.supported and advice.threshold == 0.6
    # an incorrect verdict at 0.61 moves the suggestion above it
    advice = suggest_threshold([*correct, Verdict(0.61, False)], 0.8)
    assert advice.supported and 0.61 < advice.threshold <= 0.62
    # few verdicts: nothing reaches 0.95 by the lower bound, so the current threshold stays, and it says why
    advice = suggest_threshold([Verdict(0.9, True)] * 10, 0.8)
    assert not advice.supported and advice.threshold == 0.8 and "73" in advice.reason
    # fact conflicts are no evidence about the threshold
    assert suggest_threshold([Verdict(0.5, True, fact_conflict=True)] * 100, 0.8).threshold == 0.8


def test_the_sample_is_reproducible_and_drawn_around_the_threshold():
    pairs = [VerifiedPair(f"b{i:03d}", f"w{i:03d}", i / 200, False, False) for i in range(100, 200)]
    drawn = draw_sample(pairs, 0.8, 10)
    assert len(drawn) == 10 and len(set(drawn)) == 10
    assert drawn == draw_sample(list(reversed(pairs)), 0.8, 10)  # the same pairs however they come
    nearest = sorted(pairs, key=lambda p: abs(p.jaccard - 0.8))[:21]
    assert set(drawn) <= set(nearest)
    assert [p.jaccard for p in drawn] == sorted((p.jaccard for p in drawn), reverse=True)
    assert draw_sample(pairs, 0.8, 10, seed=1) != drawn  # the seed decides the draw
    assert draw_sample(pairs[:3], 0.8, 10) == sorted(
        pairs[:3], key=lambda p: -p.jaccard
    )  # fewer: all of them


def test_verdicts_survive_a_reload_and_can_be_taken_back(tmp_path: Path):
    path = tmp_path / "verdicts.json"
    verdicts = VerdictFile(path)
    assert verdicts.load() == {} and verdicts.verdicts() == []
    verdicts.record("a:b", "correct", jaccard=0.9, fact_conflict=False, by="ana")
    verdicts.record("a:c", "incorrect", jaccard=0.85, fact_conflict=True, by="ana")
    again = VerdictFile(path)
    assert again.load()["a:b"]["verdict"] == "correct"
    assert sorted(again.verdicts(), key=lambda v: v.jaccard) == [
        Verdict(0.85, False, True),
        Verdict(0.9, True),
    ]
    again.record("a:b", None, jaccard=0.9, fact_conflict=False, by="ana")
    assert list(VerdictFile(path).load()) == ["a:c"]
    with pytest.raises(ValueError):
        again.record("a:b", "maybe", jaccard=0.9, fact_conflict=False, by="ana")
    path.write_text('{"schema": "other"}')
    with pytest.raises(StateError, match="not a verdicts file"):
        VerdictFile(path).load()


# --- reading the outputs and the state ----------------------------------------------------------------------------


def test_the_output_file_is_read_as_it_grows_and_again_when_replaced(tmp_path: Path):
    path = tmp_path / "out.jsonl"
    feed = OutputFileFeed(path)
    assert feed.problem is not None and feed.refresh().records == 0
    line = json.dumps(
        {
            "topic": "review",
            "key": f"{A}:{B}",
            "value": flag("semantic", {"content_hash": A}, {"content_hash": B}),
        }
    )
    path.write_text(
        line + "\n" + '{"topic": "review", "key": "x:y"'
    )  # the second line is still being written
    assert [f.key for f in feed.refresh().open_flags()] == [f"{A}:{B}"]
    with path.open("a") as out:
        out.write(', "value": null}\nnot json\n')
    data = feed.refresh()
    assert data.records == 2 and feed.skipped == 1
    path.unlink()
    path.write_text(json.dumps({"topic": "review", "key": f"{A}:{B}", "value": None}) + "\n")
    data = feed.refresh()
    assert data.records == 1 and data.open_flags() == [] and data.resolved_flags() == []


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The bundled example's state and output file, as ``make example`` writes them."""
    root = tmp_path_factory.mktemp("example")
    state, out = root / "state", root / "out.jsonl"
    result = CliRunner().invoke(
        cli, ["run", str(EXAMPLE), "--state", str(state), "--out", str(out), "--batch-size", "1"]
    )
    assert result.exit_code == 0, result.output
    return state, out


def test_the_state_reader_reads_lines_texts_and_pairs_without_holding_the_state(example):
    state, out = example
    reader = StateReader(state, PARAMS)
    (collection,) = reader.collections(top=5, decided={"default": ["a line nobody wrote"]})
    assert collection.name == "default" and collection.documents == 2
    assert ("reset your password", 2) in [(line.text, line.documents) for line in collection.frequent]
    assert ("a line nobody wrote", 0) in [(line.text, line.documents) for line in collection.frequent]
    data = OutputFileFeed(out).refresh()
    hashes = [h for f in data.open_flags() for h in f.hashes]
    texts = reader.texts(hashes)
    assert set(texts) == set(hashes) and any("float16" in t for t in texts.values())
    corpus, pairs = reader.calibration_pairs()
    assert len(corpus.texts) > 4 and {p.fact_conflict for p in pairs} == {True, False}
    # nothing is held open: the state opens read-write at once
    inspect = CliRunner().invoke(
        cli, ["inspect", "--state", str(state), "--source", "web:help/refunds", "--json"]
    )
    assert inspect.exit_code == 0, inspect.output
    with pytest.raises(StateError, match="no state"):
        StateReader(state.parent / "nowhere", PARAMS).texts([A])


# --- the application ----------------------------------------------------------------------------------------------


class Recorder:
    """A submitter that records the events it is given, or fails as told."""

    def __init__(self, fails: Exception | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.fails = fails

    async def __call__(self, event: dict[str, Any]) -> str:
        if self.fails is not None:
            raise self.fails
        self.events.append(event)
        return "recorded"


def call(application: Any, steps: Callable[[TestClient], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        async with TestClient(TestServer(application)) as client:
            return await steps(client)

    return asyncio.run(go())


def console(example, tmp_path: Path, submit: Recorder, *, with_state: bool = True) -> Any:
    state, out = example
    config = ConsoleConfig(
        by="ana",
        params=PARAMS,
        state=state if with_state else None,
        verdicts=tmp_path / "verdicts.json" if with_state else None,
        sample=10,
    )
    return create_app(config, OutputFileFeed(out), submit)


def flag_keys(out: Path) -> dict[str, str]:
    """Return the example's flag keys by what tells them apart."""
    data = OutputFileFeed(out).refresh()
    keys = {}
    for item in data.open_flags():
        detail = str(item.value.get("detail"))
        name = "acl" if item.reason == "acl_boundary" else "float" if "float16" in detail else "refund"
        keys[name] = item.key
    assert set(keys) == {"acl", "float", "refund"}
    return keys


def test_the_queue_shows_each_flag_with_its_differences_and_buttons(example, tmp_path):
    out = example[1]

    async def steps(client: TestClient) -> str:
        response = await client.get("/queue")
        assert response.status == 200
        return await response.text()

    page = call(console(example, tmp_path, Recorder()), steps)
    keys = flag_keys(out)
    assert len(re.findall(r'<article class="flag open"', page)) == 3
    assert '<mark class="fact">float16</mark>' in page and '<mark class="fact">float32</mark>' in page
    assert (
        '<mark class="diff">automatically.</mark>' in page
    )  # the acl_boundary pair's texts come from the chunks
    assert f'data-decision="merge" data-pair="{keys["acl"]}"' in page
    assert "docs:ml/serving-guide" in page and "2024-02-20T11:00:00Z" in page
    assert "Nothing decided yet." in page


def test_a_decision_is_checked_and_submitted(example, tmp_path):
    out = example[1]
    keys = flag_keys(out)
    recorder = Recorder()

    async def steps(client: TestClient) -> list[tuple[int, dict[str, Any]]]:
        answers = []
        for body in (
            {
                "decision": "keep_separate",
                "pair": list(reversed(keys["float"].split(":"))),
                "note": "different",
            },
            {"decision": "merge", "pair": keys["acl"].split(":")},
            {"decision": "merge", "pair": [A, B]},
            {"decision": "boilerplate_strip", "collection": "default", "line": "reset your password"},
            {"decision": "prefer", "source_id": "web:help/refunds"},
            {"decision": "shrug", "pair": [A, B]},
            {"decision": "boilerplate_allow", "collection": "default"},
        ):
            response = await client.post("/api/decision", json=body)
            answers.append((response.status, await response.json()))
        response = await client.post(
            "/api/decision", data=b"not json", headers={"Content-Type": "application/json"}
        )
        answers.append((response.status, await response.json()))
        # a form post, as another site's page could send without a preflight, is not taken
        response = await client.post("/api/decision", data={"decision": "keep_separate", "pair": "x"})
        answers.append((response.status, await response.json()))
        return answers

    answers = call(console(example, tmp_path, recorder), steps)
    statuses = [status for status, _ in answers]
    assert statuses == [200, 409, 404, 200, 200, 400, 400, 400, 415]
    assert answers[0][1]["subject"] == keys["float"] and answers[0][1]["applied"] is True
    refusal = answers[1][1]["error"]
    assert "acl_boundary is never made" in refusal and "not a valid decision" not in refusal  # it says why
    kinds = [
        (e["decision"], e.get("pair"), e.get("collection"), e.get("line"), e.get("source_id"))
        for e in recorder.events
    ]
    assert kinds == [
        ("keep_separate", sorted(keys["float"].split(":")), None, None, None),
        ("boilerplate_strip", None, "default", "reset your password", None),
        ("prefer", None, None, None, "web:help/refunds"),
    ]
    assert all(e["by"] == "ana" for e in recorder.events)
    assert recorder.events[0].get("note") == "different"


def test_a_decision_the_state_cannot_take_is_reported(example, tmp_path):
    out = example[1]
    keys = flag_keys(out)

    async def steps(client: TestClient) -> tuple[int, dict[str, Any]]:
        response = await client.post(
            "/api/decision", json={"decision": "keep_separate", "pair": keys["refund"].split(":")}
        )
        return response.status, await response.json()

    status, answer = call(
        console(example, tmp_path, Recorder(fails=StreamDedupError("the state is busy"))), steps
    )
    assert status == 503 and "the state is busy" in answer["error"]


def test_decided_flags_show_who_decided_and_offer_an_undo(example, tmp_path):
    state, out = example
    copy = tmp_path / "out.jsonl"
    copy.write_bytes(out.read_bytes())
    key = flag_keys(out)["float"]
    with copy.open("a") as handle:
        for record in (Output("review", key, None), decided(key, "keep_separate", by="bo")):
            handle.write(json.dumps({"topic": record.topic, "key": record.key, "value": record.value}) + "\n")
    config = ConsoleConfig(by="ana", params=PARAMS, state=state, verdicts=tmp_path / "v.json", sample=10)

    async def steps(client: TestClient) -> str:
        return await (await client.get("/queue")).text()

    page = call(create_app(config, OutputFileFeed(copy), Recorder()), steps)
    decided_part = page.split('<section id="decided">', 1)[1]
    assert len(re.findall(r'<article class="flag open"', page)) == 2
    assert f'data-key="{key}"' in decided_part and "keep_separate" in decided_part and "bo" in decided_part
    assert "2023-11-14T22:13:20Z" in decided_part
    assert f'data-decision="reopen" data-pair="{key}"' in decided_part


def test_the_calibration_sample_takes_verdicts_and_updates_the_estimate(example, tmp_path):
    async def steps(client: TestClient) -> tuple[str, list[dict[str, Any]], str]:
        first = await (await client.get("/calibration")).text()
        keys = re.findall(r'<article class="sample[^"]*" data-key="([0-9a-f:]+)" data-outcome="(\w+)"', first)
        answers = []
        for key, outcome in keys:
            verdict = "incorrect" if outcome == "fact_conflict" else "correct"
            response = await client.post("/api/verdict", json={"key": key, "verdict": verdict})
            answers.append(await response.json())
        bad = await client.post("/api/verdict", json={"key": "nope", "verdict": "correct"})
        assert bad.status == 404
        wrong = await client.post("/api/verdict", json={"key": keys[0][0], "verdict": "maybe"})
        assert wrong.status == 400
        again = await (await client.get("/calibration")).text()
        return first, answers, again

    first, answers, again = call(console(example, tmp_path, Recorder()), steps)
    assert "no verdict yet" in first
    assert len(answers) == 4 and all(a["ok"] for a in answers)
    assert "Estimated precision of merges at the threshold 0.80: 100.0% (2 of 2" in answers[-1]["html"]
    assert "of 2 judged pair(s) that state different facts, 2 were judged incorrect" in answers[-1]["html"]
    assert again.count('aria-pressed="true"') == 4  # the verdicts are kept
    saved = json.loads((tmp_path / "verdicts.json").read_text())["verdicts"]
    assert len(saved) == 4 and {v["by"] for v in saved.values()} == {"ana"}


def test_the_calibration_sample_shows_the_queue_s_decision_on_a_pair(example, tmp_path):
    state, out = example
    copy = tmp_path / "out.jsonl"
    copy.write_bytes(out.read_bytes())
    key = flag_keys(out)["refund"]
    with copy.open("a") as handle:
        record = decided(key, "merge", by="bo")
        handle.write(json.dumps({"topic": record.topic, "key": record.key, "value": record.value}) + "\n")
    config = ConsoleConfig(by="ana", params=PARAMS, state=state, verdicts=tmp_path / "v.json", sample=10)

    async def steps(client: TestClient) -> str:
        return await (await client.get("/calibration")).text()

    page = call(create_app(config, OutputFileFeed(copy), Recorder()), steps)
    item = page.split(f'data-key="{key}"', 1)[1].split("</article>", 1)[0]
    assert "reviewer's decision in the queue: <strong>merge</strong> by bo" in item
    assert page.count("reviewer's decision in the queue") == 1


def test_the_boilerplate_tab_lists_lines_with_their_decisions(example, tmp_path):
    state, out = example
    copy = tmp_path / "out.jsonl"
    copy.write_bytes(out.read_bytes())
    with copy.open("a") as handle:
        record = decided(line_subject("default", "reset your password"), "boilerplate_allow", by="bo")
        record.value["decision"].update(collection="default", line="reset your password")
        handle.write(json.dumps({"topic": record.topic, "key": record.key, "value": record.value}) + "\n")
    config = ConsoleConfig(by="ana", params=PARAMS, state=state, verdicts=tmp_path / "v.json", sample=10)

    async def steps(client: TestClient) -> str:
        return await (await client.get("/boilerplate")).text()

    page = call(create_app(config, OutputFileFeed(copy), Recorder()), steps)
    assert '<section class="collection" data-collection="default">' in page
    assert "2 document(s), 0 boilerplate line(s)" in page
    row = page.split('data-line="reset your password"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="documents">2</td>' in row and "allow by bo" in row
    assert 'data-decision="boilerplate_strip"' in row


def test_without_a_state_the_calibration_and_boilerplate_tabs_say_what_they_need(example, tmp_path):
    async def steps(client: TestClient) -> tuple[str, str, int]:
        calibration = await (await client.get("/calibration")).text()
        boilerplate = await (await client.get("/boilerplate")).text()
        verdict = await client.post("/api/verdict", json={"key": "a:b", "verdict": "correct"})
        return calibration, boilerplate, verdict.status

    calibration, boilerplate, status = call(console(example, tmp_path, Recorder(), with_state=False), steps)
    assert "start the console with --state DIR" in calibration
    assert "start the console with --state DIR" in boilerplate
    assert status == 409
