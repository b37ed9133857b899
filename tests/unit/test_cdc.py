"""Change-data-capture feeds: Debezium change events mapped onto the contract's events."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.contract.cdc import STREAMED, UNAVAILABLE, FeedDecoder, FeedMapping, load_feeds
from streamdedup.contract.codec import DEFAULT_LIMITS, EventLimits, encode_event
from streamdedup.core.model import AclEvent, DeleteEvent, UpsertEvent
from streamdedup.core.output_view import View
from streamdedup.errors import ConfigurationError, InvalidEventError
from streamdedup.testing.debezium import change, key, record_value

FEEDS = """
[[feed]]
name = "documents"
topic = "pg.public.documents"
table = "public.documents"
source_id = "pg:{table}:{id}"
text = "body"
content_type = "text/plain"
content_type_column = "content_type"
acl = "acl"
modified_at = "modified_at"
collection = "{space}"
authority = "authority"
uri = "https://wiki.example/{{pages}}/{id}"
title = "title"
metadata = ["space"]
"""


def row(row_id: int = 7, **columns):
    base = {
        "id": row_id,
        "space": "eng",
        "body": "Refunds are issued within 30 days of purchase.",
        "content_type": None,
        "acl": ["group:eng", "user:ana"],
        "modified_at": "2026-11-02T10:15:00.123456Z",
        "authority": 2,
        "title": "Refunds",
    }
    return {**base, **columns}


@pytest.fixture
def decoder(tmp_path: Path) -> FeedDecoder:
    path = tmp_path / "feeds.toml"
    path.write_text(FEEDS)
    return load_feeds(path).for_topic("pg.public.documents")


@pytest.mark.parametrize("wrapped", [False, True])
@pytest.mark.parametrize("op", ["r", "c", "u"])
def test_a_row_image_is_an_upsert_with_every_mapped_column(decoder, op, wrapped):
    value = record_value(change(op, lsn=90_000, after=row()), wrapped=wrapped)
    event = decoder.decode(value, key(7, wrapped=wrapped))
    assert isinstance(event, UpsertEvent)
    assert event.source_id == "pg:documents:7"
    assert event.version == (90_000 if op == "r" else STREAMED + 90_000)
    assert event.text == "Refunds are issued within 30 days of purchase."
    assert event.content_type == "text/plain"
    assert event.collection == "eng"
    assert event.attrs.acl == ("group:eng", "user:ana")
    assert event.attrs.authority == 2
    assert event.attrs.uri == "https://wiki.example/{pages}/7"
    assert event.attrs.title == "Refunds"
    assert event.attrs.metadata == {"space": "eng"}
    assert encode_event(event).count(b'"modified_at":"2026-11-02T10:15:00.123456Z"') == 1


def test_the_content_type_column_wins_where_it_is_set_and_json_text_is_an_acl(decoder):
    value = record_value(change("c", lsn=5, after=row(content_type="text/markdown", acl='["b", "a"]')))
    event = decoder.decode(value)
    assert isinstance(event, UpsertEvent)
    assert event.content_type == "text/markdown" and event.attrs.acl == ("a", "b")


def test_without_a_modified_at_column_the_commit_time_is_used():
    mapping = FeedMapping(topic="t", source_id="{id}", text="body", acl="acl")
    value = record_value(change("c", lsn=5, after=row(), ts_ms=1_700_000_000_250))
    event = FeedDecoder([mapping]).decode(value)
    assert isinstance(event, UpsertEvent)
    assert encode_event(event).count(b'"modified_at":"2023-11-14T22:13:20.25Z"') == 1
    # epoch microseconds (Debezium's MicroTimestamp) in a column are read as such
    micro = FeedMapping(topic="t", source_id="{id}", text="body", acl="acl", modified_at="changed")
    value = record_value(change("c", lsn=6, after=row(changed=1_700_000_000_250_000)))
    event = FeedDecoder([micro]).decode(value)
    assert isinstance(event, UpsertEvent) and event.attrs.modified_at == 1_700_000_000_250_000


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_delete_takes_its_source_id_from_the_key_columns_and_its_tombstone_maps_to_nothing(
    decoder, wrapped
):
    value = record_value(change("d", lsn=91_000, before={"id": 7}), wrapped=wrapped)
    deleted = DeleteEvent(source_id="pg:documents:7", version=STREAMED + 91_000)
    assert decoder.decode(value, key(7, wrapped=wrapped)) == deleted
    # the key alone gives the source_id when the before image is empty, and wins over the before image
    value = record_value(change("d", lsn=91_000, before=None))
    assert decoder.decode(value, key(7, wrapped=wrapped)) == deleted
    value = record_value(change("d", lsn=91_000, before={"id": 8}))
    assert decoder.decode(value, key(7, wrapped=wrapped)) == deleted
    assert decoder.decode(None, key(7)) is None
    assert decoder.decode(b"null", key(7)) is None
    assert decoder.decode(b'{"schema": null, "payload": null}', key(7)) is None


def test_an_update_with_the_text_unavailable_is_an_acl_change(decoder):
    value = record_value(change("u", lsn=92_000, after=row(body=UNAVAILABLE, acl=["group:all"])))
    assert decoder.decode(value) == AclEvent(
        source_id="pg:documents:7", version=STREAMED + 92_000, acl=("group:all",)
    )


def test_a_full_before_image_that_differs_in_the_acl_alone_is_an_acl_change(decoder):
    value = record_value(change("u", lsn=93_000, before=row(), after=row(acl=["group:all"])))
    assert decoder.decode(value) == AclEvent(
        source_id="pg:documents:7", version=STREAMED + 93_000, acl=("group:all",)
    )
    value = record_value(change("u", lsn=94_000, before=row(), after=row(acl=["x"], body="Other text.")))
    assert isinstance(decoder.decode(value), UpsertEvent)


@pytest.mark.parametrize(
    ("envelope", "field", "words"),
    [
        (change("c", lsn=1, after=row(body=None)), "body", "is NULL"),
        (change("c", lsn=1, after=row(body=17)), "body", "not text"),
        (change("c", lsn=1, after=row(acl="group:eng")), "acl", "array of principals"),
        (change("c", lsn=1, after=row(acl=[1, 2])), "acl", "principal strings"),
        (change("c", lsn=1, after=row(acl='{"a": 1}')), "acl", "principal strings"),
        (change("c", lsn=1, after=row(acl=None)), "acl", "required"),
        (change("c", lsn=1, after=row(modified_at="yesterday")), "modified_at", "RFC 3339"),
        (change("c", lsn=1, after=row(content_type="application/pdf")), "content_type", "must be one of"),
        (change("c", lsn=1, after=row(space=None)), "space", "missing or NULL"),
        (change("c", lsn=1, after=row(id=None)), "id", "missing or NULL"),
        (
            change("c", lsn=1, after=row(), table="secrets"),
            "source.table",
            "no feed maps table 'public.secrets'",
        ),
        (change("t", lsn=1), "op", "truncate"),
        (change("c", lsn=-1, after=row()), "source.lsn", "log sequence number"),
        (change("u", lsn=1, after=row(body=UNAVAILABLE, acl=UNAVAILABLE)), "acl", "REPLICA IDENTITY FULL"),
        (change("d", lsn=1, before=None), "id", "missing or NULL"),
        ({"op": "c", "after": row()}, "source", "source"),
        ({"id": 7}, "op", "not a Debezium change event"),
    ],
)
def test_records_the_mapping_cannot_use_are_invalid_naming_the_column(decoder, envelope, field, words):
    with pytest.raises(InvalidEventError) as caught:
        decoder.decode(record_value(envelope))
    assert caught.value.field == field
    assert words in str(caught.value)


def test_text_beyond_the_bounds_and_bytes_that_are_not_json_are_invalid():
    mapping = FeedMapping(topic="t", source_id="{id}", text="body", acl="acl")
    small = FeedDecoder([mapping], EventLimits(bytes=2048))
    with pytest.raises(InvalidEventError, match="exceeds the limit of 2048 bytes"):
        small.decode(record_value(change("c", lsn=1, after=row(body="word " * 1000))))
    for raw in (b"\xff\xfe", b"{", b"[1, 2]", b'"text"'):
        with pytest.raises(InvalidEventError):
            FeedDecoder([mapping], DEFAULT_LIMITS).decode(raw)


def test_the_feeds_file_is_checked_when_it_is_read(tmp_path):
    path = tmp_path / "feeds.toml"
    for text, words in [
        ("[[feed]]\ntopic = 't'\ntext = 'b'\nacl = 'a'\n", "source_id"),
        ("[[feed]]\ntopic = 't'\nsource_id = '{id'\ntext = 'b'\nacl = 'a'\n", "unmatched '{'"),
        ("[[feed]]\ntopic = 't'\nsource_id = '{id}'\ntext = 'b'\nacl = 'a'\ncolour = 1\n", "colour"),
        ("[[feed]\n", "not TOML"),
        ("", r"declares no \[\[feed\]\]"),
        (FEEDS + FEEDS.replace('table = "public.documents"', ""), "each needs a 'table'"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigurationError, match=words):
            load_feeds(path)
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_feeds(tmp_path / "missing.toml")
    path.write_text(
        FEEDS + FEEDS.replace("public.documents", "public.pages").replace('"documents"', '"pages"')
    )
    feeds = load_feeds(path)
    assert feeds.topics == ("pg.public.documents", "pg.public.pages")
    assert feeds.named("pages").mappings[0].table == "public.pages"
    with pytest.raises(ConfigurationError, match="no feed is called 'nope'"):
        feeds.named("nope")


def test_a_streamed_change_outranks_the_snapshot_row_even_from_below_its_position(decoder):
    """A transaction open while the snapshot was taken wrote below the snapshot's position and committed after it."""
    snapshot = decoder.decode(record_value(change("r", lsn=5_000, after=row())))
    streamed = decoder.decode(
        record_value(change("u", lsn=4_000, after=row(body="Changed while it was read.")))
    )
    assert isinstance(snapshot, UpsertEvent) and isinstance(streamed, UpsertEvent)
    assert streamed.version > snapshot.version
    later = decoder.decode(record_value(change("u", lsn=4_100, after=row(body="And again."))))
    assert isinstance(later, UpsertEvent) and later.version > streamed.version
    # a later snapshot never overrides a streamed change
    again = decoder.decode(record_value(change("r", lsn=9_000, after=row())))
    assert isinstance(again, UpsertEvent) and again.version < streamed.version
    with pytest.raises(InvalidEventError, match="log sequence number"):
        decoder.decode(record_value(change("c", lsn=STREAMED, after=row())))


