"""The collection stage's compiled line counting (``_native.count_lines``) against its Python twin, and the stage."""

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core import _native
from streamdedup.core.messages import BoilerplateUpdate, LineDecision, LineUpdate
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.collection import (
    CollectionStage,
    count_in_python,
    line_hash,
    line_key,
    member_key,
)
from streamdedup.core.stages.context import StageContext
from streamdedup.core.state import CollectionMember, LineRecord, pack_added

# Few collections, sources and lines, so updates meet: texts of every MessagePack string width, and stored counts
# and versions of every integer width (negative ones too), which both sides must read and write alike.
_COLLECTIONS = ["docs", "wiki", "caf\u00e9"]
_SOURCES = ["a", "b", "c"]
_LINES = [
    (f"{i:016x}", text) for i, text in enumerate(["x", "y" * 31, "z" * 32, "w" * 300, "\u00e9t\u00e9", ""])
]
_HASHES = [h for h, _ in _LINES]
_COUNTS = st.sampled_from([1, 2, 127, 128, 255, 256, 65_535, 65_536, 2**32, 2**40])
_VERSIONS = st.sampled_from([-40, -1, 0, 1, 2, 3, 200, 70_000, 2**33])

_updates = st.lists(
    st.tuples(
        st.sampled_from(_COLLECTIONS),
        st.sampled_from(_SOURCES),
        st.integers(0, 3),
        st.booleans(),
        st.lists(st.sampled_from(_LINES), max_size=4).map(pack_added),
        st.lists(st.sampled_from(_HASHES), max_size=4).map(tuple),
    ),
    max_size=10,
)
_stored = st.tuples(
    st.dictionaries(
        st.tuples(st.sampled_from(_COLLECTIONS), st.sampled_from(_HASHES)),
        st.tuples(_COUNTS, st.sampled_from([t for _, t in _LINES])),
        max_size=6,
    ),
    st.dictionaries(
        st.tuples(st.sampled_from(_COLLECTIONS), st.sampled_from(_SOURCES)),
        st.tuples(_VERSIONS, st.booleans()),
        max_size=4,
    ),
)
_encode = msgspec.msgpack.Encoder().encode


def _reader(stored: dict[str, bytes], calls: list[list[str]]):
    def read(keys: list[str]) -> list[bytes | None]:
        calls.append(list(keys))
        return [stored.get(k) for k in keys]

    return read


def _apply(state: dict[str, bytes], writes) -> None:
    for key, raw in writes:
        if raw is None:
            state.pop(key, None)
        else:
            state[key] = raw


@given(
    stored=_stored,
    batches=st.lists(_updates, min_size=1, max_size=4),
    docs=st.dictionaries(st.sampled_from(_COLLECTIONS), st.integers(0, 300)),
    watch=st.dictionaries(st.sampled_from(_COLLECTIONS), st.sets(st.sampled_from(_HASHES))),
    min_docs=st.integers(0, 4),
    fraction=st.sampled_from([0.0, 0.3, 0.5, 1 / 3, 1.0]),
)
def test_the_compiled_line_counting_equals_the_python_twin(stored, batches, docs, watch, min_docs, fraction):
    lines, members = stored
    initial = {line_key(c, h): _encode(LineRecord(count=n, text=t)) for (c, h), (n, t) in lines.items()}
    initial.update(
        {
            member_key(c, s): _encode(CollectionMember(version=v, counted=k))
            for (c, s), (v, k) in members.items()
        }
    )
    native_state, python_state = dict(initial), dict(initial)
    for updates in batches:
        native_calls: list[list[str]] = []
        python_calls: list[list[str]] = []
        native = _native.count_lines(
            updates, _reader(native_state, native_calls), docs, watch, min_docs, fraction
        )
        python = count_in_python(
            updates, _reader(python_state, python_calls), docs, watch, min_docs, fraction
        )
        assert native == python  # the records' bytes too: the same MessagePack as msgspec's
        assert native_calls == python_calls  # one read, of each key once: members, then lines
        _apply(native_state, native[0])
        _apply(python_state, python[0])
        assert native_state == python_state


