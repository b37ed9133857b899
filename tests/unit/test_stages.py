"""Stage handlers driven directly: a batch and partition-local state in, keyed messages out."""

import typing

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core import _native
from streamdedup.core.chunking import Chunk
from streamdedup.core.engine import Engine
from streamdedup.core.messages import (
    _ROUTES,
    STAGE_OF,
    STAGES,
    BandAck,
    BandJoin,
    BandLeave,
    BoilerplateUpdate,
    Message,
    Output,
    RefUpdate,
    SourceRefs,
    SourceStatuses,
    VerifyRequest,
    content_id,
    route,
    split,
    split_refs_in_python,
    unpack_refs,
)
from streamdedup.core.model import AclEvent, DeleteEvent, SourceAttrs, UpsertEvent, format_timestamp
from streamdedup.core.normalize import content_hash, normalize
from streamdedup.core.params import EngineParams
from streamdedup.core.partitioning import partition_for
from streamdedup.core.records import MappedAttrs, mapped_attrs
from streamdedup.core.stages.collection import line_hash
from streamdedup.core.stages.source_chunks import plain_chunks, plain_chunks_in_python
from streamdedup.core.stages.source_mappings import (
    _fingerprint,
    current_mapping,
    mapping_in_python,
    merge_in_python,
    refs_in_python,
    source_refs,
)
from streamdedup.core.state import SourceRecord, StatusEntry, pack_statuses, unpack_statuses
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.store.base import Transaction
from streamdedup.store.memory import MemoryStore
from tests.helpers import ref_updates, upsert


def _handle(engine, stage, messages, txn):
    return engine.handle(stage, messages, txn.partition(stage, 0))


def test_source_stage_sends_one_ref_per_content_and_ignores_old_versions(engine):
    txn = Transaction(MemoryStore())
    out = _handle(engine, "source", [upsert("s", 2, ["a b", "c", "A  B"])], txn)
    refs = ref_updates(out)
    assert sorted(r.positions for r in refs) == [(0, 2), (1,)]
    assert all(r.version == 2 for r in refs)
    assert _handle(engine, "source", [upsert("s", 2, ["x"]), upsert("s", 1, ["y"])], txn) == []


def test_source_stage_diffs_versions_and_tombstones_deletes(engine):
    txn = Transaction(MemoryStore())
    _handle(engine, "source", [upsert("s", 1, ["keep", "drop"])], txn)
    out = _handle(engine, "source", [upsert("s", 2, ["keep", "new"])], txn)
    by_position = {r.norm or "<removed>": r.positions for r in ref_updates(out)}
    assert by_position == {"keep": (0,), "new": (1,), "<removed>": ()}
    out = _handle(engine, "source", [DeleteEvent(source_id="s", version=3)], txn)
    assert all(isinstance(m, RefUpdate) and m.positions == () for m in out)
    # the version tombstone keeps a replayed older upsert from bringing the source back
    assert _handle(engine, "source", [upsert("s", 2, ["keep"])], txn) == []


def test_source_stage_keeps_the_statuses_of_the_contents_its_current_chunks_hold(engine):
    txn = Transaction(MemoryStore())
    out = _handle(engine, "source", [upsert("s", 1, ["old one", "kept"])], txn)
    hashes = {r.norm: r.content_hash for r in ref_updates(out)}
    hashes["new one"] = content_hash("new one")

    def status(norm, version):
        return SourceStatuses(
            "s", pack_statuses([StatusEntry(hashes[norm], 1, version, "=", "canonical", 1.0, -1)])
        )

    # One batch: a status for version 1, a version that drops a text and adds one, then the statuses of version 2.
    batch = [status("kept", 1), upsert("s", 2, ["kept", "new one"])]
    batch += [status("old one", 2), status("kept", 2), status("new one", 2)]
    out = _handle(engine, "source", batch, txn)
    mappings = [m.record() for m in out if isinstance(m, Output) and m.topic == "source-mappings"]
    assert [[(c["position"], c["content_hash"]) for c in m["chunks"]] for m in mappings] == [
        [(0, hashes["kept"]), (1, hashes["new one"])]
    ]
    record = msgspec.msgpack.decode(txn.partition("source", 0).get("s"), type=SourceRecord)
    assert set(unpack_statuses(record.statuses)) == {hashes["kept"], hashes["new one"]}