def test_debeziums_placeholder_is_never_taken_for_a_value(decoder):
    # a text array's placeholder is an array holding it
    value = record_value(change("u", lsn=1, after=row(body=UNAVAILABLE, acl=[UNAVAILABLE])))
    with pytest.raises(InvalidEventError, match="REPLICA IDENTITY FULL") as caught:
        decoder.decode(value)
    assert caught.value.field == "acl"
    value = record_value(change("u", lsn=1, after=row(body="A new text.", acl=[UNAVAILABLE])))
    with pytest.raises(InvalidEventError, match="REPLICA IDENTITY FULL"):
        decoder.decode(value)
    for column in ("title", "space", "authority", "modified_at"):
        value = record_value(change("u", lsn=1, after=row(body="A new text.", **{column: UNAVAILABLE})))
        with pytest.raises(InvalidEventError, match=r"REPLICA IDENTITY FULL|missing or NULL") as caught:
            decoder.decode(value)
        assert caught.value.field == column


def test_an_update_that_changed_nothing_is_an_upsert_and_deletes_and_acl_changes_are_checked_as_the_contracts(
    decoder,
):
    assert isinstance(
        decoder.decode(record_value(change("u", lsn=1, before=row(), after=row()))), UpsertEvent
    )
    mapping = FeedMapping(topic="t", source_id="{id}", text="body", acl="acl")
    for bad in ("a\x00b", "x" * 2000):
        with pytest.raises(InvalidEventError, match="source_id"):
            FeedDecoder([mapping]).decode(record_value(change("d", lsn=1, before={"id": bad})))
        with pytest.raises(InvalidEventError, match="source_id"):
            FeedDecoder([mapping]).decode(
                record_value(change("u", lsn=1, after=row(id=bad, body=UNAVAILABLE)))
            )