def test_counts_follow_the_newest_version_of_each_source_and_a_line_goes_with_its_last_document():
    state: dict[str, bytes] = {}
    x, y = _LINES[0], _LINES[1]

    def count(updates, docs=None, watch=None, min_docs=2, fraction=0.5):
        result = _native.count_lines(updates, _reader(state, []), docs or {}, watch or {}, min_docs, fraction)
        _apply(state, result[0])
        return result[1:]

    applied, totals, found = count(
        [
            ("docs", "a", 1, True, pack_added((x, y)), ()),
            ("docs", "b", 1, True, pack_added((x,)), ()),
            ("docs", "a", 1, True, pack_added((y,)), ()),
        ]
    )
    assert applied == [True, True, False]  # the same version again is a duplicate
    assert totals == {"docs": 2}
    assert found == {"docs": {x[0]: (2, x[1]), y[0]: (1, y[1])}}  # both in at least half of the two documents
    assert msgspec.msgpack.decode(state[line_key("docs", x[0])], type=LineRecord) == LineRecord(
        count=2, text="x"
    )
    # b's next version drops x and stops counting; a's older version changes nothing.
    applied, totals, found = count(
        [("docs", "b", 2, False, b"", (x[0],)), ("docs", "a", 0, True, b"", (x[0], y[0]))], docs={"docs": 2}
    )
    assert applied == [True, False]
    assert totals == {"docs": 1}
    assert found == {"docs": {}}  # one document is below min_docs: nothing may be boilerplate
    applied, totals, found = count(
        [("docs", "a", 2, True, b"", (x[0], y[0]))], docs={"docs": 1}, watch={"docs": {y[0]}}
    )
    assert found == {"docs": {y[0]: None}}  # gone with its last document, and reported because it is watched
    assert line_key("docs", x[0]) not in state and line_key("docs", y[0]) not in state
    assert totals == {"docs": 1}  # a still counts, without lines


@pytest.mark.parametrize(
    "raw", [b"\x92\xa1x\xa1x", b"\x92\x01", b"\xc0"]
)  # a text count, a record cut short, nil
def test_a_malformed_line_record_is_refused_by_both(raw):
    stored = {line_key("docs", _HASHES[0]): raw}
    updates = [("docs", "a", 1, True, pack_added((_LINES[0],)), ())]
    with pytest.raises(ValueError, match="malformed line record"):
        _native.count_lines(updates, _reader(stored, []), {}, {}, 1, 0.5)
    with pytest.raises(msgspec.DecodeError):
        count_in_python(updates, _reader(stored, []), {}, {}, 1, 0.5)


def test_a_record_of_more_fields_than_this_version_writes_is_refused_by_the_compiled_side():
    stored = {line_key("docs", _HASHES[0]): b"\x93\x01\xa1x\x02"}
    with pytest.raises(ValueError, match="malformed line record"):
        _native.count_lines(
            [("docs", "a", 1, True, pack_added((_LINES[0],)), ())], _reader(stored, []), {}, {}, 1, 0.5
        )


class _NoMultiGet:
    """A partition state with single reads only."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key):
        return self.data.get(key)

    def put(self, key, value):
        self.data[key] = value

    def delete(self, key):
        self.data.pop(key, None)

    def scan(self, prefix):
        return sorted((k, v) for k, v in self.data.items() if k.startswith(prefix))


def _update(collection, source, version, lines, counted=True):
    return LineUpdate(
        collection, source, version, counted, pack_added([(line_hash(t), t) for t in lines]), ()
    )


def test_the_stage_announces_boilerplate_in_the_order_its_collections_changed():
    params = EngineParams(boilerplate_min_docs=2, boilerplate_fraction=0.5)
    stage = CollectionStage(StageContext.of(params))
    state = _NoMultiGet()
    out = stage.handle(
        [_update("wiki", "a", 1, ["edit this page"]), _update("wiki", "b", 1, ["edit this page", "other"])],
        state,
    )
    assert out == [
        BoilerplateUpdate(
            "wiki", 1, {line_hash("edit this page"): "edit this page", line_hash("other"): "other"}
        )
    ]
    # A decision about a line of docs, then a document of wiki: docs changed first, so it is announced first.
    out = stage.handle(
        [
            LineDecision("docs", "copyright", "strip", 1),
            LineDecision("wiki", "other", "allow", 1),
            _update("wiki", "c", 1, ["edit this page"]),
        ],
        state,
    )
    assert out == [
        BoilerplateUpdate("docs", 1, {line_hash("copyright"): "copyright"}),
        BoilerplateUpdate("wiki", 2, {line_hash("edit this page"): "edit this page"}),
    ]
    # An older decision and a repeated update change nothing.
    assert (
        stage.handle([LineDecision("docs", "copyright", "auto", 0), _update("wiki", "c", 1, ["x"])], state)
        == []
    )