def test_acl_event_resends_positions_with_new_readers(engine):
    txn = Transaction(MemoryStore())
    _handle(engine, "source", [upsert("s", 1, ["a", "b"], acl=("eng",))], txn)
    out = _handle(engine, "source", [AclEvent(source_id="s", version=2, acl=("hr",))], txn)
    assert {m.attrs.acl for m in out if isinstance(m, RefUpdate)} == {("hr",)}
    # the source keeps hashes only: the positions and the new attributes, the content keeps the texts
    assert {(m.positions, m.attrs_only, m.texts) for m in out if isinstance(m, RefUpdate)} == {
        ((0,), True, ()),
        ((1,), True, ()),
    }


def test_a_mapping_is_sent_again_when_the_sources_attributes_change(engine):
    runner = EmbeddedRunner(engine, MemoryStore())

    def mappings(*events):
        outputs = runner.process(list(events), lambda _: None)
        return [o.record() for o in outputs if o.topic == "source-mappings"]

    first = upsert("s", 1, ["one chunk of text", "another"], acl=("hr", "eng"))
    (sent,) = mappings(first)
    assert (sent["schema"], sent["acl"], sent["uri"], "title" in sent) == (
        "streamdedup.mapping/v2",
        ["eng", "hr"],
        "https://example.com/s",
        False,
    )
    assert sent["modified_at"] == format_timestamp(first.attrs.modified_at)
    # An ACL change keeps the chunks, and the mapping is sent again with the new readers.
    (sent,) = mappings(AclEvent(source_id="s", version=2, acl=("ops",)))
    assert (sent["version"], sent["acl"]) == (2, ["ops"])
    # The same chunks under a new title, address and time.
    attrs = msgspec.structs.replace(first.attrs, uri=None, title="Setup", modified_at=5 * 86_400_000_000)
    (sent,) = mappings(msgspec.structs.replace(first, version=3, attrs=attrs))
    assert (sent["version"], sent["acl"], sent["uri"], sent["title"]) == (3, ["eng", "hr"], None, "Setup")
    assert sent["modified_at"] == "1970-01-06T00:00:00Z"
    assert mappings(msgspec.structs.replace(first, version=3, attrs=attrs)) == []  # a replay changes nothing


H1, H2, H3, H9 = ("1" * 64, "2" * 64, "3" * 64, "9" * 64)
# Band buckets hold content ids, and answers name candidates by them.
I1, I2, I3, I9 = (content_id(h) for h in (H1, H2, H3, H9))


def test_band_stage_answers_joins_with_the_other_members(engine):
    txn = Transaction(MemoryStore())
    assert _handle(engine, "band", [BandJoin(H1, 1, ("k",))], txn) == [BandAck(H1, 1, ("k",))]
    assert _handle(engine, "band", [BandJoin(H2, 1, ("k",))], txn) == [BandAck(H2, 1, ("k",), ((I1, 1),))]
    # a duplicate join is answered again and changes nothing
    assert _handle(engine, "band", [BandJoin(H2, 1, ("k",))], txn) == [BandAck(H2, 1, ("k",), ((I1, 1),))]
    # a stale leave (older epoch than the join) does not remove the member
    _handle(engine, "band", [BandJoin(H1, 3, ("k",)), BandLeave(H1, 2, ("k",))], txn)
    assert _handle(engine, "band", [BandJoin(H3, 1, ("k",))], txn)[0].candidates == ((I1, 1), (I2, 1))
    # the joins of one content in one batch get one answer for all their bands, candidates counted by shared bands
    (ack,) = _handle(engine, "band", [BandJoin(H9, 1, ("x",)), BandJoin(H9, 1, ("y",))], txn)
    assert (ack.bands, ack.candidates) == (("x", "y"), ())
    (ack,) = _handle(engine, "band", [BandJoin(H3, 1, ("x", "y"))], txn)
    assert (ack.bands, ack.candidates) == (("x", "y"), ((I9, 2),))
    _handle(
        engine,
        "band",
        [BandLeave(H1, 3, ("k",)), BandLeave(H2, 1, ("k",)), BandLeave(H3, 1, ("k", "x"))],
        txn,
    )
    assert txn.read("band", 0, "k") is None


