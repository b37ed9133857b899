"""The band stage's changelog on a worker: member records only, and the buckets rebuilt from them on recovery."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition
from msgspec import msgpack

from streamdedup.core.messages import BandJoin, BandLeave, Message
from streamdedup.drivers.kafka.batches import encode_batches
from streamdedup.drivers.kafka.changelog import OPEN_KEY, headers
from streamdedup.drivers.kafka.partitions import PartitionStore, recover
from streamdedup.drivers.kafka.worker import StageWorker
from streamdedup.errors import StateError
from tests.unit.test_kafka_worker import (
    SETTINGS,
    Killed,
    Logs,
    Record,
    RestoreConsumer,
    killed_at,
    make_worker,
)

BAND_TP = TopicPartition("t.stage-band", 1)
BAND_LOG = TopicPartition("t.worker-state-band-changelog", 1)
HASHES = [f"{i:02x}" * 32 for i in range(8)]


def _keys(i: int) -> tuple[str, ...]:
    """Three bands; contents 0-3 and 4-7 share band 0's bucket, even and odd ones band 1's."""
    return (f"000{i // 4:016x}", f"001{i % 2:016x}", f"002{i:016x}")


def _record(offset: int, messages: list[Message]) -> Record:
    (value,) = encode_batches(messages, max_bytes=1 << 20)
    return Record(offset, None, value)


def _round(worker: StageWorker, found: list[Record]) -> None:
    async def round_and_checkpoint() -> None:
        await worker._round({BAND_TP: found})
        await worker._checkpoints(every=True)

    asyncio.run(round_and_checkpoint())


def _state(worker: StageWorker) -> dict[str, bytes]:
    store = worker.stores.partitions[("band", 1)].store
    return {k: v for _, k in store.keys("band") if (v := store.get("band", 1, k)) is not None}


def _assigned(worker: StageWorker) -> StageWorker:
    asyncio.run(worker.assign([BAND_TP]))
    return worker


_ROUNDS = [
    [_record(0, [BandJoin(h, 1, _keys(i)) for i, h in enumerate(HASHES[:5])])],
    [_record(1, [BandLeave(HASHES[1], 1, _keys(1)), BandJoin(HASHES[2], 2, _keys(2))])],
    [_record(2, [BandJoin(h, 1, _keys(i + 5)) for i, h in enumerate(HASHES[5:])])],
]


def test_the_band_changelog_carries_one_member_record_per_content_and_rebuilds_the_buckets(tmp_path):
    logs = Logs()
    worker = _assigned(make_worker(tmp_path, logs))
    for found in _ROUNDS:
        _round(worker, found)
    kept = _state(worker)
    written = [r for r in logs.records[BAND_LOG] if r.key != OPEN_KEY]
    assert written and all(r.key.startswith(b"m:") for r in written)
    buckets = [k for k in kept if not k.startswith("m:")]
    assert len(buckets) == 2 + 2 + 7  # band 0's two buckets, band 1's two, band 2's one per live content
    assert len(written) == 5 + 2 + 3  # one record per content a call changed, not one per bucket
    worker.stores.partitions.pop(("band", 1)).close()
    for where in ("elsewhere", "and-again"):  # from an empty store, twice: the log is replayed whole
        rebuilt = _assigned(make_worker(tmp_path / where, logs))
        assert _state(rebuilt) == kept
        rebuilt.stores.partitions.pop(("band", 1)).close()


@pytest.mark.parametrize("crash", ["changelog-sent", "state-committed"])
def test_a_local_store_behind_its_band_changelog_catches_up_to_the_same_buckets(tmp_path, crash, monkeypatch):
    uninterrupted = _assigned(make_worker(tmp_path / "whole", Logs()))
    for found in _ROUNDS:
        _round(uninterrupted, found)
    expected = _state(uninterrupted)

    logs = Logs()
    worker = _assigned(make_worker(tmp_path, logs))
    _round(worker, _ROUNDS[0])
    killed_at(worker, crash, monkeypatch)
    with pytest.raises(Killed):
        _round(worker, _ROUNDS[1])
    worker.stores.partitions.pop(("band", 1)).close()
    monkeypatch.undo()
    again = _assigned(make_worker(tmp_path, logs))  # the local store, then the log's records past it
    for found in _ROUNDS[1:]:
        _round(again, found)
    assert _state(again) == expected


def test_a_band_changelog_of_bucket_records_is_refused_with_what_to_do(tmp_path):
    logs = Logs()
    logs.of(BAND_LOG.topic, 1).append(Record(0, b"000abc", b"\x00" * 12, headers("c0", 1, 5)))
    store = PartitionStore(tmp_path, "band", 1, SETTINGS.engine_params())
    with pytest.raises(StateError, match="new generation"):
        asyncio.run(recover(RestoreConsumer(logs), {BAND_LOG: store}))  # type: ignore[arg-type]


def test_a_band_store_written_before_member_records_is_refused_when_opened(tmp_path):
    store = PartitionStore(tmp_path, "band", 1, SETTINGS.engine_params())
    store.store.commit_raw("band", 1, {b"000abc": b"\x00" * 12}, {"changelog-offset": b"7"})
    store.store.commit_raw(
        "band", 1, {}, {"band-changelog": b""}
    )  # not the marker, as an earlier version left it
    store.close()
    with pytest.raises(StateError, match="new generation"):
        PartitionStore(tmp_path, "band", 1, SETTINGS.engine_params())
    fresh = PartitionStore(tmp_path / "fresh", "band", 1, SETTINGS.engine_params())
    fresh.close()
    again = PartitionStore(tmp_path / "fresh", "band", 1, SETTINGS.engine_params())  # a new store is marked
    again.close()


def test_a_band_call_cut_short_at_the_log_s_end_is_left_out_and_repaired(tmp_path):
    logs = Logs()
    worker = _assigned(make_worker(tmp_path, logs))
    _round(worker, _ROUNDS[0])
    kept = _state(worker)
    worker.stores.partitions.pop(("band", 1)).close()
    log = logs.of(BAND_LOG.topic, 1)
    end = log[-1].offset
    cut = [
        (b"m:" + HASHES[0][:16].encode(), None),
        (b"m:" + HASHES[7][:16].encode(), msgpack.encode([["002x", 9]])),
    ]
    log.extend(Record(end + 1 + n, key, value) for n, (key, value) in enumerate(cut))  # no closing record
    for where in ("fresh", "again"):  # rebuilt from the log, then once more after the repair call
        rebuilt = _assigned(make_worker(tmp_path / where, logs))
        assert _state(rebuilt) == kept
        rebuilt.stores.partitions.pop(("band", 1)).close()
    repair = [r for r in logs.records[BAND_LOG] if r.offset > end + len(cut)]
    assert {r.key for r in repair} == {key for key, _ in cut} and repair[-1].headers  # one closed repair call