@pytest.mark.parametrize(
    ("unit", "value"), [("ms", 1_700_000_000_250), ("days", 19_675), ("ns", 1_700_000_000_250_000_000)]
)
def test_an_integer_time_column_is_read_in_its_unit(unit, value):
    mapping = FeedMapping(
        topic="t", source_id="{id}", text="body", acl="acl", modified_at="changed", modified_at_unit=unit
    )
    event = FeedDecoder([mapping]).decode(record_value(change("c", lsn=1, after=row(changed=value))))
    assert isinstance(event, UpsertEvent)
    assert event.attrs.modified_at == value * {"ms": 1000, "days": 86_400_000_000, "ns": 0.001}[unit]


def test_without_ts_us_the_source_time_in_milliseconds_is_used():
    mapping = FeedMapping(topic="t", source_id="{id}", text="body", acl="acl")
    envelope = change("c", lsn=1, after=row(), ts_ms=1_700_000_000_250)
    del envelope["source"]["ts_us"]
    event = FeedDecoder([mapping]).decode(record_value(envelope))
    assert isinstance(event, UpsertEvent) and event.attrs.modified_at == 1_700_000_000_250_000


@settings(max_examples=300, deadline=None)
@given(
    raw=st.one_of(
        st.binary(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
            ),
            max_leaves=20,
        ).map(msgspec.json.encode),
        st.builds(
            lambda op, lsn, after, before, table: msgspec.json.encode(
                {**change(op, lsn=lsn, after=after, before=before, table=table)}
            ),
            st.sampled_from(["r", "c", "u", "d", "t", "m", ""]),
            st.integers(min_value=-5, max_value=2**64),
            st.one_of(
                st.none(),
                st.dictionaries(
                    st.sampled_from(["id", "body", "acl", "space", "title"]),
                    st.one_of(
                        st.none(),
                        st.integers(),
                        st.text(max_size=5),
                        st.lists(st.text(max_size=3), max_size=3),
                        st.just(UNAVAILABLE),
                    ),
                    max_size=5,
                ),
            ),
            st.one_of(st.none(), st.just({"id": 1})),
            st.sampled_from(["documents", "other"]),
        ),
    ),
    raw_key=st.one_of(st.none(), st.binary(max_size=20), st.just(b'{"id": 3}')),
)
def test_any_record_maps_to_an_event_or_nothing_or_is_invalid(raw, raw_key):
    mapping = FeedMapping(
        topic="t", source_id="pg:{table}:{id}", text="body", acl="acl", table="public.documents"
    )
    try:
        event = FeedDecoder([mapping]).decode(raw, raw_key)
    except InvalidEventError:
        return
    assert event is None or isinstance(event, (UpsertEvent, DeleteEvent, AclEvent))