def test_content_stage_decides_after_discovery(engine):
    txn = Transaction(MemoryStore())
    words = " ".join(f"w{i}" for i in range(30))
    ref = RefUpdate("h", "s", 1, (0,), (words,), words, upsert("s", 1, [words]).attrs)
    out = _handle(engine, "content", [ref], txn)
    (join,) = [m for m in out if isinstance(m, BandJoin)]  # one join, with every band key
    assert len(join.band_keys) == engine.params.bands
    assert not [m for m in out if isinstance(m, Output)]  # nothing is emitted before discovery completes
    acks = [BandAck("h", join.epoch, join.band_keys)]
    out = _handle(engine, "content", acks, txn)
    chunks = [m for m in out if isinstance(m, Output) and m.topic == "canonical-chunks"]
    assert len(chunks) == 1 and chunks[0].key == "h" and chunks[0].record()["revision"] == 1


def test_a_band_message_is_delivered_once_per_band_partition_with_that_partitions_keys(engine):
    keys = tuple(f"{i:03d}key" for i in range(21))
    join = BandJoin(H1, 2, keys)
    assert engine.destinations(join, 1) == [("band", 0, join)]
    parts = engine.destinations(join, 4)
    assert len({p for _, p, _ in parts}) == len(parts) <= 4
    for stage, partition, part in parts:
        assert stage == "band" and (part.content_hash, part.epoch) == (H1, 2)
        assert all(partition_for(k, 4) == partition for k in part.band_keys)
    assert sorted(k for _, _, part in parts for k in part.band_keys) == sorted(keys)


def test_a_crowded_bucket_answers_a_join_with_at_most_max_candidates_others():
    engine = Engine(EngineParams(max_candidates=2))
    txn = Transaction(MemoryStore())
    for member in (H9, H3, H1, H2):
        _handle(engine, "band", [BandJoin(member, 1, ("k", "x"))], txn)
    (ack,) = _handle(engine, "band", [BandJoin("0" * 64, 1, ("k", "x"))], txn)
    assert ack.candidates == ((I1, 2), (I2, 2))  # the lowest ids, two shared bands each


def test_a_new_text_verifies_the_candidates_sharing_the_most_bands_once_every_band_answered():
    engine = Engine(EngineParams(max_candidates=2))
    txn = Transaction(MemoryStore())
    words = " ".join(f"w{i}" for i in range(30))
    ref = RefUpdate("h", "s", 1, (0,), (words,), words, upsert("s", 1, [words]).attrs)
    (join,) = [m for m in _handle(engine, "content", [ref], txn) if isinstance(m, BandJoin)]
    half = len(join.band_keys) // 2
    first = BandAck("h", join.epoch, join.band_keys[:half], ((I9, 2), (I3, 3), (I1, 1)))
    assert not [m for m in _handle(engine, "content", [first], txn) if isinstance(m, VerifyRequest)]
    second = BandAck("h", join.epoch, join.band_keys[half:], ((I2, 4), (I1, 2), (I9, 1)))
    out = _handle(engine, "content", [second, second], txn)  # a duplicate answer counts once
    # Shared bands: H2 4, H3 3, H1 3, H9 3; the first two by bands shared, then by content id.
    assert sorted(m.content_hash for m in out if isinstance(m, VerifyRequest)) == [I1, I2]


def test_every_message_kind_has_the_stage_route_names():
    """The embedded driver queues a message by its kind alone: that stage must be the one ``route`` names."""
    kinds = typing.get_args(Message)
    assert set(STAGE_OF) == set(kinds)
    for kind in kinds:
        assert STAGE_OF[kind] in STAGES
        routed = _ROUTES.get(kind)
        if routed is not None:
            assert STAGE_OF[kind] == routed[0]
    assert STAGE_OF[BandJoin] == STAGE_OF[BandLeave] == "band"
    assert STAGE_OF[BoilerplateUpdate] == "source"


_FLOATS = st.one_of(
    st.floats(), st.floats(0, 1), st.sampled_from([1.0, 0.0, -0.0, 1e-05, 1e16, 0.8571428571428571])
)
_HASHES = st.one_of(st.sampled_from(["h0", "h1", "h2"]), st.text(max_size=70))


def _status(version: st.SearchStrategy[int]) -> st.SearchStrategy[StatusEntry]:
    """A status for a content hash given later (``_packed``)."""
    return st.builds(
        StatusEntry,
        content_hash=st.just(""),
        seq=st.integers(0, 3),
        version=version,
        chunk_id=st.one_of(st.sampled_from(["", "=", "h1"]), st.text(max_size=70)),
        relation=st.sampled_from(["canonical", "near"]),
        jaccard=_FLOATS,
        canonical_position=st.integers(-1, 8),
    )


