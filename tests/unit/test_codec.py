import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.contract.codec import (
    EventLimits,
    decode_event,
    encode_event,
    encode_output_line,
    encode_output_lines,
    event_from_data,
    parse_timestamp,
)
from streamdedup.core.messages import Output
from streamdedup.core.model import AclEvent, DeleteEvent, UpsertEvent
from streamdedup.errors import InvalidEventError

BASE = {
    "schema": "streamdedup.document/v1",
    "op": "upsert",
    "source_id": "wiki:a",
    "version": 1,
    "modified_at": "2024-05-01T10:00:00Z",
    "acl": ["eng", "*"],
    "text": "hello",
}


def event(**changes):
    data = {**BASE, **changes}
    return json.dumps({k: v for k, v in data.items() if v is not ...}).encode()


def test_upsert_is_decoded_with_defaults():
    decoded = decode_event(event())
    assert isinstance(decoded, UpsertEvent)
    assert decoded.attrs.acl == ("*", "eng")
    assert decoded.attrs.modified_at == parse_timestamp("2024-05-01T10:00:00Z")
    assert (decoded.content_type, decoded.collection, decoded.attrs.authority) == ("text/plain", "default", 0)


def test_an_upsert_names_its_lineage_and_its_place_there():
    decoded = decode_event(event(lineage="travel-policy", lineage_version="v2-final"))
    assert (decoded.lineage, decoded.lineage_version) == ("travel-policy", "v2-final")
    assert decode_event(encode_event(decoded)) == decoded
    by_time = decode_event(event(lineage="travel-policy"))
    assert (by_time.lineage, by_time.lineage_version) == ("travel-policy", None)
    assert b"lineage" not in encode_event(decode_event(event()))


def test_delete_and_acl_are_decoded():
    assert isinstance(decode_event(event(op="delete", text=...)), DeleteEvent)
    acl = decode_event(event(op="acl", text=..., acl=["hr"]))
    assert isinstance(acl, AclEvent) and acl.acl == ("hr",)


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"schema": "other/v1"}, "schema", "must be"),
        ({"op": "merge"}, "op", "must be 'upsert', 'delete' or 'acl'"),
        ({"source_id": ""}, "source_id", "1 to 1024"),
        ({"source_id": "x" * 1025}, "source_id", "1 to 1024"),
        ({"source_id": 5}, "source_id", "must be a string"),
        ({"version": -1}, "version", "integer >= 0"),
        ({"version": "3"}, "version", "integer >= 0"),
        ({"version": True}, "version", "integer >= 0"),
        ({"version": ...}, "version", "required"),
        ({"modified_at": ...}, "modified_at", "required"),
        ({"modified_at": "2024-05-01"}, "modified_at", "RFC 3339"),
        ({"modified_at": "2024-05-01T10:00:00"}, "modified_at", "time zone"),
        ({"acl": ...}, "acl", "required"),
        ({"acl": "eng"}, "acl", "list of non-empty principal strings"),
        ({"acl": [""]}, "acl", "list of non-empty principal strings"),
        ({"text": ...}, "text", "exactly one of"),
        ({"chunks": ["a"]}, "text", "exactly one of"),
        ({"text": 3}, "text", "must be a string"),
        ({"text": ..., "chunks": "abc"}, "chunks", "list of strings"),
        ({"content_type": "application/pdf"}, "content_type", "must be one of"),
        ({"authority": 1.5}, "authority", "must be an integer"),
        ({"metadata": []}, "metadata", "must be an object"),
        ({"extra": 1}, "extra", "unknown field"),
        ({"lineage": ""}, "lineage", "must not be empty"),
        ({"lineage": 2}, "lineage", "must be a string"),
        ({"lineage": "travel\x00policy"}, "lineage", "control characters"),
        ({"lineage_version": "2"}, "lineage_version", "only meaningful with 'lineage'"),
    ],
)
def test_invalid_events_name_the_field(changes, field, message):
    with pytest.raises(InvalidEventError) as info:
        decode_event(event(**changes))
    assert info.value.field == field
    assert message in str(info.value)
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize("raw", [b"", b"{", b"[1]", b"null", b'"text"', b"\xff\xfe"])
def test_undecodable_input_is_invalid(raw):
    with pytest.raises(InvalidEventError):
        decode_event(raw)


def test_oversized_event_is_invalid():
    with pytest.raises(InvalidEventError, match="exceeds the limit of 2000 bytes"):
        decode_event(event(text="x" * 3000), EventLimits(bytes=2000))


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T01:00:00+01:00", 0),
        ("1970-01-01T00:00:01.5Z", 1_500_000),
        ("1970-01-01t00:00:00.1234567z", 123_456),
    ],
)
def test_timestamps(text, micros):
    assert parse_timestamp(text) == micros


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_invalid_event(raw):
    with contextlib.suppress(InvalidEventError):
        decode_event(raw)


@given(
    st.builds(
        dict,
        source_id=st.text(alphabet=st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=30),
        version=st.integers(0, 10**12),
        acl=st.lists(st.text(min_size=1, max_size=8), max_size=3),
        chunks=st.lists(st.text(max_size=40), max_size=4),
        authority=st.integers(-5, 5),
        micros=st.integers(0, 4 * 10**15),
    )
)
def test_encode_then_decode_round_trips(fields):
    from streamdedup.core.model import SourceAttrs

    attrs = SourceAttrs(
        acl=tuple(sorted(set(fields["acl"]))), modified_at=fields["micros"], authority=fields["authority"]
    )
    original = UpsertEvent(
        source_id=fields["source_id"], version=fields["version"], attrs=attrs, chunks=tuple(fields["chunks"])
    )
    assert decode_event(encode_event(original)) == original


