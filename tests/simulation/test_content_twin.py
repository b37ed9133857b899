"""The compiled content stage against its Python twin: the same feeds under the same random schedules give the
same messages and outputs in the same order, and the same records, whatever the interleaving, rewinds and
duplicates (decisions, ACL changes, deletions and dismissed band candidates included)."""

from __future__ import annotations

import random

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.contract.codec import encode_output_line
from streamdedup.core.engine import Engine
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.content import ContentStage, ContentStageInPython
from streamdedup.core.state import ContentIds, ContentRecord, RefEntry
from streamdedup.drivers.simulation import SimulationDriver
from streamdedup.testing.random_feeds import ParagraphPool, random_feed, with_decisions

PARAMS = (
    EngineParams(),
    EngineParams(bands=128, rows=1),  # nearly every pair a band candidate: sketches dismiss most
    EngineParams(max_chunk_sources=2, max_candidates=2, canonical_policy=("modified_at", "source_id")),
)


def _record(key: str, raw: bytes) -> object:
    record_type = (
        RefEntry if key.startswith("r\x00") else ContentIds if key.startswith("i\x00") else ContentRecord
    )
    return msgspec.msgpack.decode(raw, type=record_type)


def _run(stage_type: type, params: EngineParams, feed: list, seed: int, partitions: int, faults: float):
    engine = Engine(params)
    engine.stages["content"] = stage_type(engine.context)
    sim = SimulationDriver(engine, partitions=partitions, seed=seed, rewind=faults, duplicate=faults)
    outputs = [encode_output_line(o) for o in sim.run(feed)]
    state = {(p, k): _record(k, sim.store.get("content", p, k)) for p, k in sim.store.keys("content")}
    return outputs, state


@settings(deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    params=st.sampled_from(PARAMS),
    partitions=st.sampled_from((1, 2, 4)),
    faults=st.sampled_from((0.0, 0.05)),
)
def test_the_compiled_content_stage_equals_the_python_twin(seed, params, partitions, faults):
    rng = random.Random(seed)
    pool = ParagraphPool(rng, families=3)
    feed = with_decisions(rng, random_feed(rng, sources=6, events=30, pool=pool), pool, count=10)
    compiled = _run(ContentStage, params, feed, seed, partitions, faults)
    twin = _run(ContentStageInPython, params, feed, seed, partitions, faults)
    assert compiled[0] == twin[0]
    assert compiled[1] == twin[1]
