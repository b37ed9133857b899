"""Threshold calibration: counts against a brute force over every pair, the suggestion, samples and the command."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.contract.codec import encode_event
from streamdedup.core.engine import Engine
from streamdedup.core.facts import fact_tokens
from streamdedup.core.model import AclEvent, DeleteEvent, InputEvent
from streamdedup.core.normalize import normalize
from streamdedup.core.params import EngineParams, candidate_probability
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.feeds import run_feed
from streamdedup.drivers.jsonl import JsonlFeed
from streamdedup.query.calibration import (
    GRID,
    Calibration,
    calibrate,
    candidate_banding,
    suggest,
    thresholds,
    word_diff,
)
from streamdedup.query.corpus import corpus_from_events
from streamdedup.store.memory import MemoryStore
from streamdedup.store.rocksdb import RocksDBStore
from tests.helpers import upsert
from tests.unit.test_fast_start import _loaded_after

EXAMPLE = Path(__file__).parents[2] / "examples" / "feed.jsonl"
PARAMS = EngineParams()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --- a corpus with known edits ------------------------------------------------------------------------------------


def _vocabulary(seed: int, size: int) -> list[str]:
    """Distinct made-up words of letters only: no digit, number, month or negation, so none is a fact token."""
    rng = random.Random(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        word = "".join(rng.choice("bcdfghjklmprstvz") + rng.choice("aeiou") for _ in range(3))
        if not fact_tokens(word):
            words[word] = None
    return list(words)


class _Words:
    """Hands out fresh words, so that texts built from different draws share no shingle."""

    def __init__(self) -> None:
        self._words = iter(_vocabulary(7, 20_000))

    def take(self, count: int) -> list[str]:
        return list(itertools.islice(self._words, count))


def _replace(words: list[str], at: list[int], fresh: _Words) -> list[str]:
    """Replace the words at ``at`` with fresh ones (each changes the five shingles that cover it)."""
    out = list(words)
    for index, new in zip(at, fresh.take(len(at)), strict=True):
        out[index] = new
    return out


def _known_edits() -> list[InputEvent]:
    """Upserts (one chunk each) of texts with known edits, exact copies, a number change and ACL boundaries."""
    fresh = _Words()
    events: list[InputEvent] = []
    day = iter(range(1, 1000))

    def add(source: str, words: list[str], *, acl: tuple[str, ...] = ("*",)) -> None:
        events.append(upsert(source, 1, [" ".join(words)], acl=acl, day=next(day)))

    # Near copies at several levels: 1, 2, 3 and 4 replaced words of 60, words appended and words dropped.
    for family in range(6):
        base = fresh.take(60)
        add(f"base-{family}", base)
        add(f"one-{family}", _replace(base, [20], fresh))
        add(f"two-{family}", _replace(base, [12, 36], fresh))
        add(f"three-{family}", _replace(base, [10, 28, 46], fresh))
        add(f"four-{family}", _replace(base, [8, 22, 36, 50], fresh))
        add(f"longer-{family}", base + fresh.take(3 + 4 * family))
        add(f"shorter-{family}", base[: 60 - 2 * family - 1])
    # Exact copies: the same text in other case and spacing, in two more sources.
    page = fresh.take(40)
    add("page", page)
    add("page-copy", [w.upper() for w in page])
    add("page-copy-2", ["  " + w for w in page], acl=("eng",))
    memo = fresh.take(20)
    add("memo-hr", memo, acl=("hr",))
    add("memo-eng", memo, acl=("eng",))
    # A text that differs only in a number from two newer near copies (which agree with each other): two
    # fact_conflict pairs, and the one flag the older text raises. And a pair that differs in a negation.
    refund = [*fresh.take(25), "30", *fresh.take(30)]
    add("refund-30", refund)
    fourteen = [("14" if w == "30" else w) for w in refund]
    add("refund-14", _replace(fourteen, [50], fresh))
    add("refund-14-too", _replace(fourteen, [5], fresh))
    rule = fresh.take(50)
    add("rule", rule)
    add("rule-not", [*rule[:25], "not", *rule[25:]])
    # Across ACLs: a newer restricted near copy of a public page (acl_boundary), an older one (joins it).
    public = fresh.take(60)
    events.append(
        upsert("restricted-old", 1, [" ".join(_replace(public, [30], fresh))], acl=("finance",), day=0)
    )
    add("public", public)
    add("restricted-new", _replace(public, [15], fresh), acl=("finance",))
    # A chain: the middle text is a near copy of both ends, the ends are not near copies of each other.
    chain = fresh.take(60)
    add("chain-a", chain)
    add("chain-b", _replace(chain, [10, 30], fresh))
    add("chain-c", _replace(_replace(chain, [10, 30], fresh), [45, 52], fresh))
    # Too short for near matching (fewer than min_shingles shingles): exact copies only.
    short = fresh.take(8)
    add("short", short)
    add("short-edit", [*short[:4], *fresh.take(1), *short[5:]])
    # A later version replaces a source's text (an older one replayed changes nothing), a deleted source leaves no
    # position, and an ACL change moves the readers: the newest text of the chain is now for "eng" only.
    add("versioned", fresh.take(30))
    events.append(upsert("versioned", 3, [" ".join(rule)], day=next(day)))
    events.append(upsert("versioned", 2, [" ".join(fresh.take(30))], day=next(day)))
    add("deleted", _replace(public, [45], fresh))
    events.append(DeleteEvent(source_id="deleted", version=2))
    events.append(AclEvent(source_id="chain-c", version=2, acl=("eng",)))
    return events


# --- a reference written from the definitions, without the calibration's code -----------------------------------


def _shingles(norm: str) -> set[str]:
    words = norm.split()
    if len(words) <= 5:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i : i + 5]) for i in range(len(words) - 4)}


def _texts(events: list[InputEvent]) -> dict[str, dict]:
    """The live distinct texts of pre-chunked events (in version order per source), keyed by normalized text."""
    sources: dict[str, dict] = {}
    for event in events:
        source = sources.setdefault(event.source_id, {"version": -1, "chunks": (), "attrs": None})
        if event.version <= source["version"]:
            continue
        source["version"] = event.version
        if isinstance(event, DeleteEvent):
            source["chunks"] = ()
        elif isinstance(event, AclEvent):
            source["attrs"] = (
                msgspec.structs.replace(source["attrs"], acl=event.acl) if source["attrs"] else None
            )
        else:
            source["chunks"], source["attrs"] = event.chunks, event.attrs
    texts: dict[str, dict] = {}
    for source_id, source in sorted(sources.items()):
        for chunk in source["chunks"]:
            norm = normalize(chunk)
            text = texts.setdefault(norm, {"norm": norm, "positions": 0, "refs": []})
            text["positions"] += 1
            text["refs"].append((source_id, source["attrs"]))
    for norm, text in texts.items():
        acls = [attrs.acl for _, attrs in text["refs"]]
        text["readers"] = {"*"} if any("*" in acl for acl in acls) else {p for acl in acls for p in acl}
        best = min(text["refs"], key=lambda r: (-r[1].authority, -r[1].modified_at, r[0]))
        text["order"] = (-best[1].authority, -best[1].modified_at, -len(norm), best[0])
        text["shingles"] = _shingles(norm)
    return texts


def _readable(readers: set[str], by: set[str]) -> bool:
    return "*" in by or ("*" not in readers and readers <= by)


def _brute_pairs(texts: dict[str, dict]) -> list[tuple[float, str, str]]:
    """Every pair of distinct texts, long enough for near matching, with its exact Jaccard: (J, better, worse)."""
    pairs = []
    for a, b in itertools.combinations(sorted(texts), 2):
        sa, sb = texts[a]["shingles"], texts[b]["shingles"]
        if min(len(sa), len(sb)) < PARAMS.min_shingles:
            continue  # too short for near matching
        better, worse = (a, b) if (texts[a]["order"], a) < (texts[b]["order"], b) else (b, a)
        pairs.append((len(sa & sb) / len(sa | sb), better, worse))
    return pairs


def _brute_row(texts: dict[str, dict], pairs: list[tuple[float, str, str]], t: float) -> dict[str, float]:
    """What threshold ``t`` does, from the definitions: pair kinds, then star clusters best-ranked text first."""
    near = facts = acl = 0
    neighbours: dict[str, list[tuple[float, str]]] = {}
    flagging: set[str] = set()
    for jaccard, better, worse in pairs:
        if jaccard < t:
            continue
        if fact_tokens(better) != fact_tokens(worse):
            facts += 1
            flagging.add(worse)
            continue
        if _readable(texts[worse]["readers"], texts[better]["readers"]):
            near += 1
        else:
            acl += 1
        neighbours.setdefault(worse, []).append((jaccard, better))
    role: dict[str, str] = {}
    merged = refused = chunks = exact = near_positions = 0
    for norm in sorted(texts, key=lambda n: (texts[n]["order"], n)):
        canonicals = [(j, b) for j, b in neighbours.get(norm, []) if role[b] == "canonical"]
        fits = [(j, b) for j, b in canonicals if _readable(texts[norm]["readers"], texts[b]["readers"])]
        refused += len(canonicals) - len(fits)
        if fits:
            role[norm] = "member"
            merged += 1
            near_positions += texts[norm]["positions"]
        else:
            role[norm] = "canonical"
            chunks += 1
            exact += texts[norm]["positions"] - 1
    positions = sum(t["positions"] for t in texts.values())
    return {
        "threshold": t,
        "pairs": near + facts + acl,
        "near_pairs": near,
        "fact_conflict_pairs": facts,
        "acl_boundary_pairs": acl,
        "merged": merged,
        "fact_conflict": len(flagging),
        "acl_boundary": refused,
        "chunks": chunks,
        "exact": exact,
        "near": near_positions,
        "positions": positions,
        "reduction": 1 - chunks / positions,
    }


def _row(result: Calibration, t: float) -> dict[str, float]:
    row = next(r for r in result.rows if abs(r.threshold - t) < 1e-9)
    return {name: getattr(row, name) for name in row.__dataclass_fields__} | {"reduction": row.reduction}


@pytest.fixture(scope="module")
def known() -> tuple[list[InputEvent], dict[str, dict], list[tuple[float, str, str]], Calibration]:
    events = _known_edits()
    texts = _texts(events)
    result = calibrate(corpus_from_events([events], PARAMS), PARAMS, samples=4)
    return events, texts, _brute_pairs(texts), result


# --- the computation ----------------------------------------------------------------------------------------------


def test_the_corpus_holds_the_live_distinct_texts_with_their_positions_and_readers(known):
    events, texts, _, result = known
    by_norm = {t.norm: t for t in result.corpus.texts}
    assert set(by_norm) == set(texts)
    assert 30 <= len(texts) <= 80
    for norm, text in texts.items():
        assert by_norm[norm].positions == text["positions"]
        assert set(by_norm[norm].readers) == text["readers"]
    page = next(t for t in result.corpus.texts if t.positions == 3)
    assert set(page.readers) == {"*"}  # the union of "*" and "eng"
    assert page.text == page.text.lower().strip()  # the text of the first source (its copies are upper case)
    memo = next(t for t in result.corpus.texts if t.positions == 2 and t.readers != ("*",))
    assert memo.readers == ("eng", "hr")
    # Batches change nothing here (no boilerplate to learn): one event at a time gives the same corpus.
    assert corpus_from_events([[e] for e in events], PARAMS) == result.corpus


def test_lsh_finds_every_pair_in_range_that_the_brute_force_finds(known):
    # The signatures are deterministic (seed 1), so this holds or fails the same way on every run. The banding
    # for J = 0.5 makes a pair at 0.5 a candidate with probability 0.996, and at 0.55 with 0.9995: the corpus's
    # pairs are all found, and this asserts it, so that the count comparisons below compare like with like.
    _, _, brute, result = known
    bands, rows = candidate_banding(PARAMS)
    assert candidate_probability(0.5, bands, rows) > 0.99
    expected = {(better, worse) for jaccard, better, worse in brute if jaccard >= 0.5}
    by_hash = {t.content_hash: t.norm for t in result.corpus.texts}
    found = {(by_hash[p.better], by_hash[p.worse]) for p in result.pairs if p.jaccard >= 0.5}
    assert found == expected
    assert len(expected) >= 60
    # The corpus spreads its pairs over the range: most grid steps hold some.
    assert len({min(int(j * 20), 19) for j, _, _ in brute if j >= 0.5}) >= 7


@pytest.mark.parametrize("t", GRID)
def test_counts_per_threshold_equal_the_brute_force_over_every_pair(known, t):
    _, texts, brute, result = known
    assert _row(result, t) == pytest.approx(_brute_row(texts, brute, t))


def test_the_counts_cover_every_outcome(known):
    _, _, _, result = known
    at = _row(result, 0.65)
    assert at["acl_boundary"] >= 1 and at["merged"] >= 5 and at["exact"] >= 2
    # The refund text with 30 days is a near copy of two newer texts with 14: two pairs, and one flag of its own.
    assert at["fact_conflict_pairs"] > at["fact_conflict"] >= 2
    # Lowering the threshold merges more texts and never fewer pairs.
    pairs = [r.pairs for r in result.rows]
    assert pairs == sorted(pairs, reverse=True)
    assert result.rows[0].merged > result.rows[-1].merged


@pytest.mark.parametrize("t", [0.6, 0.8, 0.9])
def test_the_outcome_at_a_threshold_is_what_a_run_at_that_threshold_ends_with(known, t):
    events, _, _, result = known
    params = EngineParams(threshold=t)
    runner = EmbeddedRunner(Engine(params), MemoryStore())
    runner.process(events, lambda outputs: None)
    counters = runner.counters
    row = _row(result, t)
    assert (row["positions"], row["exact"], row["near"], row["chunks"]) == (
        counters.positions,
        counters.exact,
        counters.near,
        counters.chunks,
    )
    assert {"fact_conflict": row["fact_conflict"], "acl_boundary": row["acl_boundary"]} == {
        "fact_conflict": counters.flags.get("fact_conflict", 0),
        "acl_boundary": counters.flags.get("acl_boundary", 0),
    }


@pytest.mark.parametrize("t", [0.8, 0.62])
def test_the_samples_are_the_pairs_nearest_the_threshold_on_each_side(known, t):
    _, _, brute, _ = known
    params = EngineParams(threshold=t)
    result = calibrate(corpus_from_events([_known_edits()], params), params, samples=3)
    by_hash = {x.content_hash: x.norm for x in result.corpus.texts}
    above = sorted(j for j, _, _ in brute if j >= t)[:3]
    below = sorted((j for j, _, _ in brute if j < t), reverse=True)[:3]
    # The Jaccards are the nearest ones on each side (pairs of equal Jaccard may come in either order) ...
    assert [p.jaccard for p in result.above] == above and [p.jaccard for p in result.below] == below
    assert above[0] >= t > below[0]
    # ... and each sample is a pair of the corpus with that Jaccard.
    known_pairs = {(b, w): j for j, b, w in brute}
    for pair in (*result.above, *result.below):
        assert known_pairs[(by_hash[pair.better], by_hash[pair.worse])] == pair.jaccard


def test_an_off_grid_threshold_is_added_to_the_grid():
    assert thresholds(0.8) == GRID and len(GRID) == 10 and GRID[0] == 0.5 and GRID[-1] == 0.95
    assert thresholds(0.82) == (*GRID[:7], 0.82, *GRID[7:])


def test_the_word_diff_marks_what_changed():
    ops = word_diff("store tensors as float16 on the GPU", "store tensors as float32 on the GPU")
    assert [(op.tag, op.a, op.b) for op in ops if op.tag != "equal"] == [("replace", "float16 ", "float32 ")]
    # Each side keeps its own whitespace; whitespace alone is no difference.
    ops = word_diff("Install it:\n\n  pip install x", "Install it: pip  install y")
    assert [(op.tag, op.a, op.b) for op in ops] == [
        ("equal", "Install it:\n\n  pip install ", "Install it: pip  install "),
        ("replace", "x", "y"),
    ]


# --- the suggestion -----------------------------------------------------------------------------------------------


def _pairs_corpus(specs: list[tuple[int, list[int], bool]]) -> list[InputEvent]:
    """For each (count, replaced positions, number changed): that many 60-word texts with one edited copy each."""
    fresh = _Words()
    events: list[InputEvent] = []
    for group, (count, at, number) in enumerate(specs):
        for index in range(count):
            base = fresh.take(30) + (["30"] if number else fresh.take(1)) + fresh.take(29)
            copy = _replace(base, at, fresh)
            if number:
                copy[30] = "14"
            events.append(upsert(f"g{group}-{index}", 1, [" ".join(base)], day=2))
            events.append(upsert(f"g{group}-{index}-copy", 1, [" ".join(copy)], day=1))
    return events


def test_the_suggestion_is_the_knee_of_the_merges_when_it_is_obvious():
    # Twelve near copies at J = 0.88 (one word of 80 replaced): nothing merges at 0.9, all of them at 0.85.
    fresh = _Words()
    events = []
    for index in range(12):
        base = fresh.take(80)
        events += [upsert(f"doc-{index}", 1, [" ".join(base)], day=2)]
        events += [upsert(f"copy-{index}", 1, [" ".join(_replace(base, [40], fresh))], day=1)]
    events += [upsert(f"other-{i}", 1, [" ".join(fresh.take(50))]) for i in range(6)]
    # Three pairs at J = 0.70 that differ in a number: all of their step, but too few to stop the suggestion.
    for index in range(3):
        base = [*fresh.take(30), "30", *fresh.take(29)]
        copy = _replace(base, [15], fresh)
        copy[30] = "14"
        events += [upsert(f"n-{index}", 1, [" ".join(base)]), upsert(f"n-{index}-copy", 1, [" ".join(copy)])]
    result = calibrate(corpus_from_events([events], PARAMS), PARAMS)
    assert [r.merged for r in result.rows if r.threshold in (0.85, 0.9)] == [12, 0]
    assert [r.fact_conflict_pairs for r in result.rows if r.threshold in (0.65, 0.7)] == [3, 0]
    assert result.suggestion.knee == 0.85
    assert result.suggestion.fact_limit == 0.5
    assert result.suggestion.threshold == 0.85
    assert "knee" in result.suggestion.reason


def test_the_suggestion_stays_above_a_step_that_is_mostly_fact_conflicts():
    # Same facts at J = 0.84 (2 pairs: one word of 60 replaced) and J = 0.58 (20 pairs: three words), so the knee
    # is low; but the 12 pairs at J = 0.70 (two words, one of them a number) state different facts, and the
    # suggestion stops above them.
    specs = [(2, [40], False), (20, [10, 28, 46], False), (12, [15], True)]
    result = calibrate(corpus_from_events([_pairs_corpus(specs)], PARAMS), PARAMS)
    entering = [p for p in result.pairs if 0.65 <= p.jaccard < 0.7]
    assert len(entering) == 12 and all(p.fact_conflict for p in entering)
    assert result.suggestion.knee is not None and result.suggestion.knee < 0.65
    assert result.suggestion.fact_limit == 0.7
    assert result.suggestion.threshold == 0.7
    assert "different facts" in result.suggestion.reason


def test_without_a_knee_the_current_threshold_is_kept(known):
    _, _, _, result = known
    flat = [dataclasses.replace(row, merged=3) for row in result.rows]
    suggestion = suggest(flat, [], 0.8)
    assert (suggestion.threshold, suggestion.knee, suggestion.fact_limit) == (0.8, None, 0.5)
    assert "no knee" in suggestion.reason


# --- the command --------------------------------------------------------------------------------------------------

runner = CliRunner()


def _invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def _figures(out: Path) -> dict:
    data = json.loads((out / "calibration.json").read_text())
    return {k: v for k, v in data.items() if k not in ("input", "seconds")}


def test_the_command_writes_a_page_plots_and_json(tmp_path):
    fresh = _Words()
    base = fresh.take(60)
    base[5] = "<script>alert(1)</script>"
    feed = tmp_path / "feed.jsonl"
    events = [
        upsert("a", 1, [" ".join(base)], day=2),
        upsert("b", 1, [" ".join(_replace(base, [30], fresh))]),
    ]
    feed.write_bytes(b"".join(encode_event(e) + b"\n" for e in events) + b"not json\n")
    out = tmp_path / "cal"
    result = _invoke("--set", "threshold=0.82", "calibrate", feed, "--out", out, "--samples", "2")
    assert result.exit_code == 0, result.output
    assert "suggested threshold" in result.output and "0.82" in result.output
    assert "1 input item(s) were not valid events" in result.output
    for name in ("jaccard.png", "thresholds.png", "reduction.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000
    page = (out / "index.html").read_text()
    for name in ("jaccard.png", "thresholds.png", "reduction.png", "calibration.json", "Suggested threshold"):
        assert name in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>" not in page
    assert "<del>" in page and "<ins>" in page  # the replaced word, on each side
    figures = _figures(out)
    assert [row["threshold"] for row in figures["thresholds"]] == [*GRID[:7], 0.82, *GRID[7:]]
    assert figures["corpus"]["texts"] == 2 and figures["corpus"]["positions"] == 2
    assert len(figures["samples"]["above"]) == 1 and figures["samples"]["above"][0]["outcome"] == "near"
    assert figures["suggestion"]["rule"] and figures["suggestion"]["reason"]
    assert sum(figures["histogram"]["counts"]) == 1


def _files(state: Path) -> dict[Path, tuple[int, int] | bytes]:
    """Each file of a state with its size and modification time; rocksdict's own small config by content.

    rocksdict writes its config file (raw mode, prefix extractors) whenever it opens a database, read-only too;
    the state's store opens it with the same config, so the content does not change.
    """
    return {
        path: path.read_bytes()
        if path.name == "rocksdict-config.json"
        else (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(state.rglob("*"))
        if path.is_file()
    }


def test_the_state_gives_the_figures_the_input_gives_and_a_run_agrees(tmp_path):
    state = tmp_path / "state"
    run = _invoke("run", EXAMPLE, "--state", state, "--out", tmp_path / "out.jsonl")
    assert run.exit_code == 0, run.output
    before = _files(state)
    from_state = _invoke("calibrate", "--state", state, "--out", tmp_path / "from-state")
    assert from_state.exit_code == 0, from_state.output
    assert _files(state) == before  # opened read-only: no RocksDB file was written
    holder = RocksDBStore(state)  # as a run in progress holds it: the calibration reads it all the same
    try:
        while_held = _invoke("calibrate", "--state", state, "--out", tmp_path / "while-held")
    finally:
        holder.close()
    assert while_held.exit_code == 0, while_held.output
    assert _figures(tmp_path / "while-held") == _figures(tmp_path / "from-state")
    from_input = _invoke("calibrate", EXAMPLE, "--out", tmp_path / "from-input")
    assert from_input.exit_code == 0, from_input.output
    figures = _figures(tmp_path / "from-state")
    assert figures == _figures(tmp_path / "from-input")
    # At the current threshold, the outcome is what the run's summary says.
    runner_ = EmbeddedRunner(Engine(PARAMS), MemoryStore())
    run_feed(runner_, JsonlFeed(EXAMPLE), lambda outputs: None, batch_size=256)
    counters = runner_.counters
    row = next(r for r in figures["thresholds"] if r["threshold"] == 0.8)
    assert (row["positions"], row["exact"], row["near"], row["chunks"]) == (15, 2, 1, 12)
    assert (row["positions"], row["exact"], row["near"], row["chunks"]) == (
        counters.positions,
        counters.exact,
        counters.near,
        counters.chunks,
    )
    assert (row["fact_conflict"], row["acl_boundary"]) == (
        counters.flags["fact_conflict"],
        counters.flags["acl_boundary"],
    )


def test_a_folder_is_chunked_as_a_run_chunks_it_boilerplate_included(tmp_path):
    # 30 Markdown files with a shared footer line: once 20 documents are counted (at the end of a batch), the
    # footer is boilerplate, and the files of later batches are chunked without it.
    fresh = _Words()
    folder = tmp_path / "docs"
    folder.mkdir()
    shared = fresh.take(40)
    for index in range(30):
        own = _replace(shared, [10 + index % 20], fresh) if index % 3 == 0 else fresh.take(40)
        body = f"# {' '.join(fresh.take(3))}\n\n{' '.join(own)}\n\nCopyright Acme Widgets, all rights kept.\n"
        (folder / f"page-{index:02d}.md").write_text(body)
    state = tmp_path / "state"
    run = _invoke("run", folder, "--state", state, "--out", tmp_path / "out.jsonl", "--batch-size", "8")
    assert run.exit_code == 0, run.output
    assert _invoke("calibrate", "--state", state, "--out", tmp_path / "from-state").exit_code == 0
    result = _invoke("--set", "batch_size=8", "calibrate", folder, "--out", tmp_path / "from-input")
    assert result.exit_code == 0, result.output
    figures = _figures(tmp_path / "from-state")
    assert figures == _figures(tmp_path / "from-input")
    # Each file is its heading with its paragraph, and the footer; the footer was stripped from the last batch
    # only (the first three held 24 files).
    assert figures["corpus"]["positions"] == 24 * 2 + 6
    # In one batch nothing is stripped: the batches matter, and the calibration follows them.
    assert _invoke("calibrate", folder, "--out", tmp_path / "one-batch").exit_code == 0
    assert _figures(tmp_path / "one-batch")["corpus"]["positions"] == 30 * 2


def test_a_directory_that_is_not_a_state_is_refused(tmp_path):
    result = _invoke("calibrate", "--state", tmp_path, "--out", tmp_path / "cal")
    assert result.exit_code == 1
    assert "no state at" in " ".join(result.output.split())
    assert not (tmp_path / "cal").exists() and not (tmp_path / "db").exists()


def test_calibrate_help_imports_neither_the_engine_nor_matplotlib():
    assert (
        _loaded_after(["calibrate", "--help"], ("matplotlib", "numpy", "streamdedup.query.calibration")) == []
    )