def test_output_line_is_one_json_object_per_line():
    line = encode_output_line(Output("source-mappings", "a", None))
    assert line == b'{"topic":"source-mappings","key":"a","value":null}\n'


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(
    st.lists(
        st.builds(Output, st.text(), st.none() | st.text(), st.none() | st.dictionaries(st.text(), _JSON)),
        max_size=5,
    )
)
def test_a_batch_of_output_lines_is_the_lines_one_by_one(outputs):
    assert encode_output_lines(outputs) == b"".join(encode_output_line(o) for o in outputs)


SMALL = EventLimits(depth=6, chunks=3, chunk_chars=10, acl=2, principal_chars=5, string_chars=8)


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"version": 2**63}, "version", "fits in 64 bits"),
        ({"version": 10**40}, "version", "fits in 64 bits"),
        ({"authority": -(2**63) - 1}, "authority", "fits in 64 bits"),
        ({"metadata": {"a": [1, {"b": 2**64}]}}, "metadata", "integers must fit in 64 bits"),
        ({"text": ..., "chunks": ["a", "b", "c", "d"]}, "chunks", "at most 3 chunks, not 4"),
        ({"text": ..., "chunks": ["a" * 11]}, "chunks", "a chunk of 11 characters exceeds the limit of 10"),
        ({"acl": ["a", "b", "c"]}, "acl", "at most 2 principals, not 3"),
        ({"acl": ["abcdef"]}, "acl", "principals must be at most 5 characters"),
        ({"uri": "u" * 9}, "uri", "at most 8 characters"),
        ({"title": "t" * 9}, "title", "at most 8 characters"),
        ({"collection": "c" * 9}, "collection", "at most 8 characters"),
        ({"modified_at": "9999-12-31T23:59:59-23:59"}, "modified_at", "out of the range"),
        ({"modified_at": "0001-01-01T00:00:00+23:59"}, "modified_at", "out of the range"),
    ],
)
def test_bounds_name_the_field_and_the_bound(changes, field, message):
    with pytest.raises(InvalidEventError) as info:
        decode_event(event(**changes), SMALL)
    assert info.value.field == field
    assert message in str(info.value)


def test_events_within_the_bounds_pass():
    within = event(
        text=...,
        chunks=["a" * 10] * 3,
        acl=["abcde", "*"],
        uri="u" * 8,
        metadata={"a": {"b": {"c": 2**63 - 1}}},
    )
    assert decode_event(within, SMALL).chunks == ("a" * 10,) * 3


@pytest.mark.parametrize("raw", [b"[" * 5000 + b"]" * 5000, b'{"a":' * 5000 + b"1" + b"}" * 5000])
def test_nesting_is_checked_before_the_parser_sees_it(raw):
    with pytest.raises(InvalidEventError, match="JSON nested deeper than 6 levels"):
        decode_event(raw, SMALL)


def test_data_built_without_a_parser_is_held_to_the_same_depth():
    data = {**json.loads(event()), "metadata": {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}}
    with pytest.raises(InvalidEventError, match="metadata: nested deeper than 6 levels"):
        event_from_data(data, SMALL)


def test_brackets_inside_strings_do_not_count_as_nesting():
    deep_looking = "[" * 100 + '\\"{{{{{{{{'
    assert decode_event(event(title=deep_looking), EventLimits(depth=3)).attrs.title == deep_looking


def test_anything_else_that_fails_while_decoding_is_an_invalid_event(monkeypatch):
    import streamdedup.contract.codec as codec

    def explode(data, limits):
        raise MemoryError("no room")

    monkeypatch.setattr(codec, "event_from_data", explode)
    with pytest.raises(InvalidEventError, match=r"could not be decoded \(MemoryError: no room\)"):
        decode_event(event())


def test_a_str_with_a_lone_surrogate_is_invalid_not_a_crash():
    with pytest.raises(InvalidEventError):
        decode_event(event().decode().replace('"wiki:a"', '"\ud800"'))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"source_id": "\x00boilerplate\x00default"}, "source_id"),  # would share a key with stage records
        ({"source_id": "\x00*"}, "source_id"),  # the routing key of broadcast messages
        ({"source_id": "a\nb"}, "source_id"),
        ({"collection": "docs\x00x"}, "collection"),
    ],
)
def test_keys_refuse_control_characters(changes, field):
    with pytest.raises(InvalidEventError, match="must not contain control characters") as info:
        decode_event(event(**changes))
    assert info.value.field == field


def test_an_unterminated_string_full_of_escapes_is_rejected_in_linear_time():
    # Rescanning from every escape made this take days at a few megabytes; the test's timeout would catch it.
    raw = b'{"schema":"streamdedup.document/v1","source_id":"' + b'\\"' * 1_000_000 + b"[" * 40
    with pytest.raises(InvalidEventError):
        decode_event(raw, EventLimits(depth=32))


@pytest.mark.parametrize(
    "text",
    [
        "9999-12-31T23:59:59.999999Z",
        "0001-01-01T00:00:00Z",
        "1969-12-31T23:59:59.999999Z",
        "2024-05-01T10:00:00Z",
    ],
)
def test_timestamps_at_the_edges_render_exactly(text):
    from streamdedup.core.model import format_timestamp

    assert format_timestamp(parse_timestamp(text)) == text


def test_a_timestamp_with_a_trailing_line_break_is_invalid():
    with pytest.raises(InvalidEventError, match="modified_at"):
        decode_event(event(modified_at="2024-05-01T10:00:00Z\n"))
