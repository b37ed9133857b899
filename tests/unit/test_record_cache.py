"""The state's record cache (``RecordCache``, ``native/src/cache.rs``) and the RocksDB store that reads through it."""

import tempfile
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.core._native import RecordCache
from streamdedup.store.rocksdb import RocksDBStore

NS = b"\x00\x00\x00\x07\x01\x00\x03"  # a store's number, a family's, a partition's prefix
SKIP = 5


class Fetch:
    """A multi-get over a dict of addresses, which records what it was asked for."""

    def __init__(self, values):
        self.values = values
        self.asked = []

    def __call__(self, addresses):
        self.asked.append(list(addresses))
        return [self.values.get(a) for a in addresses]


def _address(key):
    return NS[SKIP:] + key.encode()


def test_it_reads_what_it_lacks_in_chunks_and_keeps_what_it_found():
    fetch = Fetch({_address("a"): b"1", _address("c"): b"3"})
    cache = RecordCache(10_000)
    assert cache.get_many(NS, SKIP, ["a", "b", "c"], fetch, 2) == [b"1", None, b"3"]
    assert fetch.asked == [[_address("a"), _address("b")], [_address("c")]]
    fetch.asked.clear()
    assert cache.get_many(NS, SKIP, ["c", "b", "a"], fetch, 2) == [b"3", None, b"1"]
    assert fetch.asked == [[_address("b")]]  # an absent key is not kept
    assert cache.counts == (2, 4) and len(cache) == 2


def test_a_multi_get_that_answers_too_few_values_is_an_error():
    cache = RecordCache(10_000)
    with pytest.raises(ValueError, match="a multi-get of 2 keys answered 1 values"):
        cache.get_many(NS, SKIP, ["a", "b"], lambda addresses: [b"1"], 10)
    assert len(cache) == 0


def test_a_commit_replaces_removes_and_adds_values():
    fetch = Fetch({_address("a"): b"old", _address("b"): b"gone"})
    cache = RecordCache(10_000)
    cache.get_many(NS, SKIP, ["a", "b"], fetch, 10)
    cache.update(NS, {"a": b"new", "b": None, "c": b"added"})
    fetch.values = {}
    assert cache.get_many(NS, SKIP, ["a", "b", "c"], fetch, 10) == [b"new", None, b"added"]
    cache.update(NS, {b"c": None})  # a replay's keys are bytes
    assert cache.get_many(NS, SKIP, ["c"], fetch, 10) == [None]


def test_it_keeps_within_its_capacity_dropping_the_least_recently_used():
    cache = RecordCache(
        3 * (len(NS) + 1 + 10 + 128)
    )  # three entries of one-character keys and 10-byte values
    cache.update(NS, {k: k.encode() * 10 for k in "abc"})
    fetch = Fetch({})
    assert cache.get_many(NS, SKIP, ["a"], fetch, 10) == [b"a" * 10]  # a is now the most recent
    cache.update(NS, {"d": b"d" * 10})
    assert cache.used <= cache.capacity and len(cache) == 3
    assert cache.get_many(NS, SKIP, ["a", "c", "d"], fetch, 10) == [b"a" * 10, b"c" * 10, b"d" * 10]
    assert cache.get_many(NS, SKIP, ["b"], fetch, 10) == [None]
    assert fetch.asked == [[_address("b")]]


def test_a_value_larger_than_the_whole_cache_is_not_kept_nor_its_older_value():
    cache = RecordCache(1_000)
    cache.update(NS, {"k": b"small"})
    cache.update(NS, {"k": b"x" * 2_000})
    fetch = Fetch({_address("k"): b"x" * 2_000})
    assert cache.get_many(NS, SKIP, ["k"], fetch, 10) == [b"x" * 2_000]
    assert fetch.asked == [[_address("k")]] and len(cache) == 0


