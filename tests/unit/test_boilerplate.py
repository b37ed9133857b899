"""Boilerplate lines per collection: learned from the documents, stripped before chunking."""

import json
import random

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.contract.codec import encode_event
from streamdedup.core import _native, markup
from streamdedup.core.engine import Engine
from streamdedup.core.markup import blocks
from streamdedup.core.model import DecisionEvent, SourceAttrs, UpsertEvent
from streamdedup.core.normalize import normalize
from streamdedup.core.output_view import View
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.collection import line_hash
from streamdedup.core.stages.source_chunks import document_lines, line_update, line_update_in_python
from streamdedup.core.state import pack_lines, unpack_added, unpack_lines
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.simulation import SimulationDriver
from streamdedup.review.decisions import decision_event, parse_decision
from streamdedup.store.memory import MemoryStore
from streamdedup.testing.invariants import check_invariants
from streamdedup.testing.reference import Reference, live_sources_in_store

HEADER = (
    "Acme Handbook home policies benefits travel expenses security contact search help desk portal directory\n"
    "news events careers offices parking canteen library learning wellbeing volunteering holidays payroll pensions"
)
FOOTER = (
    "Internal use only please do not forward outside the company without written permission from the legal\n"
    "team at Acme Corporation headquarters and remember to report suspected phishing to the security desk"
)
HEADER_LINE = HEADER.split("\n", maxsplit=1)[0].lower()
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


def page(i: int, version: int = 1) -> UpsertEvent:
    rng = random.Random(i)
    content = rng.choice(WORDS) + f" topic{chr(97 + i % 26)}{chr(97 + i // 26)}"
    attrs = SourceAttrs(acl=("*",), modified_at=(i + 1) * 1_000_000)
    return UpsertEvent(
        source_id=f"page-{i:02d}",
        version=version,
        attrs=attrs,
        text=f"{HEADER}\n{content}\n{FOOTER}",
        collection="handbook",
    )


def run(params: EngineParams, events):
    engine = Engine(params)
    store = MemoryStore()
    runner = EmbeddedRunner(engine, store)
    view = View()
    for event in events:
        view.apply_all(runner.process([event], lambda outputs: None))
    return engine, store, view


def near_relations(view: View) -> int:
    return sum(c["relation"] == "near" for m in view.mappings.values() for c in m["chunks"])


def test_without_stripping_pages_crowd_into_one_chunk():
    _, _, view = run(EngineParams(boilerplate_min_docs=0), [page(i) for i in range(30)])
    assert near_relations(view) >= 20  # the shared header and footer make the pages near copies


def test_with_stripping_pages_stay_apart_once_reingested():
    params = EngineParams(boilerplate_min_docs=10, boilerplate_fraction=0.5)
    events = [page(i) for i in range(30)]
    engine, store, view = run(params, events)
    live = live_sources_in_store(store)
    # Pages read before the header and footer were known as boilerplate keep them until their next version.
    early = [s for s in live.values() if HEADER_LINE in s.norms[0]]
    late = [s for s in live.values() if HEADER_LINE not in s.norms[0]]
    assert 5 <= len(early) <= 12 and len(late) >= 18
    assert all(len(s.norms[0].split()) == 2 for s in late)
    # A new version of each early page is chunked without them.
    events += [page(int(s.source_id[-2:]), version=2) for s in early]
    engine, store, view = run(params, events)
    live = live_sources_in_store(store)
    assert all(HEADER_LINE not in s.norms[0] for s in live.values())
    assert near_relations(view) == 0
    assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
    assert view.compacted(with_revision=False) == Reference(engine, live).compacted()


def test_allow_listed_lines_are_kept():
    params = EngineParams(boilerplate_min_docs=10, boilerplate_allow=tuple(FOOTER.upper().split("\n")))
    _, store, _ = run(params, [page(i) for i in range(30)])
    live = live_sources_in_store(store)
    assert all(FOOTER.split("\n")[1].lower() in s.norms[0] for s in live.values())
    assert sum(HEADER_LINE in s.norms[0] for s in live.values()) < 15


def test_any_interleaving_gives_a_sound_view_with_boilerplate():
    params = EngineParams(boilerplate_min_docs=8)
    engine = Engine(params)
    events = [page(i) for i in range(24)] + [page(i, version=2) for i in range(24)]
    for seed in range(4):
        sim = SimulationDriver(engine, partitions=3, seed=seed, rewind=0.05)
        view = View().apply_all(sim.run(events))
        live = live_sources_in_store(sim.store)
        assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
        assert view.compacted(with_revision=False) == Reference(engine, live).compacted()


def line_decision(kind: str, line: str, version: int) -> DecisionEvent:
    data = decision_event(kind, by="ana", collection="handbook", line=line, version=version)
    return parse_decision(data)


