"""One suite, run against every store: the memory store, the RocksDB store and a worker's partition stores."""

import contextlib

import pytest

from streamdedup.core._native import fill_write_batch
from streamdedup.core.params import EngineParams
from streamdedup.drivers.kafka.partitions import PartitionStores
from streamdedup.errors import StateError, StateMismatchError
from streamdedup.store.base import Transaction, check_params
from streamdedup.store.memory import MemoryStore
from streamdedup.store.rocksdb import RocksDBStore


def _commit(store, changes, meta):
    """Commit ``changes`` given as (stage, partition, key) -> value, grouped by partition as stores take them."""
    grouped = {}
    for (stage, partition, key), value in changes.items():
        grouped.setdefault((stage, partition), {})[key] = value
    store.commit(grouped, meta)


def _open(kind, path):
    if kind == "memory":
        return MemoryStore()
    if kind == "rocksdb":
        return RocksDBStore(path)
    return PartitionStores(path, EngineParams())


@pytest.fixture(params=["memory", "rocksdb", "kafka-partitions"])
def make_store(request, tmp_path):
    opened = []

    def make():
        store = _open(request.param, tmp_path / "state")
        opened.append(store)
        return store

    make.kind = request.param
    yield make
    for store in opened:
        with contextlib.suppress(Exception):
            store.close()


def test_get_returns_what_commit_wrote(make_store):
    store = make_store()
    assert store.get("content", 0, "k") is None
    _commit(store, {("content", 0, "k"): b"v", ("source", 3, "k"): b"w"}, {"m": b"1"})
    assert store.get("content", 0, "k") == b"v"
    assert store.get("source", 3, "k") == b"w"
    assert store.get("source", 0, "k") is None  # partitions are separate
    assert store.get("band", 3, "k") is None  # so are stages
    assert store.get_meta("m") == b"1"


def test_get_many_reads_several_keys_in_order(make_store):
    store = make_store()
    _commit(store, {("content", 1, "a"): b"1", ("content", 1, "c"): b"3"}, {})
    assert store.get_many("content", 1, ["c", "b", "a"]) == [b"3", None, b"1"]
    txn = Transaction(store)
    view = txn.partition("content", 1)
    view.put("b", b"2")
    view.delete("c")
    assert view.get_many(["a", "b", "c"]) == [b"1", b"2", None]


def test_get_many_of_more_keys_than_one_multi_get_keeps_their_order(make_store):
    # RocksDB reads a long list in pieces (a very long multi-get is slower per key); the answer is one list.
    store = make_store()
    _commit(store, {("band", 0, f"k{i:05d}"): str(i).encode() for i in range(0, 5000, 3)}, {})
    keys = [f"k{i:05d}" for i in range(4999, -1, -1)]
    assert store.get_many("band", 0, keys) == [
        str(i).encode() if i % 3 == 0 else None for i in range(4999, -1, -1)
    ]


def test_scan_returns_a_prefix_in_key_order_with_the_transactions_changes(make_store):
    store = make_store()
    _commit(
        store,
        {
            ("content", 1, "r\x00h\x00b"): b"2",
            ("content", 1, "r\x00h\x00a"): b"1",
            ("content", 1, "r\x00h\x00d"): b"4",
            ("content", 1, "r\x00i\x00a"): b"other content",
            ("content", 2, "r\x00h\x00c"): b"other partition",
            ("content", 1, "h"): b"the record",
        },
        {},
    )
    assert store.scan("content", 1, "r\x00h\x00") == [
        ("r\x00h\x00a", b"1"),
        ("r\x00h\x00b", b"2"),
        ("r\x00h\x00d", b"4"),
    ]
    assert store.scan("content", 1, "r\x00x") == []
    view = Transaction(store).partition("content", 1)
    view.put("r\x00h\x00c", b"3")
    view.delete("r\x00h\x00a")
    view.put("r\x00h\x00d", b"5")
    assert view.scan("r\x00h\x00") == [("r\x00h\x00b", b"2"), ("r\x00h\x00c", b"3"), ("r\x00h\x00d", b"5")]


def test_delete_and_overwrite(make_store):
    store = make_store()
    _commit(store, {("band", 1, "k"): b"a"}, {})
    _commit(store, {("band", 1, "k"): b"b"}, {})
    assert store.get("band", 1, "k") == b"b"
    _commit(store, {("band", 1, "k"): None, ("band", 1, "never"): None}, {})
    assert store.get("band", 1, "k") is None


