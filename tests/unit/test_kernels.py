"""The engine on its two kernels: the choice (``streamdedup.core.kernels``), and byte-identical outputs and states.

The per-kernel tests compare each compiled kernel with its Python twin on random and hostile input; these run whole
feeds through the engine on each and compare everything it wrote: every output line and every key and value of
every stage's state.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamdedup.contract.codec import decode_event, encode_output_line
from streamdedup.core import kernels
from streamdedup.core.engine import Engine
from streamdedup.core.model import InputEvent, SourceAttrs, UpsertEvent
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.simulation import SimulationDriver
from streamdedup.store.base import FAMILIES
from streamdedup.store.memory import MemoryStore
from streamdedup.testing.random_feeds import ParagraphPool, random_feed, with_decisions
from tests.helpers import SESSION_KERNELS

ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.skipif(not kernels.available(), reason="compares the compiled kernels with Python's")


@pytest.fixture(autouse=True)
def _restore_the_choice() -> Iterator[None]:
    yield
    kernels.use(SESSION_KERNELS)


def test_the_choice_says_which_kernels_run() -> None:
    assert kernels.use("python") == "python" and kernels.native() is None
    assert kernels.use("compiled") == "compiled" and kernels.native() is not None
    assert kernels.use("auto") == "compiled"
    with pytest.raises(ValueError, match="kernels must be one of"):
        kernels.use("rust")


def test_compiled_kernels_asked_for_where_none_were_built_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setattr(kernels, "_compiled", None)
    with pytest.raises(kernels.KernelsUnavailable, match="pip install"):
        kernels.use("compiled")
    assert kernels.use("auto") == "python" and not kernels.available()


def _documents(rng: random.Random) -> list[InputEvent]:
    """Text upserts (Markdown, HTML, plain, some not ASCII) in one collection, with a footer on every page: they go
    through markup, chunking, boilerplate learning and normalization, which pre-chunked feeds skip."""
    words = "refund policy days store item return shipping account password link email cafe niño über".split()
    footer = "Copyright 2026 Example Inc. All rights reserved."
    events: list[InputEvent] = []
    paragraphs = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 40))) for _ in range(12)]
    for i in range(24):
        body = [rng.choice(paragraphs) for _ in range(rng.randint(2, 5))]
        kind = rng.choice(["text/markdown", "text/html", "text/plain"])
        if kind == "text/markdown":
            text = f"# Page {i % 5}\n\n" + "\n\n".join(body) + f"\n\n{footer}\n"
        elif kind == "text/html":
            text = (
                f"<h1>Page {i % 5}</h1>" + "".join(f"<p>{p}</p>" for p in body) + f"<footer>{footer}</footer>"
            )
        else:
            text = "\n\n".join(body) + f"\n\n{footer}"
        attrs = SourceAttrs(
            acl=rng.choice([("*",), ("eng",), ("eng", "support")]), modified_at=(i + 1) * 10**9
        )
        source = f"doc-{rng.randrange(16)}"
        events.append(
            UpsertEvent(
                source_id=source, version=i + 1, attrs=attrs, text=text, content_type=kind, collection="site"
            )
        )
    return events


def _example() -> list[InputEvent]:
    events = []
    for line in (ROOT / "examples" / "feed.jsonl").read_bytes().splitlines():
        try:
            events.append(decode_event(line))
        except Exception:  # the example holds a line for the dead-letter topic
            continue
    return events


def _with_decisions(rng: random.Random) -> list[InputEvent]:
    pool = ParagraphPool(rng)
    return with_decisions(rng, random_feed(rng, sources=8, events=80, pool=pool), pool)


FEEDS = {
    "example": _example,
    "random": lambda: random_feed(random.Random(7), sources=10, events=120),
    "decisions": lambda: _with_decisions(random.Random(8)),
    "documents": lambda: _documents(random.Random(9)),
}


def _embedded(kind: str, events: list[InputEvent], params: EngineParams) -> tuple[bytes, dict[object, bytes]]:
    kernels.use(kind)
    store = MemoryStore()
    runner = EmbeddedRunner(Engine(params), store)
    produced: list[object] = []
    for start in range(0, len(events), 5):
        runner.process(events[start : start + 5], produced.extend)
    state = {(family, *key): store.get(family, *key) for family in FAMILIES for key in store.keys(family)}
    return b"".join(encode_output_line(o) for o in produced), state  # type: ignore[arg-type]


@pytest.mark.parametrize("feed", sorted(FEEDS))
def test_both_kernels_write_the_same_bytes(feed: str) -> None:
    events = FEEDS[feed]()
    params = EngineParams(boilerplate_min_docs=3)
    compiled = _embedded("compiled", events, params)
    python = _embedded("python", events, params)
    assert compiled[0] and compiled[1]
    assert python[0] == compiled[0]
    assert python[1].keys() == compiled[1].keys()
    differing = [key for key, value in compiled[1].items() if python[1][key] != value]
    assert differing == []


def test_both_kernels_route_and_apply_the_same_over_many_partitions() -> None:
    events = random_feed(random.Random(5), sources=10, events=100) + _documents(random.Random(6))
    outputs = []
    for kind in ("compiled", "python"):
        kernels.use(kind)
        simulation = SimulationDriver(Engine(EngineParams()), partitions=4, seed=3)
        outputs.append(b"".join(encode_output_line(o) for o in simulation.run(events)))
    assert outputs[0] and outputs[1] == outputs[0]


def test_config_names_the_kernels_in_use() -> None:
    def kernels_line(choice: str) -> str:
        env = {**os.environ, "STREAMDEDUP_KERNELS": choice, "COLUMNS": "200"}
        shown = subprocess.run(
            [sys.executable, "-m", "streamdedup", "config"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return next(line for line in shown.splitlines() if "kernels in use" in line)

    assert "python" in kernels_line("python") and "compiled" not in kernels_line("python")
    assert "compiled" in kernels_line("auto")