def test_run_reads_a_file_of_change_events_as_its_contract_events_would_be_read(tmp_path):
    """A row's whole life (snapshot, update, ACL change, delete, insert again), replays and hostile rows."""
    feeds = tmp_path / "feeds.toml"
    feeds.write_text(FEEDS)
    other = "Refunds are issued within 30 days of purchase, by the original payment method."
    changes = [
        record_value(change("r", lsn=100, after=row(1))),
        record_value(change("r", lsn=100, after=row(2, space="sales", acl=["group:sales"]))),
        record_value(change("r", lsn=100, after=row(3, body=other)), wrapped=True),
        record_value(change("u", lsn=150, after=row(1, body=UNAVAILABLE, acl=["*"]))),
        record_value(change("c", lsn=160, after=row(4, body=None))),  # hostile: NULL text
        record_value(
            change("u", lsn=170, after=row(2, body="Shipping takes five days.", acl=["group:sales"]))
        ),
        record_value(change("d", lsn=180, before={"id": 3})),
        b"null",
        record_value(change("r", lsn=100, after=row(3, body=other))),  # a replay: older than the delete
        record_value(
            change("r", lsn=300, after=row(3, body=other))
        ),  # a later snapshot: a streamed change won
        record_value(change("c", lsn=190, after=row(5), table="secrets")),  # hostile: unknown table
        record_value(change("c", lsn=200, after=row(3, body="Back again."))),
    ]
    cdc = tmp_path / "changes.jsonl"
    cdc.write_bytes(b"\n".join(c for c in changes if c is not None) + b"\n")
    contract = [
        UpsertEvent(**_contract(1, 100, row(1))),
        UpsertEvent(**_contract(2, 100, row(2, space="sales", acl=["group:sales"]))),
        UpsertEvent(**_contract(3, 100, row(3, body=other))),
        AclEvent(source_id="pg:documents:1", version=STREAMED + 150, acl=("*",)),
        UpsertEvent(
            **_contract(2, STREAMED + 170, row(2, body="Shipping takes five days.", acl=["group:sales"]))
        ),
        DeleteEvent(source_id="pg:documents:3", version=STREAMED + 180),
        UpsertEvent(**_contract(3, STREAMED + 200, row(3, body="Back again."))),
    ]
    expected = tmp_path / "contract.jsonl"
    expected.write_bytes(b"\n".join(encode_event(e) for e in contract) + b"\n")
    runner = CliRunner()
    one = runner.invoke(
        app,
        ["--set", f"feeds={feeds}", "run", str(cdc), "--feed", "documents", "--state", str(tmp_path / "a"),
         "--out", str(tmp_path / "a.jsonl")],
    )  # fmt: skip
    assert one.exit_code == 0, one.output
    two = runner.invoke(
        app, ["run", str(expected), "--state", str(tmp_path / "b"), "--out", str(tmp_path / "b.jsonl")]
    )
    assert two.exit_code == 0, two.output
    mapped, direct = (_view(tmp_path / f"{name}.jsonl") for name in "ab")
    assert mapped.compacted() == direct.compacted()
    assert mapped.reviews == direct.reviews
    assert set(mapped.mappings) == {"pg:documents:1", "pg:documents:2", "pg:documents:3"}
    assert direct.dead_letters == 0
    errors = sorted(line["error"] for line in _dlq_lines(tmp_path / "a.jsonl"))
    assert len(errors) == 2 == mapped.dead_letters
    assert errors[0].startswith("body: is NULL") and "no feed maps table 'public.secrets'" in errors[1]


def _view(path: Path) -> View:
    import json

    from streamdedup.core.messages import Output

    lines = map(json.loads, path.read_text().splitlines())
    return View().apply_all(Output(line["topic"], line["key"], line["value"]) for line in lines)


def _contract(row_id: int, version: int, columns: dict) -> dict:
    from streamdedup.contract.codec import parse_timestamp
    from streamdedup.core.model import SourceAttrs

    return {
        "source_id": f"pg:documents:{row_id}",
        "version": version,
        "text": columns["body"],
        "collection": columns["space"],
        "attrs": SourceAttrs(
            acl=tuple(sorted(columns["acl"])),
            modified_at=parse_timestamp(columns["modified_at"]),
            authority=columns["authority"],
            uri=f"https://wiki.example/{{pages}}/{row_id}",
            title=columns["title"],
            metadata={"space": columns["space"]},
        ),
    }


def _dlq_lines(path: Path) -> list[dict]:
    import json

    return [
        line["value"] for line in map(json.loads, path.read_text().splitlines()) if line["topic"] == "dlq"
    ]
