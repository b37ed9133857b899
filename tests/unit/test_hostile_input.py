"""Hostile input never crashes a run and never takes a valid event with it.

Fuzz properties (Hypothesis) drive hostile lines of every kind, structure-aware mutations of valid events, valid
events and random bytes through the codec and through the embedded run; the acceptance feed of 600 lines and an
injected handler fault go through ``streamdedup run`` as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.contract.codec import EventLimits, decode_event, encode_event
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.output_view import View
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.feeds import run_feed
from streamdedup.drivers.jsonl import JsonlFeed
from streamdedup.errors import InvalidEventError
from streamdedup.store.memory import MemoryStore
from streamdedup.testing.hostile import HOSTILE_KINDS, hostile_line, mixed_feed, mutate, valid_event_data
from tests.helpers import run_embedded, upsert

# Small bounds keep every hostile kind small, so Hypothesis can draw thousands of them.
LIMITS = EventLimits(bytes=64 * 1024, depth=16, chunks=40, chunk_chars=3_000, acl=20, principal_chars=64)
TEXTS = (
    "Open the settings page and choose reset password to receive a link by email within ten minutes",
    "OPEN the settings page and choose reset password to receive a link by email within ten minutes",
    "Open the settings page and choose reset password to receive a link by email within 15 minutes",
    "# Reset\n\nOpen **the settings page** and choose [reset password](/r) to receive a link by email",
    "<h1>Reset</h1><div><p>Open the settings page and choose reset password to receive a link</p></div>",
    "short",
)
# Markup made of the characters that parsers give meaning to, nested as deep as the bound allows.
markup = st.one_of(
    st.text(alphabet="<>/=\"' divspanulolitablertdpreh1#*_[]()!`>-|\n\t&;:xX", max_size=300),
    st.tuples(st.sampled_from(("div", "ul", "blockquote", "span", "table", "b")), st.integers(1, 900)).map(
        lambda t: f"<{t[0]}>" * t[1] + "deep text" + f"</{t[0]}>" * t[1]
    ),
    st.integers(1, 2000).map(lambda n: ">" * n + " quoted"),
    st.integers(1, 500).map(lambda n: "".join("  " * i + "- item\n" for i in range(n))),
)

valid_data = st.builds(
    valid_event_data,
    source_id=st.sampled_from(("a", "b", "c", "d")),
    version=st.integers(0, 6),
    text=st.one_of(st.sampled_from(TEXTS), markup),
).flatmap(
    lambda data: st.sampled_from(
        (
            data,
            {**data, "content_type": "text/markdown"},
            {**data, "content_type": "text/html", "acl": ["eng"]},
            {k: v for k, v in data.items() if k != "text"} | {"chunks": [data["text"], "short"]},
            {
                "schema": data["schema"],
                "op": "delete",
                "source_id": data["source_id"],
                "version": data["version"],
            },
            {**{k: data[k] for k in ("schema", "source_id", "version")}, "op": "acl", "acl": ["hr"]},
        )
    )
)
hostile = st.tuples(
    st.sampled_from(sorted(HOSTILE_KINDS)), st.randoms(use_true_random=False), valid_data
).map(lambda t: hostile_line(t[0], t[1], t[2], LIMITS))
mutated = st.tuples(st.randoms(use_true_random=False), valid_data).map(lambda t: mutate(t[0], t[1]))
valid = valid_data.map(lambda d: json.dumps(d).encode())
noise = (
    st.binary(min_size=1, max_size=80)
    .map(lambda b: b.replace(b"\n", b" "))
    .filter(lambda b: b.strip() != b"")
)
#: Any line a documents topic can carry (no line break inside, never blank).
lines = st.one_of(hostile, mutated, valid, noise)


def _decoded(raw: bytes) -> object:
    try:
        return decode_event(raw, LIMITS)
    except InvalidEventError:
        return None


@pytest.mark.parametrize("kind", sorted(HOSTILE_KINDS))
@pytest.mark.parametrize("seed", range(3))
def test_every_hostile_kind_is_an_invalid_event(kind, seed):
    import random

    base = valid_event_data("a", 1)
    for limits in (LIMITS, EventLimits()):
        line = hostile_line(kind, random.Random(seed), base, limits)
        assert b"\n" not in line and line.strip()
        with pytest.raises(InvalidEventError) as info:
            decode_event(line, limits)
        assert str(info.value)


@given(lines)
def test_the_codec_raises_nothing_but_invalid_event_and_what_it_accepts_round_trips(raw):
    try:
        event = decode_event(raw, LIMITS)
    except InvalidEventError:
        return
    assert decode_event(encode_event(event), LIMITS) == event


@given(st.lists(lines, min_size=1, max_size=8), st.integers(1, 4), st.one_of(st.none(), st.integers(1, 400)))
def test_run_applies_or_dead_letters_every_line_exactly_once(raws, batch_size, batch_chars):
    engine = Engine(EngineParams())
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "feed.jsonl"
        path.write_bytes(b"\n".join(raws) + b"\n")
        outputs: list[Output] = []
        runner = EmbeddedRunner(engine, MemoryStore())
        feed = JsonlFeed(path, LIMITS)
        report = run_feed(runner, feed, outputs.extend, batch_size=batch_size, batch_chars=batch_chars)
    events = [_decoded(raw) for raw in raws]
    invalid = [number for number, event in enumerate(events, start=1) if event is None]
    letters = [o.value["origin"]["line"] for o in outputs if o.topic == "dlq"]
    assert sorted(letters) == invalid  # exactly the invalid lines, each once: none of the valid ones failed
    assert report.events + report.dead_letters == len(raws)
    assert report.dead_letters == len(invalid)
    view = View().apply_all(outputs)
    alone = run_embedded(engine, [e for e in events if e is not None])  # type: ignore[misc]
    assert view.compacted(with_revision=False) == alone.compacted(with_revision=False)


def test_a_failing_event_does_not_take_its_batch_of_256_with_it():
    events = [upsert(f"src-{i}", 1, [f"{TEXTS[i % 3]} part {i // 3}", "short"]) for i in range(256)]
    marked = events[97].source_id
    engine = Engine(EngineParams(), fault_source_id=marked)
    runner = EmbeddedRunner(engine, MemoryStore())
    outputs = runner.process(events, lambda outputs: None)
    assert runner.last_applied == 255
    (letter,) = [o for o in outputs if o.topic == "dlq"]
    assert "InjectedFault" in letter.value["error"] and marked in letter.value["error"]
    assert letter.value["origin"] == {"batch_index": 97, "source_id": marked}
    assert decode_event(letter.value["raw"]) == events[97]  # the event itself, so it can be sent again
    others = [e for e in events if e.source_id != marked]
    alone = run_embedded(Engine(EngineParams()), others)
    view = View().apply_all(outputs)
    assert view.compacted(with_revision=False) == alone.compacted(with_revision=False)
    assert runner.counters.events == 255 and runner.counters.dead_letters == 1


def _cli_run(
    tmp: Path, name: str, data: bytes, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    feed = tmp / f"{name}.jsonl"
    feed.write_bytes(data)
    out = tmp / f"{name}-out.jsonl"
    state = tmp / f"{name}-state"
    result = subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", "run", str(feed), "--state", str(state), "--out", str(out)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    records = [json.loads(line) for line in out.read_bytes().splitlines()] if out.exists() else []
    return result, records


def _view(records: list[dict]) -> View:
    return View().apply_all(Output(r["topic"], r["key"], r["value"]) for r in records)


def test_run_on_600_lines_with_hostile_ones_of_every_kind(tmp_path: Path):
    limits = EventLimits(bytes=256 * 1024)
    feed = mixed_feed(12, limits=limits)
    assert len(feed) == 600 and {line.kind for line in feed if line.hostile} == set(HOSTILE_KINDS)
    assert 0.35 <= sum(line.hostile for line in feed) / len(feed) <= 0.45
    env = {"STREAMDEDUP_MAX_EVENT_BYTES": str(limits.bytes)}
    mixed, records = _cli_run(tmp_path, "mixed", b"".join(line.raw + b"\n" for line in feed), **env)
    assert mixed.returncode == 0, mixed.stderr
    letters = [r["value"] for r in records if r["topic"] == "dlq"]
    hostile_numbers = [n for n, line in enumerate(feed, start=1) if line.hostile]
    assert sorted(letter["origin"]["line"] for letter in letters) == hostile_numbers
    for letter in letters:
        line = feed[letter["origin"]["line"] - 1]
        assert letter["raw"] == line.raw.decode("utf-8", "replace") or "truncated_to" in letter["origin"]
        assert letter["error"]
    valid, alone = _cli_run(
        tmp_path, "valid", b"".join(line.raw + b"\n" for line in feed if not line.hostile), **env
    )
    assert valid.returncode == 0, valid.stderr
    assert not [r for r in alone if r["topic"] == "dlq"]
    assert _view(records).compacted(with_revision=False) == _view(alone).compacted(with_revision=False)
    assert Counter(r["topic"] for r in records)["canonical-chunks"] > 0


def test_run_dead_letters_an_event_its_handler_fails_on_and_applies_the_other_255(tmp_path: Path):
    events = [upsert(f"src-{i}", 1, [f"{TEXTS[i % 3]} part {i // 3}"]) for i in range(256)]
    data = b"".join(encode_event(e) + b"\n" for e in events)
    result, records = _cli_run(tmp_path, "fault", data, STREAMDEDUP_FAULT_SOURCE_ID="src-200")
    assert result.returncode == 0, result.stderr
    (letter,) = [r["value"] for r in records if r["topic"] == "dlq"]
    assert "InjectedFault" in letter["error"] and letter["origin"]["line"] == 201
    assert letter["raw"] == encode_event(events[200]).decode()  # the line as it was read
    alone = run_embedded(Engine(EngineParams()), [e for e in events if e.source_id != "src-200"])
    assert _view(records).compacted(with_revision=False) == alone.compacted(with_revision=False)


@pytest.mark.parametrize("lead", [b"", b" " * 2000, b"\t" * 2000])
def test_a_line_over_the_limit_is_dead_lettered_whatever_it_starts_with(tmp_path: Path, lead):
    good = encode_event(upsert("good", 1, ["kept"]))
    path = tmp_path / "feed.jsonl"
    path.write_bytes(lead + encode_event(upsert("long", 1, ["x" * 1500])) + b"\r\n" + good + b"\n")
    outputs: list[Output] = []
    runner = EmbeddedRunner(Engine(EngineParams()), MemoryStore())
    report = run_feed(runner, JsonlFeed(path, EventLimits(bytes=1024)), outputs.extend, batch_size=4)
    (letter,) = [o.value for o in outputs if o.topic == "dlq"]
    assert letter["origin"]["line"] == 1 and letter["origin"]["truncated_to"] == 1026
    assert "exceeds the limit of 1024 bytes" in letter["error"]
    assert (report.events, report.dead_letters) == (1, 1)


class _FailingStore(MemoryStore):
    def get(self, stage, partition, key):
        raise OSError("disk gone")

    def get_many(self, stage, partition, keys):
        raise OSError("disk gone")


def test_a_failing_store_is_not_blamed_on_the_input():
    from streamdedup.errors import StateError

    runner = EmbeddedRunner(Engine(EngineParams()), _FailingStore())
    sent: list[Output] = []
    with pytest.raises(StateError, match="disk gone"):
        runner.process([upsert("a", 1, ["text"]), upsert("b", 1, ["more"])], sent.extend)
    assert sent == [] and runner.counters.dead_letters == 0