def _packed(statuses: dict[str, StatusEntry]) -> bytes:
    return pack_statuses(msgspec.structs.replace(e, content_hash=h) for h, e in statuses.items())


@given(
    st.lists(_HASHES, max_size=8),
    st.dictionaries(_HASHES, _status(st.integers(0, 3)), max_size=6),
    st.lists(st.dictionaries(_HASHES, _status(st.integers(0, 3)), max_size=6), max_size=3),
)
def test_the_compiled_status_merge_is_the_pythons(chunks, held, incoming):
    packed, lists = _packed(held), [_packed(statuses) for statuses in incoming]
    merged = _native.merge_statuses(chunks, packed, lists)
    assert merged == merge_in_python(chunks, packed, lists)
    # What it keeps: for each content still listed, the newest status by (seq, version), the first of equals.
    newest: dict[str, StatusEntry] = {}
    for statuses in [held, *incoming]:
        for h, e in statuses.items():
            if h in chunks and (h not in newest or (e.seq, e.version) > (newest[h].seq, newest[h].version)):
                newest[h] = msgspec.structs.replace(e, content_hash=h)
    # Compared as MessagePack, in which a NaN Jaccard equals itself (as == never has it).
    assert _same(unpack_statuses(packed if merged is None else merged), newest)
    assert (merged is None) == _same(unpack_statuses(packed), newest)


def _same(a: dict[str, StatusEntry], b: dict[str, StatusEntry]) -> bool:
    return msgspec.msgpack.encode(sorted(a.items())) == msgspec.msgpack.encode(sorted(b.items()))


_SOURCE_ATTRS = st.builds(
    SourceAttrs,
    acl=st.lists(st.text(max_size=12), max_size=4).map(tuple),
    modified_at=st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999),
    uri=st.none() | st.text(max_size=30),
    title=st.none() | st.text(max_size=30),
)


@given(
    st.lists(_HASHES, max_size=8),
    st.dictionaries(_HASHES, _status(st.integers(1, 2)), max_size=6),
    st.binary(max_size=72),
    st.booleans(),
    _SOURCE_ATTRS,
    st.data(),
)
def test_the_compiled_source_mapping_is_the_pythons(chunks, statuses, before, sent, attrs, data):
    version = 2
    if data.draw(st.booleans(), label="every content answered for the version"):
        statuses = {**statuses, **{h: data.draw(_status(st.just(version))) for h in chunks}}
    packed = _packed(statuses)
    source_id = data.draw(_HASHES, label="source_id")
    described: list[SourceAttrs] = []

    def describe(a: SourceAttrs) -> MappedAttrs:
        described.append(a)
        return mapped_attrs(a)

    def compiled(prints: bytes, sent: bool) -> typing.Any:
        return _native.source_mapping(source_id, attrs, describe, chunks, packed, version, prints, sent)

    expected = mapping_in_python(source_id, attrs, chunks, packed, version, before, sent)
    assert compiled(before, sent) == expected
    if expected is None:
        return
    prints, _ = expected
    record = SourceRecord(version=version, chunks=chunks, statuses=packed)
    assert prints == b"".join(_fingerprint(e) for e in current_mapping("", record) or [])
    assert len(prints) == 8 * len(chunks)
    # Sent for this version and unchanged: nothing to send, and the attributes are not even described. Not sent
    # for it: every row again, and no merge.
    described.clear()
    assert compiled(prints, True) == (prints, None) and described == []
    again = compiled(prints, False)
    assert described == [attrs]
    assert again == mapping_in_python(source_id, attrs, chunks, packed, version, prints, False)
    assert again is not None and again[1] is not None and again[1][1] == []
    value = msgspec.json.decode(again[1][0])
    assert (value["schema"], value["source_id"], value["version"]) == (
        "streamdedup.mapping/v2",
        source_id,
        version,
    )
    # The source's attributes, as a chunk record's source entries write them: a missing title is left out.
    assert (value["acl"], value["modified_at"], value["uri"], value.get("title")) == (
        sorted(attrs.acl),
        format_timestamp(attrs.modified_at),
        attrs.uri,
        attrs.title,
    )
    assert ("title" in value) == (attrs.title is not None)
    assert list(value)[-1] == "chunks"
    assert [row["position"] for row in value["chunks"]] == list(range(len(chunks)))


