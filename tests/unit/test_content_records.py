"""The compiled content stage's records: the bytes msgspec writes, for every record the stage keeps.

msgspec leaves out a field whose value *is* its default object, so a float equal to its default but computed
(``jaccard`` 1.0) is written; the compiled records leave out every field equal to its default. Both read the other's
bytes as the same record, and the compiled bytes are msgspec's once such fields hold their default objects.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core import _native
from streamdedup.core.messages import Info, MemberReport, PairMark, RefUpdate, SourceRef
from streamdedup.core.model import Rank, SourceAttrs
from streamdedup.core.normalize import content_hash, normalize
from streamdedup.core.stages.content import ContentStage, ContentStageInPython
from streamdedup.core.stages.context import StageContext
from streamdedup.core.state import (
    ChunkStatus,
    Conflict,
    ContentIds,
    ContentRecord,
    NeighborEntry,
    RefEntry,
    TopRef,
)
from streamdedup.store.base import Transaction
from streamdedup.store.memory import MemoryStore

texts = st.text(max_size=40) | st.text(min_size=200, max_size=400) | st.sampled_from(["", "*", "a b"])
ints = st.integers(-(2**63), 2**63 - 1) | st.integers(-300, 70_000)
floats = st.floats(allow_nan=False) | st.sampled_from([1.0, 0.0, 0.8, 0.875])
json_values = st.recursive(
    st.none() | st.booleans() | ints | floats | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
attrs = st.builds(
    SourceAttrs,
    acl=st.lists(texts, max_size=3).map(tuple),
    modified_at=ints,
    authority=ints,
    uri=st.none() | texts,
    title=st.none() | texts,
    metadata=st.none() | st.dictionaries(texts, json_values, max_size=3),
    preferred=st.booleans(),
)
ranks = st.builds(Rank, ints, ints, ints, texts, texts, st.booleans())
roles = st.sampled_from(["pending", "canonical", "member", "dead"])
infos = st.builds(Info, ints, roles, st.none() | ranks, st.lists(texts, max_size=3).map(tuple), texts)
marks = st.builds(PairMark, st.sampled_from(["merge", "keep_separate", "reopen"]), ints)
reports = st.builds(
    MemberReport,
    floats,
    st.lists(st.builds(SourceRef, texts, ints, attrs), max_size=3).map(tuple),
    ints,
    st.none() | ranks,
)
statuses = st.builds(
    ChunkStatus, texts, st.sampled_from(["canonical", "near"]), floats, st.none() | st.tuples(texts, ints)
)
conflicts = st.builds(Conflict, texts, floats, ranks, texts, st.lists(texts, max_size=3).map(tuple))
names = st.text(max_size=64)
int_maps = st.dictionaries(names, ints, max_size=20)

records = st.builds(
    ContentRecord,
    seq=ints,
    epoch=ints,
    alive=st.booleans(),
    has_text=st.booleans(),
    norm_stored=texts,
    text=texts,
    length=ints,
    indexed=st.booleans(),
    positions=ints,
    principals=int_maps,
    top=st.lists(st.builds(TopRef, texts, ints, attrs, texts), max_size=3),
    pending_bands=st.lists(names, max_size=20),
    candidates=int_maps,
    sketch=st.binary(max_size=300),
    pending_verify=st.lists(names, max_size=3),
    checked=st.lists(names, max_size=3),
    neighbors=st.dictionaries(names, st.builds(NeighborEntry, jaccard=floats, info=infos), max_size=3),
    role=roles,
    target=texts,
    jaccard=floats,
    canonical_ref=st.none() | st.tuples(texts, ints),
    members=st.dictionaries(names, reports, max_size=2),
    sent_info=st.none() | infos,
    sent_report=st.none() | reports,
    sent_status=st.none() | statuses,
    record_digest=texts,
    revision=ints,
    flagged=st.lists(names, max_size=3),
    conflicted=st.booleans(),
    conflict=st.none() | conflicts,
    flag_partner=texts,
    raised=st.lists(names, max_size=3),
    decisions=st.dictionaries(names, marks, max_size=3),
)
refs = st.builds(
    RefEntry,
    version=ints,
    positions=st.lists(ints, max_size=4).map(tuple),
    texts=st.lists(texts, max_size=3).map(tuple),
    attrs=st.none() | attrs,
    attrs_seq=ints,
)
ids = st.builds(
    ContentIds, hashes=st.lists(names, max_size=3), sketches=st.lists(st.binary(max_size=40), max_size=3)
)


def _canonical(record: ContentRecord) -> ContentRecord:
    """The record with every field that equals its default holding the default object itself."""
    defaults = ContentRecord()
    equal = {
        name: getattr(defaults, name)
        for name in ContentRecord.__struct_fields__
        if getattr(record, name) == getattr(defaults, name)
    }
    return msgspec.structs.replace(record, **equal)


@given(records)
def test_content_records_encode_as_msgspec_does(record: ContentRecord) -> None:
    raw = msgspec.msgpack.encode(record)
    compiled = _native.content_reencode("content", raw)
    assert compiled == msgspec.msgpack.encode(_canonical(record))
    assert msgspec.msgpack.decode(compiled, type=ContentRecord) == record


@given(refs)
def test_source_entries_encode_as_msgspec_does(entry: RefEntry) -> None:
    raw = msgspec.msgpack.encode(entry)
    assert _native.content_reencode("ref", raw) == raw


@given(ids)
def test_content_id_lists_encode_as_msgspec_does(entry: ContentIds) -> None:
    raw = msgspec.msgpack.encode(entry)
    assert _native.content_reencode("ids", raw) == raw


def test_records_read_as_leniently_as_msgspec_reads_them() -> None:
    # Fields in another order, an unknown field, an integer where a float is due, array-like structs shorter
    # (their last fields default) and longer (the rest ignored) than this version writes.
    attrs = {"modified_at": 5, "acl": ["*"], "later": [1, 2]}
    raw = msgspec.msgpack.encode(
        {
            "jaccard": 1,
            "unknown": {"a": [1.5, None]},
            "top": [["s", 1, attrs], ["t", 2, attrs, "T", "extra"]],
            "neighbors": {"h": [0.9, [3, "canonical"]]},
            "seq": 7,
        }
    )
    expected = msgspec.msgpack.decode(raw, type=ContentRecord)
    assert expected.top[0].text == "" and expected.neighbors["h"].info.readers == ()
    assert _native.content_reencode("content", raw) == msgspec.msgpack.encode(_canonical(expected))
    short = msgspec.msgpack.encode([4, [1]])
    assert _native.content_reencode("ref", short) == msgspec.msgpack.encode(
        msgspec.msgpack.decode(short, type=RefEntry)
    )


@pytest.mark.parametrize(
    ("kind", "raw"),
    [
        ("content", b""),
        ("content", b"\x81\xa3seq\xa1x"),  # a string where an integer is due
        ("content", b"\x81\xa4role\xa3odd"),  # a role that does not exist
        ("content", b"\x81\xa3top\x91\x92\xa1s\x01"),  # a position without its attributes
        ("ref", b"\x95\x03\x90\x90\x81\xa3acl\x90\x00"),  # attributes without modified_at
        ("ids", b"\x92\x90"),  # cut short
        ("content", b"\x80\x00"),  # bytes after the record
    ],
)
def test_malformed_records_are_refused_like_msgspec_refuses_them(kind: str, raw: bytes) -> None:
    record_type = {"content": ContentRecord, "ref": RefEntry, "ids": ContentIds}[kind]
    with pytest.raises(msgspec.DecodeError):
        msgspec.msgpack.decode(raw, type=record_type)
    with pytest.raises(ValueError, match=f"malformed {kind} record"):
        _native.content_reencode(kind, raw)


@pytest.mark.usefixtures("compiled_kernels")
def test_a_malformed_stored_record_is_an_error_that_names_its_key(engine):
    # Corrupt state is an ordinary exception, which drivers isolate like any failing batch, never a crash.
    text = "a stored record that cannot be read any more"
    key = content_hash(text)
    txn = Transaction(MemoryStore())
    state = txn.partition("content", 0)
    state.put(key, b"\x81\xa3seq\xa1x")
    update = RefUpdate(key, "s", 1, (0,), (text,), normalize(text), SourceAttrs(acl=("*",), modified_at=0))
    with pytest.raises(ValueError, match=f"malformed content record at .{key}.: expected an integer"):
        ContentStage(StageContext.of(engine.params)).handle([update], state)  # the compiled kernel's context
    with pytest.raises(msgspec.DecodeError):
        ContentStageInPython(engine.context).handle([update], state)
