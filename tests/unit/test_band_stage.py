"""The band stage's compiled batch (``_native.apply_bands``) against its Python twin, batch after batch."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core import _native, kernels
from streamdedup.core.messages import BandAck, BandJoin, BandLeave
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.bands import (
    MEMBER_PREFIX,
    BandStage,
    apply_in_python,
    buckets_of_members,
    logged,
    members,
)
from streamdedup.core.stages.context import StageContext
from tests.helpers import DictState

# Few ids and keys, so buckets fill, members collide and joins meet leaves. Two hashes share an id (their first
# 16 hex digits) and differ after it, as two texts whose ids collide do.
_HASHES = [f"{i:02x}" * 8 + "ab" * 24 for i in (0, 1, 2, 3, 250)] + ["02" * 8 + "cd" * 24]
_KEYS = [f"{band:03}{value:016x}" for band in range(3) for value in range(3)] + ["b\u00e9"]

_ops = st.lists(
    st.tuples(
        st.booleans(),
        st.sampled_from(_HASHES),
        st.integers(0, 3),
        st.lists(st.sampled_from(_KEYS), max_size=4).map(tuple),
    ),
    max_size=12,
)


def _reader(stored: dict[str, bytes], calls: list[list[str]]):
    def read(keys: list[str]) -> list[bytes | None]:
        calls.append(list(keys))
        return [stored.get(k) for k in keys]

    return read


@given(batches=st.lists(_ops, min_size=1, max_size=5), limit=st.integers(0, 4))
def test_the_compiled_band_batch_equals_the_python_twin(batches, limit):
    native_state: dict[str, bytes] = {}
    python_state: dict[str, bytes] = {}
    for ops in batches:
        native_calls: list[list[str]] = []
        python_calls: list[list[str]] = []
        native = _native.apply_bands(ops, _reader(native_state, native_calls), limit)
        python = apply_in_python(ops, _reader(python_state, python_calls), limit)
        assert native == python
        assert native_calls == python_calls  # one read, of each key once, in order of first use
        writes, answers = native
        assert all(type(bands) is tuple and type(candidates) is tuple for _, _, bands, candidates in answers)
        assert all(type(candidate) is tuple for *_, candidates in answers for candidate in candidates)
        for state in (native_state, python_state):
            for key, raw in writes:
                if raw is None:
                    state.pop(key, None)
                else:
                    state[key] = raw
        assert native_state == python_state


def test_a_join_finds_the_others_in_its_buckets_and_a_leave_takes_it_out():
    a, b, c = _HASHES[:3]
    state: dict[str, bytes] = {}

    def apply(ops, limit=100):
        writes, answers = _native.apply_bands(ops, _reader(state, []), limit)
        for key, raw in writes:
            if raw is None:
                state.pop(key, None)
            else:
                state[key] = raw
        return answers

    assert apply([(True, a, 1, ("k1", "k2")), (True, b, 1, ("k1",))]) == [
        (a, 1, ("k1", "k2"), ()),
        (b, 1, ("k1",), ((a[:16], 1),)),
    ]
    assert apply([(True, c, 1, ("k1", "k2"))]) == [(c, 1, ("k1", "k2"), ((a[:16], 2), (b[:16], 1)))]
    assert apply([(True, c, 1, ("k1", "k2"))], limit=1) == [(c, 1, ("k1", "k2"), ((a[:16], 2),))]
    apply([(False, a, 1, ("k1", "k2")), (False, b, 0, ("k1",))])  # b's leave is older than its join: kept
    assert apply([(True, c, 2, ("k1", "k2"))]) == [(c, 2, ("k1", "k2"), ((b[:16], 1),))]
    apply([(False, b, 1, ("k1",)), (False, c, 2, ("k1", "k2"))])
    assert state == {}  # empty buckets are deleted


def test_a_malformed_content_hash_is_refused_as_the_python_twin_refuses_it():
    ops = [(True, "not a hash at all", 1, ("k1",))]
    with pytest.raises(ValueError):
        _native.apply_bands(ops, _reader({}, []), 10)
    with pytest.raises(ValueError):
        apply_in_python(ops, _reader({}, []), 10)


def test_the_stage_reads_key_by_key_where_the_state_has_no_multi_get():
    stage = BandStage(StageContext.of(EngineParams()))
    state = DictState()
    a, b = _HASHES[:2]
    assert stage.handle([BandJoin(a, 1, ("k1",)), BandJoin(b, 1, ("k1", "k2"))], state) == [
        BandAck(a, 1, ("k1",), ()),
        BandAck(b, 1, ("k1", "k2"), ((a[:16], 1),)),
    ]
    assert stage.handle([BandLeave(a, 1, ("k1",)), BandLeave(b, 1, ("k1", "k2"))], state) == []
    assert state.values == {}


def _entries(state: dict[str, bytes]) -> set[tuple[str, str, int]]:
    """(band key, content id, epoch) of every bucket entry, and of every member record, as two views to compare."""
    from_buckets = {
        (key, raw[at : at + 8].hex(), int.from_bytes(raw[at + 8 : at + 12], "big"))
        for key, raw in state.items()
        if not logged(key)
        for at in range(0, len(raw), 12)
    }
    from_members = {
        (band_key, key[len(MEMBER_PREFIX) :], epoch)
        for key, raw in state.items()
        if logged(key)
        for band_key, epoch in members(raw).items()
    }
    assert from_buckets == from_members
    return from_buckets


@pytest.mark.parametrize("choice", ["python", "compiled"])
@given(batches=st.lists(_ops, min_size=1, max_size=6), start=st.integers(0, 6))
def test_member_records_are_the_buckets_turned_around_and_rebuild_them(choice, batches, start):
    """What a Kafka worker's band changelog holds (member records) rebuilds the buckets it kept, from nothing or
    from the state after any earlier batch, as recovery does from an empty store or from a local one."""
    stage = BandStage(StageContext.of(EngineParams(max_candidates=3), band_members=True))
    held = kernels.kind()
    kernels.use(choice)
    try:
        state: dict[str, bytes] = {}
        states = [dict(state)]
        for ops in batches:
            messages = [BandJoin(h, e, k) if join else BandLeave(h, e, k) for join, h, e, k in ops]
            plain: dict[str, bytes] = {k: v for k, v in state.items() if not logged(k)}
            stage.handle(messages, _Stored(state))
            without = BandStage(StageContext.of(EngineParams(max_candidates=3)))
            without.handle(messages, _Stored(plain))
            assert plain == {k: v for k, v in state.items() if not logged(k)}  # the buckets are the same
            _entries(state)
            states.append(dict(state))
        for before in (states[0], states[min(start, len(states) - 1)]):
            rebuilt = dict(before)
            changed = sorted({k for k in (*before, *state) if logged(k) and before.get(k) != state.get(k)})
            changes = [(k[len(MEMBER_PREFIX) :], before.get(k), state.get(k)) for k in changed]
            writes = buckets_of_members(changes, lambda keys, held=rebuilt: [held.get(k) for k in keys])
            assert all(not logged(key) for key, _ in writes)
            for key, raw in [*writes, *((k, state.get(k)) for k in changed)]:
                if raw is None:
                    rebuilt.pop(key, None)
                else:
                    rebuilt[key] = raw
            assert rebuilt == state
    finally:
        kernels.use(held)


class _Stored(DictState):
    """A partition state over a given dict."""

    def __init__(self, values: dict[str, bytes]) -> None:
        self.values = values