def test_a_read_keeps_nothing_it_fetched_while_a_commit_came_in():
    # Another thread's commit (a newer value of the same key) while the read had let go of the cache: what the read
    # fetched may be older than what the commit wrote, so it is returned but not kept.
    cache = RecordCache(10_000)

    def fetch(addresses):
        found = [b"old" for _ in addresses]
        cache.update(NS, {"k": b"new"})
        return found

    assert cache.get_many(NS, SKIP, ["k"], fetch, 10) == [b"old"]
    assert cache.get_many(NS, SKIP, ["k"], Fetch({}), 10) == [b"new"]


_writes = st.dictionaries(
    st.tuples(st.sampled_from(["content", "band"]), st.integers(0, 2), st.sampled_from("abcdefgh")),
    st.one_of(st.none(), st.binary(min_size=1, max_size=60)),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(
    commits=st.lists(st.tuples(_writes, st.booleans()), min_size=1, max_size=12),
    capacity=st.integers(0, 2_000),
)
def test_reads_through_a_small_cache_always_see_the_last_commit(commits, capacity):
    # A cache far smaller than the state, so that values come and go; some commits are a changelog's replay.
    model = {}
    with tempfile.TemporaryDirectory() as path:
        store = RocksDBStore(path, records=RecordCache(capacity))
        try:
            for writes, replay in commits:
                grouped = {}
                for (stage, partition, key), value in writes.items():
                    grouped.setdefault((stage, partition), {})[key] = value
                    if value is None:
                        model.pop((stage, partition, key), None)
                    else:
                        model[(stage, partition, key)] = value
                if replay:
                    for (stage, partition), group in grouped.items():
                        store.commit_raw(stage, partition, {k.encode(): v for k, v in group.items()}, {})
                else:
                    store.commit(grouped, {})
                for stage in ("content", "band"):
                    for partition in range(3):
                        keys = list("hgfedcba")
                        want = [model.get((stage, partition, k)) for k in keys]
                        assert store.get_many(stage, partition, keys) == want
                        assert (
                            store.get_many(stage, partition, keys) == want
                        )  # the second read from the cache
        finally:
            store.close()


def test_stores_sharing_a_cache_read_their_own_records(tmp_path):
    cache = RecordCache(1 << 20)
    first = RocksDBStore(tmp_path / "first", records=cache)
    second = RocksDBStore(tmp_path / "second", records=cache)
    first.commit({("content", 0): {"k": b"first"}}, {})
    second.commit({("content", 0): {"k": b"second"}}, {})
    assert first.get_many("content", 0, ["k"]) == [b"first"]
    assert second.get_many("content", 0, ["k"]) == [b"second"]
    first.close()
    reopened = RocksDBStore(
        tmp_path / "first", records=cache
    )  # a namespace of its own: it reads what it stored
    try:
        assert reopened.get_many("content", 0, ["k"]) == [b"first"]
    finally:
        reopened.close()
        second.close()


def test_a_commit_from_another_thread_during_a_read_is_not_undone(tmp_path):
    # The reader's multi-get waits, without the interpreter's lock, until another thread has committed a newer value
    # of the key it is reading: the next read must see the newer value.
    first = RocksDBStore(tmp_path / "s", records=None)
    first.commit({("content", 0): {"k": b"old"}}, {})
    first.close()
    cache = RecordCache(1 << 20)
    store = RocksDBStore(tmp_path / "s", records=cache)  # reopened with a cold cache
    family = store._families["content"]
    read, committed = threading.Event(), threading.Event()

    def slow_get(addresses):
        found = family.get(addresses)
        read.set()
        assert committed.wait(60)
        return found

    def writer():
        assert read.wait(60)
        store.commit({("content", 0): {"k": b"new"}}, {})
        committed.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        ns = store._cached["content"][1] + b"\0\0"
        assert cache.get_many(ns, SKIP, ["k"], slow_get, 10) == [b"old"]
        thread.join(60)
        assert store.get_many("content", 0, ["k"]) == [b"new"]
    finally:
        store.close()