@given(st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999))
def test_a_chunk_record_writes_a_sources_time_as_the_model_formats_it(micros):
    attrs = SourceAttrs(acl=("*",), modified_at=micros)
    event = UpsertEvent(source_id="s", version=1, attrs=attrs, chunks=("some words of one chunk",))
    outputs = EmbeddedRunner(Engine(EngineParams()), MemoryStore()).process([event], lambda _: None)
    (chunk,) = [o.record() for o in outputs if o.topic == "canonical-chunks"]
    assert chunk["sources"][0]["modified_at"] == format_timestamp(micros)


_CHUNK_TEXT = st.text(st.sampled_from("ab cÉé.,!\n\u00a0ǰ"), max_size=12)


@given(
    st.lists(st.tuples(_CHUNK_TEXT, _CHUNK_TEXT), max_size=8),
    st.lists(st.sampled_from(["a", "b c", "É", ""]).map(content_hash) | _HASHES, max_size=6),
)
def test_the_compiled_reference_list_is_the_pythons(texts, old):
    chunks = [Chunk(original, plain) for original, plain in texts]
    plains, originals = [c.plain for c in chunks], [c.original for c in chunks]
    hashes, packed = source_refs(plains, originals, old)
    assert (hashes, packed) == refs_in_python(plains, originals, old)
    # What it says: each position's hash, and per content of either version (in hash order) its positions, their
    # original texts and its normalized text; a content the version no longer holds has none of them.
    assert hashes == [content_hash(c.plain) for c in chunks]
    message = SourceRefs("s", 3, 1, SourceAttrs(acl=("*",), modified_at=0), packed)
    refs = unpack_refs(message)
    assert [r.content_hash for r in refs] == sorted(set(hashes) | set(old))
    for ref in refs:
        positions = tuple(p for p, h in enumerate(hashes) if h == ref.content_hash)
        assert ref.positions == positions
        assert ref.texts == tuple(chunks[p].original for p in positions)
        assert ref.norm == (normalize(chunks[positions[0]].plain) if positions else "")
        assert ref.attrs == (message.attrs if positions else None)
        assert (ref.source_id, ref.version, ref.attrs_seq) == ("s", 3, 1)


@given(
    st.lists(_CHUNK_TEXT, max_size=12),
    st.lists(_HASHES, max_size=4),
    st.integers(1, 6),
)
def test_a_reference_list_is_split_by_content_partition_as_the_python_splits_it(plains, old, partitions):
    _, packed = source_refs(plains, plains, old)
    parts = _native.split_refs(packed, partitions)
    assert parts == split_refs_in_python(packed, partitions)
    message = SourceRefs("s", 1, 0, None, packed)
    delivered = split(message, partitions)
    assert [(stage, p) for stage, p, _ in delivered] == [("content", p) for p, _ in parts]
    # Each content reaches the partition its id is routed to, once, in the list's order within a partition.
    seen = []
    for _, partition, part in delivered:
        for ref in unpack_refs(part):
            assert partition_for(content_id(ref.content_hash), partitions) == partition
            seen.append(ref)
    assert sorted(seen, key=lambda r: r.content_hash) == unpack_refs(message)
    # A whole list is routed to the content stage by its first content's id, as its first part is delivered.
    first = unpack_refs(message)
    assert route(message) == ("content", content_id(first[0].content_hash) if first else "")


_PLAIN_TEXT = st.text(st.sampled_from("ab É.!?…。,:\n\n\r\t\x0b\x1c\u00a0\u3000"), max_size=80)


@given(_PLAIN_TEXT, st.sampled_from(["text/plain", "text/x-rst"]), st.integers(1, 30), st.data())
def test_the_compiled_plain_text_chunks_are_the_pythons(text, content_type, max_chars, data):
    lines = [line for part in text.split("\n") for line in (part, part.strip())]
    boilerplate = data.draw(st.lists(st.sampled_from(lines) if lines else st.just(""), max_size=3))
    known = {line_hash(normalize(line)): normalize(line) for line in boilerplate} or None
    found = plain_chunks(text, content_type, max_chars, known)
    assert found == plain_chunks_in_python(text, content_type, max_chars, known)
    paragraphs, originals, plains = found
    assert len(originals) == len(plains)
    assert all(p and p == p.strip() for p in paragraphs)
    # No chunk is longer than the limit unless a heading joined it; with no line known, the chunks hold every
    # paragraph's characters but whitespace, in order.
    assert all(len(p) <= max_chars or "\n" in p for p in plains)
    if known is None:
        assert "".join("".join(p.split()) for p in plains) == "".join("".join(p.split()) for p in paragraphs)