def test_keys_are_arbitrary_unicode_and_values_arbitrary_bytes(make_store):
    store = make_store()
    key, value = "drive:ü/π/📄 name", bytes(range(256))
    _commit(store, {("source", 65535, key): value}, {})
    assert store.get("source", 65535, key) == value
    assert (65535, key) in store.keys("source")


def test_transaction_reads_its_own_writes_and_commits_atomically(make_store):
    store = make_store()
    txn = Transaction(store)
    view = txn.partition("content", 2)
    view.put("a", b"1")
    assert view.get("a") == b"1" and store.get("content", 2, "a") is None
    view.delete("a")
    assert view.get("a") is None
    view.put("b", b"2")
    txn.meta["offset"] = b"10"
    txn.commit()
    assert store.get("content", 2, "b") == b"2" and store.get_meta("offset") == b"10"
    assert store.get("content", 2, "a") is None


def test_params_are_recorded_and_mismatches_refused(make_store):
    store = make_store()
    check_params(store, EngineParams(), where="here")
    check_params(store, EngineParams(), where="here")
    with pytest.raises(StateMismatchError, match=r"threshold=0.8 \(settings say 0.7\)"):
        check_params(store, EngineParams(threshold=0.7), where="here")


@pytest.mark.parametrize("kind", ["rocksdb", "kafka-partitions"])
def test_restart_on_the_same_directory_keeps_state(tmp_path, kind):
    store = _open(kind, tmp_path / "state")
    _commit(store, {("content", 0, "k"): b"v"}, {"m": b"x"})
    check_params(store, EngineParams(), where="dir")
    store.close()
    reopened = _open(kind, tmp_path / "state")
    assert reopened.get("content", 0, "k") == b"v" and reopened.get_meta("m") == b"x"
    with pytest.raises(StateMismatchError):
        check_params(reopened, EngineParams(shingle_size=3), where="dir")
    reopened.close()


@pytest.mark.parametrize("kind", ["rocksdb", "kafka-partitions"])
def test_a_locked_directory_is_a_clear_error(tmp_path, kind):
    store = _open(kind, tmp_path / "state")
    _commit(store, {("content", 0, "k"): b"v"}, {"m": b"x"})
    with pytest.raises(StateError, match="cannot open the state"):
        other = _open(kind, tmp_path / "state")
        _commit(other, {("content", 0, "k"): b"v"}, {"m": b"x"})
    store.close()


def test_closed_store_refuses_use(make_store):
    store = make_store()
    store.close()
    with pytest.raises(StateError, match="closed"):
        store.get("content", 0, "k")
    with pytest.raises(StateError, match="closed"):
        _commit(store, {("content", 0, "k"): b"v"}, {})


def test_write_ahead_logs_stay_bounded_while_the_state_is_rewritten(tmp_path, monkeypatch):
    # Metadata takes a few bytes on every commit; its memtable alone must not keep every old log file alive.
    monkeypatch.setattr("streamdedup.store.rocksdb._MAX_WAL_BYTES", 1024 * 1024)
    monkeypatch.setattr("streamdedup.store.rocksdb._WRITE_BUFFER_BYTES", 1024 * 1024)
    store = RocksDBStore(tmp_path / "state")
    value = bytes(range(256)) * 64  # 16 KiB
    for i in range(1280):  # 20 MiB written over the same 64 keys
        _commit(store, {("content", 0, f"k{i % 64}"): value}, {"position": str(i).encode()})
    logs = sum(_size(f) for f in (tmp_path / "state" / "db").glob("*.log"))
    assert store.get("content", 0, "k63") == value and store.get_meta("position") == b"1279"
    store.close()
    assert logs < 6 * 1024 * 1024, (
        f"{logs:,} bytes of write-ahead log after 20 MiB of writes to 1 MiB of state"
    )


def _size(path):
    """Return a file's size, 0 if RocksDB removed it after it was listed (a background flush can)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def test_a_commits_write_batch_holds_each_change_once_in_key_order():
    calls = []
    writes = {"zz": b"1", "a\u00fc": None, "b": b"2", "\U0001f4c4": b"3", "a": b"4"}
    fill_write_batch(
        lambda key, value, family: calls.append(("put", key, value, family)),
        lambda key, family: calls.append(("delete", key, None, family)),
        "family",
        b"\x00\x07",
        writes,
    )
    expected = [
        ("delete" if v is None else "put", b"\x00\x07" + k.encode(), v, "family") for k, v in writes.items()
    ]
    assert calls == sorted(expected, key=lambda call: call[1])
