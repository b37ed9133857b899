from streamdedup.core.model import Rank, SourceAttrs, covered, format_timestamp, union_readers
from streamdedup.core.policy import CanonicalPolicy

DEFAULT = CanonicalPolicy(("authority", "modified_at", "length", "source_id"))


def rank(authority=0, modified_at=0, length=10, source_id="s", content_hash="h"):
    return Rank(authority, modified_at, length, source_id, content_hash)


def test_criteria_in_order():
    assert DEFAULT.better(rank(authority=1), rank(modified_at=9))
    assert DEFAULT.better(rank(modified_at=2), rank(modified_at=1, length=99))
    assert DEFAULT.better(rank(length=11), rank(length=10, source_id="a"))
    assert DEFAULT.better(rank(source_id="a"), rank(source_id="b"))
    assert DEFAULT.better(rank(content_hash="a"), rank(content_hash="b"))
    assert not DEFAULT.better(rank(), rank())


def test_reasons_name_the_deciding_criterion():
    assert DEFAULT.reason(rank(authority=1), rank()) == "higher authority"
    assert DEFAULT.reason(rank(modified_at=1), rank()) == "newer modified_at"
    assert DEFAULT.reason(rank(length=11), rank()) == "longer text"
    assert DEFAULT.reason(rank(source_id="a"), rank(source_id="b")) == "lower source_id"
    assert DEFAULT.reason(rank(content_hash="a"), rank(content_hash="b")) == "lower content hash"


def test_order_is_configurable():
    newest_first = CanonicalPolicy(("modified_at", "authority"))
    assert newest_first.better(rank(modified_at=2), rank(authority=5, modified_at=1))
    assert not DEFAULT.better(rank(modified_at=2), rank(authority=5, modified_at=1))


def test_best_ref_breaks_ties_by_source_then_position():
    attrs = SourceAttrs(acl=("*",), modified_at=1)
    assert DEFAULT.best_ref([("b", 0, attrs), ("a", 3, attrs), ("a", 1, attrs)])[:2] == ("a", 1)


def test_readers_union_and_cover():
    assert union_readers([("b",), ("a", "b")]) == ("a", "b")
    assert union_readers([("a",), ("*",)]) == ("*",)
    assert covered(("a",), ("a", "b"))
    assert covered(("*",), ("*",)) and covered(("a",), ("*",))
    assert not covered(("*",), ("a", "b"))
    assert not covered(("c",), ("a", "b"))
    assert covered((), ("a",))


def test_timestamps_render_in_utc():
    assert format_timestamp(0) == "1970-01-01T00:00:00Z"
    assert format_timestamp(1_500_000) == "1970-01-01T00:00:01.5Z"