def test_line_decisions_among_the_pages_give_a_sound_view_under_any_interleaving():
    # Allow the footer and strip the header at random places among the pages' first versions, then the second
    # versions; then give the header back to the counts. Any interleaving gives a sound view; when each event is
    # done before the next, the second versions are chunked as the decisions say.
    params = EngineParams(boilerplate_min_docs=8)
    engine = Engine(params)
    footer = FOOTER.split("\n", maxsplit=1)[0]
    for seed in range(4):
        rng = random.Random(seed)
        first = [page(i) for i in range(24)]
        decisions = [
            line_decision("boilerplate_allow", footer, 1),
            line_decision("boilerplate_strip", HEADER_LINE, 1),
        ]
        for decision in decisions:
            first.insert(rng.randrange(len(first) + 1), decision)
        events = [*first, *(page(i, version=2) for i in range(24))]
        for schedule in ("random", "pipeline"):
            sim = SimulationDriver(engine, partitions=3, seed=seed, rewind=0.05, schedule=schedule)
            view = View().apply_all(sim.run(events))
            live = live_sources_in_store(sim.store)
            assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
            assert view.compacted(with_revision=False) == Reference(engine, live).compacted()
            if (
                schedule == "pipeline"
            ):  # each event done before the next: the second versions follow the decisions
                assert all(footer.lower() in s.norms[0] for s in live.values()), "the footer was allowed"
                assert all(HEADER_LINE not in s.norms[0] for s in live.values()), "the header was stripped"
            # Back to the counts, then replays of the earlier decisions: those change nothing.
            later = [line_decision("boilerplate_auto", HEADER_LINE, 2), *decisions]
            outputs = sim.run(later)
            assert [o.value["reason"] for o in outputs if o.topic == "audit"] == ["boilerplate_auto"]


def test_the_boilerplate_listing(tmp_path):
    feed = tmp_path / "pages.jsonl"
    feed.write_bytes(b"".join(encode_event(page(i)) + b"\n" for i in range(30)))
    state = tmp_path / "state"
    runner = CliRunner()
    env = {"STREAMDEDUP_BOILERPLATE_MIN_DOCS": "10"}
    assert (
        runner.invoke(
            app, ["run", str(feed), "--state", str(state), "--out", str(tmp_path / "o")], env=env
        ).exit_code
        == 0
    )
    result = runner.invoke(app, ["boilerplate", "--state", str(state), "--json"], env=env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["handbook"]["documents"] == 30
    expected = [line.lower() for line in (HEADER + "\n" + FOOTER).split("\n")]
    assert sorted(line["text"] for line in data["handbook"]["lines"]) == sorted(expected)
    assert {line["documents"] for line in data["handbook"]["lines"]} == {30}
    tables = runner.invoke(app, ["boilerplate", "--state", str(state), "--collection", "handbook"], env=env)
    assert tables.exit_code == 0 and "30 documents, 4 boilerplate lines" in " ".join(tables.output.split())


_LINES = st.text(
    alphabet=st.sampled_from([chr(c) for c in range(128)] + ["\n", "\n", " ", "a", "B", "-"]), max_size=200
)


def _kept_lines(text: str, longest: int) -> list[tuple[str, str]]:
    """The lines ``document_lines`` counts, keyed as the Python loop keys them."""
    kept = [n for n in map(normalize, text.split("\n")) if n and len(n) <= longest]
    return [(line_hash(n), n) for n in kept]


@given(_LINES, st.integers(0, 30), st.sampled_from(["", "\u00e9\n"]))
def test_a_documents_lines_are_keyed_the_same_by_the_compiled_path_and_the_python_one(text, longest, tail):
    # An ASCII block's lines are normalized and hashed in one compiled call; any other block's in Python.
    params = EngineParams(boilerplate_max_line_chars=longest)
    attrs = SourceAttrs(acl=("*",), modified_at=0)
    event = UpsertEvent(source_id="s", version=1, attrs=attrs, text=text + tail, content_type="text/plain")
    expected = {
        key: line
        for block in blocks(text + tail, "text/plain")
        for key, line in _kept_lines(block.plain, longest)
    }
    found = document_lines(event, params)
    assert found == expected and list(found) == list(expected)
    if text.isascii():
        assert _native.line_hashes(text, longest) == _kept_lines(text, longest)
    assert _native.line_hashes("caf\u00e9", longest) is None


@given(_LINES, st.integers(0, 30), st.sampled_from(["", "\u00e9\n", "\n\ncaf\u00e9 au lait\n"]), st.data())
def test_the_compiled_line_update_is_the_pythons(text, longest, tail, data):
    params = EngineParams(boilerplate_max_line_chars=longest)
    attrs = SourceAttrs(acl=("*",), modified_at=0)
    event = UpsertEvent(source_id="s", version=1, attrs=attrs, text=text + tail, content_type="text/plain")
    lines = document_lines(event, params)
    # What the last version counted: some of these lines and some others.
    old = data.draw(
        st.lists(st.sampled_from(sorted(lines) or ["0"]) | st.sampled_from(["00", "ff"]), unique=True)
    )
    packed_old = pack_lines(sorted(old))
    found = line_update(event, params, None, packed_old)
    assert found == line_update_in_python(event, params, None, packed_old)
    packed, added, removed, count = found
    assert unpack_lines(packed) == tuple(sorted(lines)) and count == len(lines)
    assert unpack_added(added) == tuple((h, lines[h]) for h in sorted(lines) if h not in old)
    assert removed == tuple(sorted(set(old) - set(lines)))
    assert (packed == b"") == (not lines) and (added == b"") == (set(lines) <= set(old))


def test_the_source_stage_parses_a_documents_markup_once_for_its_chunks_and_its_lines(monkeypatch):
    parses = []
    parse = markup._markdown_blocks
    monkeypatch.setattr(markup, "_markdown_blocks", lambda text: parses.append(text) or parse(text))
    text = "# Title\n\nA first paragraph of the page.\n\nCopyright Acme Corp, all rights reserved."
    event = UpsertEvent(
        source_id="page", version=1, attrs=SourceAttrs(acl=("*",), modified_at=1), text=text,
        content_type="text/markdown",
    )  # fmt: skip
    outputs = []
    EmbeddedRunner(Engine(EngineParams()), MemoryStore()).process([event], outputs.extend)
    assert parses == [text]
    mapping = next(o.record() for o in outputs if o.topic == "source-mappings")
    assert len(mapping["chunks"]) == 2  # the heading joins the paragraph it introduces
