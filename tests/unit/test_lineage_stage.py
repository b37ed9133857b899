"""Lineages in the engine: the collection stage elects the newest live member under any order of delivery, and a
source takes only the newest status about the version it joined with."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.core.engine import Engine
from streamdedup.core.lineage import version_key
from streamdedup.core.messages import LineageMember, LineageStatus, RefUpdate
from streamdedup.core.model import DeleteEvent, SourceAttrs, UpsertEvent
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.lineages import elect, newest
from streamdedup.core.state import LineageMemberRecord, SourceRecord
from tests.helpers import DictState

SOURCES = ["s1", "s2", "s3", "s4"]


def _deliver(batches: list[list[LineageMember]], versions: dict[str, int]) -> dict[str, LineageStatus]:
    """Run the batches; return the status each source keeps at its last version: the highest numbered one about
    that version."""
    state = DictState()
    heard: dict[str, LineageStatus] = {}
    for batch in batches:
        for status in elect(batch, state):
            kept = heard.get(status.source_id)
            assert kept is None or status.seq > kept.seq  # a lineage's statuses are numbered in order
            if status.version == versions[status.source_id]:
                heard[status.source_id] = status
    return heard


def _member(source_id: str, version: int, order: tuple[object, ...] | None) -> LineageMember:
    return LineageMember("docs", "policy-{version}", source_id, version, order)


_histories = st.dictionaries(
    st.sampled_from(SOURCES),
    st.lists(
        st.one_of(st.none(), st.integers(0, 3).map(lambda n: version_key(str(n)))), min_size=1, max_size=4
    ),
    min_size=1,
)


@settings(max_examples=300)
@given(histories=_histories, data=st.data())
def test_the_newest_live_member_is_current_and_every_other_live_member_is_told_so(histories, data):
    events = [_member(s, v + 1, order) for s, orders in histories.items() for v, order in enumerate(orders)]
    shuffled = data.draw(st.permutations(events + data.draw(st.lists(st.sampled_from(events), max_size=4))))
    cuts = sorted(data.draw(st.sets(st.integers(0, len(shuffled)), max_size=4)))
    batches = [shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(shuffled)], strict=True)]
    heard = _deliver(batches, {s: len(orders) for s, orders in histories.items()})
    final = {s: LineageMemberRecord(len(orders), orders[-1]) for s, orders in histories.items()}
    first = newest(final)
    for source_id, member in final.items():
        if member.order is None:
            continue  # it left: whatever it heard before, its own source stage no longer listens
        assert heard[source_id].outdated_by == ("" if source_id == first else first)


def test_the_seeds_policy_versions_and_the_newest_deleted():
    names = {v: f"drive:policies/travel-policy-v{v}.pdf" for v in ("2", "2-final", "2-final-signed")}
    joins = [_member(name, 1, version_key(v)) for v, name in names.items()]
    state = DictState()
    told = {s.source_id: s.outdated_by for s in elect(joins, state)}
    signed, final = names["2-final-signed"], names["2-final"]
    assert told == {names["2"]: signed, final: signed, signed: ""}
    again = elect([_member(signed, 2, None)], state)  # the signed version is deleted
    assert {s.source_id: s.outdated_by for s in again} == {names["2"]: final, final: ""}
    assert elect([*joins, _member(signed, 2, None)], state) == []  # replays change nothing


RULES = '{"docs": ["guide/{name}/v{version}"], "archive": ["guide/{name}/v{version}"]}'
ENGINE = Engine(EngineParams(lineage_rules=RULES))
ATTRS = SourceAttrs(acl=("*",), modified_at=1)
TEXT = "Every request for travel goes through the portal, and every receipt is kept for ninety days after the trip."


def _upsert(source_id: str, version: int, collection: str = "docs") -> UpsertEvent:
    return UpsertEvent(source_id=source_id, version=version, attrs=ATTRS, text=TEXT, collection=collection)


def _record(state: DictState, source_id: str) -> SourceRecord:
    return msgspec.msgpack.decode(state.values[source_id], type=SourceRecord)


def test_a_source_joins_leaves_and_moves_between_lineages():
    state = DictState()
    out = ENGINE.handle("source", [_upsert("guide/a/v2", 1)], state)
    assert [m for m in out if isinstance(m, LineageMember)] == [
        LineageMember("docs", "guide/a/v{version}", "guide/a/v2", 1, version_key("2"))
    ]
    out = ENGINE.handle("source", [_upsert("guide/a/v2", 2, "archive")], state)  # moved: leaves, then joins
    assert [(m.collection, m.order is None) for m in out if isinstance(m, LineageMember)] == [
        ("docs", True),
        ("archive", False),
    ]
    out = ENGINE.handle("source", [DeleteEvent(source_id="guide/a/v2", version=3)], state)
    assert [m for m in out if isinstance(m, LineageMember)] == [
        LineageMember("archive", "guide/a/v{version}", "guide/a/v2", 3)
    ]
    out = ENGINE.handle("source", [_upsert("notes/n1", 1)], state)  # no rule names it: no lineage
    assert not [m for m in out if isinstance(m, LineageMember)]


def test_a_source_takes_only_the_newest_status_about_the_version_it_joined_with():
    state = DictState()
    ENGINE.handle("source", [_upsert("guide/a/v1", 4)], state)
    lineage = "guide/a/v{version}"

    def status(version: int, seq: int, outdated_by: str) -> LineageStatus:
        return LineageStatus("guide/a/v1", version, "docs", lineage, seq, outdated_by)

    out = ENGINE.handle("source", [status(4, 2, "guide/a/v2")], state)
    updates = [m for m in out if isinstance(m, RefUpdate)]
    assert len(updates) == 1 and updates[0].attrs_only and updates[0].attrs.outdated_by == "guide/a/v2"
    assert _record(state, "guide/a/v1").attrs.outdated_by == "guide/a/v2"
    # An older status (a late or redelivered one), one about an earlier version, one of another lineage: ignored.
    for stale in (
        status(4, 1, ""),
        status(3, 9, ""),
        LineageStatus("guide/a/v1", 4, "archive", lineage, 9, ""),
    ):
        assert ENGINE.handle("source", [stale], state) == []
        assert _record(state, "guide/a/v1").attrs.outdated_by == "guide/a/v2"
    out = ENGINE.handle("source", [status(4, 3, "")], state)  # the newer member was deleted: current again
    assert [m.attrs.outdated_by for m in out if isinstance(m, RefUpdate)] == [""]
    # A new version keeps the status it had until its lineage tells it (it always does).
    ENGINE.handle("source", [_upsert("guide/a/v1", 5)], state)
    assert _record(state, "guide/a/v1").lineage_version == 5
