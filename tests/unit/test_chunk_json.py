"""The compiled content stage writes each ``canonical-chunks`` value as JSON itself: the bytes must be what msgspec
writes for the Python twin's value (strings, floats and arbitrary metadata included), so that outputs compare equal
as bytes whichever stage made them (I5)."""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.contract.codec import encode_output_line
from streamdedup.core import _native
from streamdedup.core.engine import Engine
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.content import ContentStage, ContentStageInPython
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.store.memory import MemoryStore

INT64 = st.integers(-(2**63), 2**63 - 1)
SCALARS = st.none() | st.booleans() | INT64 | st.integers(2**63, 2**64 - 1) | st.floats() | st.text()
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
TEXT = (
    "the quick brown fox jumps over the lazy dog near the river bank in the morning light while a heron waits "
    "by the reeds and the ferryman counts the coins of the early passengers before the bridge opens to carts"
)
NEAR = TEXT.replace("carts", "wagons")  # Jaccard 35/37 of the 5-word shingles


@given(JSON)
def test_a_value_is_written_as_msgspec_writes_it(value):
    assert _native.json_from_msgpack(msgspec.msgpack.encode(value)) == msgspec.json.encode(value)


@given(
    st.floats() | st.sampled_from([1e-6, 1e-5, 1e-4, 1.2e-5, 1e15, 1e16, 9.999999999999998e15, 5e-324, -0.0])
)
def test_a_float_is_written_in_msgspecs_digits_and_layout(number):
    written = _native.json_from_msgpack(msgspec.msgpack.encode(number))
    assert written == msgspec.json.encode(number)
    assert written == b"null" if not math.isfinite(number) else float(written) == number


def _outputs(stage_type: type, events: list[UpsertEvent]) -> list:
    engine = Engine(EngineParams())
    engine.stages["content"] = stage_type(engine.context)
    return EmbeddedRunner(engine, MemoryStore()).process(events, lambda _: None)


def _event(number: int, chunks: tuple[str, ...], title: str | None, metadata: dict | None) -> UpsertEvent:
    attrs = SourceAttrs(
        acl=("team-\n\"a\"", "*"), modified_at=1_700_000_000_000_000 + number, authority=number % 3,
        uri=None if number % 2 else f"https://docs.example/\u00e9/{number}", title=title, metadata=metadata,
    )  # fmt: skip
    return UpsertEvent(source_id=f"s-{number}\t\u2028", version=1, attrs=attrs, chunks=chunks)


@settings(max_examples=50, deadline=None)
@given(
    titles=st.lists(st.none() | st.text(max_size=12), min_size=3, max_size=3),
    metadata=st.lists(
        st.none() | st.dictionaries(st.text(max_size=6), JSON, max_size=3), min_size=3, max_size=3
    ),
)
@pytest.mark.usefixtures("compiled_kernels")
def test_the_compiled_chunk_record_is_the_twins_bytes(titles, metadata):
    events = [
        _event(0, (TEXT,), titles[0], metadata[0]),
        _event(1, (TEXT, NEAR), titles[1], metadata[1]),
        _event(2, (NEAR,), titles[2], metadata[2]),
    ]
    compiled, twin = _outputs(ContentStage, events), _outputs(ContentStageInPython, events)
    assert [encode_output_line(o) for o in compiled] == [encode_output_line(o) for o in twin]
    chunks = [o for o in compiled if o.topic == "canonical-chunks" and o.value is not None]
    assert chunks and all(isinstance(o.value, msgspec.Raw) for o in chunks)
    assert any(len(o.record()["members"]) == 2 for o in chunks)  # a near member, with its Jaccard as a float


def test_metadata_json_cannot_hold_is_left_to_the_outputs_encoder():
    events = [_event(0, (TEXT,), None, {"blob": b"\x00\xff"}), _event(1, (TEXT,), None, {"n": 1.5})]
    compiled, twin = _outputs(ContentStage, events), _outputs(ContentStageInPython, events)
    assert [encode_output_line(o) for o in compiled] == [encode_output_line(o) for o in twin]
    (chunk,) = [o for o in compiled if o.topic == "canonical-chunks"]
    assert isinstance(chunk.value, dict) and chunk.value["revision"] == 1
