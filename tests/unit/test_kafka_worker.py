"""The stage worker's calls, changelog and recovery, against an in-process stand-in for Kafka's logs."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaTimeoutError

from streamdedup.core.messages import BandJoin, Output
from streamdedup.drivers.kafka.batches import decode_batch, encode_batches
from streamdedup.drivers.kafka.changelog import OPEN_KEY, Replay, headers, opening, read_headers
from streamdedup.drivers.kafka.metrics import Metrics
from streamdedup.drivers.kafka.partitions import PartitionStore, recover
from streamdedup.drivers.kafka.worker import StageWorker
from streamdedup.errors import StateError
from streamdedup.settings import Settings


@dataclass
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    timestamp: int = 0


class Logs:
    """Topic partitions as lists of records, with a log start offset (records below it were deleted)."""

    def __init__(self) -> None:
        self.records: dict[TopicPartition, list[Record]] = {}
        self.start: dict[TopicPartition, int] = {}
        self.sends = 0
        self.fail_sends = False
        self.order: list[str] = []  # the topic of each batch sent, in order

    def of(self, topic: str, partition: int) -> list[Record]:
        return self.records.setdefault(TopicPartition(topic, partition), [])

    def end(self, tp: TopicPartition) -> int:
        records = self.records.get(tp, [])
        return records[-1].offset + 1 if records else self.start.get(tp, 0)


class Builder:
    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []

    def append(
        self, *, timestamp: Any, key: bytes | None, value: bytes | None, headers: Any
    ) -> object | None:
        assert isinstance(headers, list)  # what aiokafka's compiled record builder accepts
        if len(self.records) >= 3:  # small batches, so that a call takes several
            return None
        self.records.append((key, value, list(headers)))
        return object()


class Producer:
    def __init__(self, logs: Logs) -> None:
        self.logs = logs

    def create_batch(self) -> Builder:
        return Builder()

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1, 2, 3}

    async def send_batch(self, batch: Builder, topic: str, *, partition: int) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.logs.fail_sends:
            future.set_exception(KafkaTimeoutError())
            return future
        self.logs.sends += 1
        self.logs.order.append(topic)
        tp = TopicPartition(topic, partition)
        log = self.logs.of(topic, partition)
        base = self.logs.end(tp)
        for i, (key, value, hdrs) in enumerate(batch.records):
            log.append(Record(base + i, key, value, hdrs))
        future.set_result(SimpleNamespace(offset=base))
        return future


class RestoreConsumer:
    """Reads the logs the way the recovery consumer does (assign, seek, getmany, position)."""

    def __init__(self, logs: Logs) -> None:
        self.logs = logs
        self.positions: dict[TopicPartition, int] = {}

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.positions = {tp: 0 for tp in partitions}

    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.logs.start.get(tp, 0) for tp in partitions}

    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.logs.end(tp) for tp in partitions}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int, max_records: int) -> dict[Any, Any]:
        out = {}
        for tp in partitions:
            found = [r for r in self.logs.records.get(tp, []) if r.offset >= self.positions[tp]][:2]
            if found:
                out[tp] = found
                self.positions[tp] = found[-1].offset + 1
        return out

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    def unsubscribe(self) -> None:
        self.positions = {}


SETTINGS = Settings(topic_prefix="t.", partitions=4)
CHANGELOG = TopicPartition("t.worker-state-content-changelog", 1)
STAGE_TP = TopicPartition("t.stage-content", 1)


def make_worker(tmp_path: Path, logs: Logs, handle: Any = None) -> StageWorker:
    from streamdedup.drivers.kafka.delivery import TopicPartitions

    worker = StageWorker(SETTINGS.model_copy(update={"data_dir": tmp_path}), Metrics())
    producer = Producer(logs)
    worker._producer = producer  # type: ignore[assignment]
    worker._restore = RestoreConsumer(logs)  # type: ignore[assignment]
    worker._partitions = TopicPartitions(producer)  # type: ignore[arg-type]
    asyncio.run(worker._partitions.load([worker.names.output(t) for t in ("audit", "dlq")]))
    if handle is not None:
        worker.engine.handle = handle  # type: ignore[method-assign]
    return worker


def band_handler(fail_on: int = -1) -> Any:
    """Write each message's band key with its epoch; audit it; raise on epoch ``fail_on``."""

    def handle(stage: str, messages: list[BandJoin], state: Any) -> list[Any]:
        if any(m.epoch == fail_on for m in messages):
            raise ValueError(f"cannot handle epoch {fail_on}")
        for m in messages:
            state.put(m.band_keys[0], str(m.epoch).encode())
        return [Output("audit", m.band_keys[0], {"action": "split", "epoch": m.epoch}) for m in messages]

    return handle


def records(offset: int, *epochs: int) -> Record:
    (value,) = encode_batches([BandJoin("h", e, (f"b{e}",)) for e in epochs], max_bytes=1 << 20)
    return Record(offset, None, value)


def call(worker: StageWorker, found: list[Record]) -> None:
    """Apply ``found`` as a round of the worker, then commit its checkpoints."""

    async def round_and_checkpoint() -> None:
        await worker._round({STAGE_TP: found})
        await worker._checkpoints(every=True)

    asyncio.run(round_and_checkpoint())


def open_store(worker: StageWorker) -> PartitionStore:
    asyncio.run(worker.assign([STAGE_TP]))
    return worker.stores.partitions[("content", 1)]


def state_of(store: PartitionStore) -> dict[str, bytes]:
    return {
        k: v for _, k in store.store.keys("content") if (v := store.store.get("content", 1, k)) is not None
    }


def test_a_call_sends_outputs_then_one_changelog_call_and_commits_its_offsets(tmp_path):
    logs = Logs()
    worker = make_worker(tmp_path, logs, band_handler())
    store = open_store(worker)
    call(worker, [records(10, 1, 2), records(11, 3, 4)])
    opener, *changelog = logs.records[CHANGELOG]
    assert (opener.key, opener.value) == (OPEN_KEY, b"-1 11")  # the call applies the input after -1 up to 11
    assert [(r.key, r.value) for r in changelog] == [
        (b"b1", b"1"),
        (b"b2", b"2"),
        (b"b3", b"3"),
        (b"b4", b"4"),
    ]
    closers = [read_headers(r.headers) for r in changelog]
    assert closers[:3] == [None, None, None]  # only the last record of a call carries its headers
    assert closers[3] is not None and closers[3][1:] == (4, 11)  # one call of 4 records, applied up to 11
    audits = [r for tp, rs in logs.records.items() if tp.topic == "t.audit" for r in rs]
    assert sorted(r.key for r in audits) == [b"b1", b"b2", b"b3", b"b4"]
    audit_sends = len({tp for tp in logs.records if tp.topic == "t.audit"})
    assert logs.sends == 1 + audit_sends + 2  # the opening, the audits, 4 changelog records in batches of 3
    # The opening is in the log before anything the call delivers, and the call's changelog after it all.
    assert logs.order == [CHANGELOG.topic] + ["t.audit"] * audit_sends + [CHANGELOG.topic] * 2
    assert (store.applied, store.changelog) == (11, 4)
    assert state_of(store) == {"b1": b"1", "b2": b"2", "b3": b"3", "b4": b"4"}


def test_messages_at_or_below_the_applied_offset_are_dropped(tmp_path):
    logs = Logs()
    seen = []

    def handle(stage: str, messages: list[BandJoin], state: Any) -> list[Any]:
        seen.extend(m.epoch for m in messages)
        return []

    worker = make_worker(tmp_path, logs, handle)
    open_store(worker)
    call(worker, [records(10, 1), records(11, 2)])
    call(worker, [records(11, 2), records(12, 3)])  # 11 read again
    assert seen == [1, 2, 3]
    assert [r.key for r in logs.records[CHANGELOG]] == [OPEN_KEY, OPEN_KEY]  # keys only read are not written
    # Read again after a restart, with nothing new: what the state holds is done, for the consumer to commit.
    worker._done.clear()
    call(worker, [records(11, 2), records(12, 3)])
    assert seen == [1, 2, 3] and worker._done[STAGE_TP] == 13


def test_a_handler_failure_dead_letters_one_message_and_applies_the_rest(tmp_path):
    logs = Logs()
    worker = make_worker(tmp_path, logs, band_handler(fail_on=3))
    store = open_store(worker)
    call(worker, [records(10, 1, 2), records(11, 3, 4), records(12, 5)])
    assert state_of(store) == {"b1": b"1", "b2": b"2", "b4": b"4", "b5": b"5"}
    ((letter,),) = [rs for tp, rs in logs.records.items() if tp.topic == "t.dlq"]
    hdrs = dict(letter.headers)
    assert hdrs["origin-offset"] == b"11" and b"ValueError: cannot handle epoch 3" in hdrs["error"]
    assert decode_batch(letter.value) == [BandJoin("h", 3, ("b3",))]
    # One opening for the call, however many of its messages delivered one at a time.
    assert sorted(r.key for r in logs.records[CHANGELOG]) == [OPEN_KEY, b"b1", b"b2", b"b4", b"b5"]
    assert store.applied == 12


def test_a_kafka_failure_is_not_blamed_on_the_input_and_leaves_the_store_alone(tmp_path):
    logs = Logs()
    worker = make_worker(tmp_path, logs, band_handler())
    store = open_store(worker)
    logs.fail_sends = True
    with pytest.raises(KafkaTimeoutError):
        call(worker, [records(10, 1, 2)])
    assert state_of(store) == {} and store.applied == -1
    assert not any(tp.topic == "t.dlq" for tp in logs.records)


def test_a_failing_store_is_not_blamed_on_the_input(tmp_path):
    logs = Logs()

    def handle(stage: str, messages: list[BandJoin], state: Any) -> list[Any]:
        raise StateError("disk gone")

    worker = make_worker(tmp_path, logs, handle)
    open_store(worker)
    with pytest.raises(StateError, match="disk gone"):
        call(worker, [records(10, 1)])
    assert {tp: [r.key for r in rs] for tp, rs in logs.records.items()} == {CHANGELOG: [OPEN_KEY]}


@pytest.mark.parametrize("crash", ["changelog-sent", "state-committed"])
def test_a_crash_after_the_changelog_is_repaired_by_recovery(tmp_path, crash, monkeypatch):
    logs = Logs()
    worker = make_worker(tmp_path, logs, band_handler())
    store = open_store(worker)
    call(worker, [records(10, 1, 2)])

    class Killed(BaseException):
        pass

    def passed(point: str) -> None:
        if point == crash:
            raise Killed

    monkeypatch.setattr(worker.faults, "passed", passed)
    with pytest.raises(Killed):
        call(worker, [records(11, 3), records(12, 1)])
    worker.stores.partitions.pop(("content", 1)).close()

    again = make_worker(tmp_path, logs, band_handler())
    store = open_store(again)
    assert (store.applied, state_of(store)) == (12, {"b1": b"1", "b2": b"2", "b3": b"3"})
    rebuilt = make_worker(tmp_path / "elsewhere", logs, band_handler())
    assert state_of(open_store(rebuilt)) == state_of(store)  # a new worker rebuilds the same from the log


class Killed(BaseException):
    pass


def killed_at(worker: StageWorker, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def passed(at: str) -> None:
        if at == point:
            raise Killed

    monkeypatch.setattr(worker.faults, "passed", passed)


def epochs_handled(worker: StageWorker) -> list[list[int]]:
    """Make the worker's handler record the epochs of each call; return that record."""
    calls: list[list[int]] = []
    handle = band_handler()

    def recording(stage: str, messages: list[BandJoin], state: Any) -> list[Any]:
        calls.append([m.epoch for m in messages])
        return handle(stage, messages, state)

    worker.engine.handle = recording  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize("elsewhere", [False, True], ids=["same-store", "rebuilt"])
def test_calls_cut_after_they_delivered_are_applied_again_one_record_per_call(
    tmp_path, monkeypatch, elsewhere
):
    logs = Logs()
    worker = make_worker(tmp_path, logs, band_handler())
    store = open_store(worker)
    call(worker, [records(10, 1)])
    killed_at(worker, "outputs-sent", monkeypatch)
    with pytest.raises(Killed):
        call(worker, [records(11, 2), records(12, 3)])
    worker.stores.partitions.pop(("content", 1)).close()
    assert logs.records[CHANGELOG][-1].key == OPEN_KEY  # it opened and delivered, then died

    again = make_worker(tmp_path / "elsewhere" if elsewhere else tmp_path, logs)
    calls = epochs_handled(again)
    store = open_store(again)
    assert (store.applied, store.cut) == (10, 12)
    # Part of the cut calls' input: each record is a call of its own, committed at once.
    asyncio.run(again._round({STAGE_TP: [records(10, 1), records(11, 2)]}))
    assert calls == [[2]] and (store.applied, again._done[STAGE_TP]) == (11, 12)
    # The rest of it, and newer input: the cut input first, a record per call, then the newer input.
    call(again, [records(12, 3), records(13, 4)])
    assert calls == [[2], [3], [4]]
    assert (store.applied, store.cut, again._done[STAGE_TP]) == (13, -1, 14)
    assert state_of(store) == {"b1": b"1", "b2": b"2", "b3": b"3", "b4": b"4"}
    # A round opens its calls once per partition, past what earlier openings named.
    openings = [r.value for r in logs.records[CHANGELOG] if r.key == OPEN_KEY]
    assert openings == [b"-1 10", b"10 12", b"11 13"]  # sent before the round applied 12 again


def test_a_checkpoint_sends_the_last_value_of_each_key_its_calls_wrote_as_one_changelog_call(tmp_path):
    logs = Logs()
    worker = make_worker(tmp_path, logs, band_handler())
    store = open_store(worker)

    async def rounds() -> None:
        await worker._round({STAGE_TP: [records(10, 1, 2)]})
        await worker._round({STAGE_TP: [records(11, 3)]})
        assert store.applied == -1 and store.pending is not None  # nothing committed before the checkpoint
        assert [r.key for r in logs.records[CHANGELOG]] == [OPEN_KEY, OPEN_KEY]
        await worker._round({STAGE_TP: [records(12, 1)]})  # b1 again, with epoch 1
        await worker._checkpoints(every=True)

    asyncio.run(rounds())
    changelog = [r for r in logs.records[CHANGELOG] if r.key != OPEN_KEY]
    assert [(r.key, r.value) for r in changelog] == [(b"b1", b"1"), (b"b2", b"2"), (b"b3", b"3")]
    assert [read_headers(r.headers) is not None for r in changelog] == [False, False, True]
    assert (store.applied, store.pending, worker._done[STAGE_TP]) == (12, None, 13)


def test_replay_reports_the_last_call_opened():
    replay = Replay()
    replay.feed(0, *opening(-1, 10))
    replay.feed(1, b"a", b"1", headers("c1", 1, 10))
    replay.feed(2, *opening(10, 14))
    assert replay.opened == 14 and [c.writes for c in replay.take()] == [{b"a": b"1"}]
    assert replay.trailing_keys() == []  # an opening is not a write


def test_a_call_cut_short_at_the_end_of_the_log_is_left_out_and_repaired(tmp_path):
    logs = Logs()
    worker = make_worker(tmp_path, logs, band_handler())
    store = open_store(worker)
    call(worker, [records(10, 1, 2)])
    # A crash in the middle of sending a call: one of its three records reached the log.
    logs.of(CHANGELOG.topic, 1).append(Record(2, b"b1", b"changed"))
    worker.stores.partitions.pop(("content", 1)).close()

    fresh = make_worker(tmp_path / "new", logs, band_handler())
    store = open_store(fresh)
    assert state_of(store) == {"b1": b"1", "b2": b"2"} and store.applied == 10
    repair = logs.records[CHANGELOG][-1]
    assert (repair.key, repair.value) == (b"b1", b"1")  # the repair call restores the key the cut call wrote
    later = make_worker(tmp_path / "later", logs, band_handler())
    assert state_of(open_store(later)) == {"b1": b"1", "b2": b"2"}  # so a full replay agrees


def test_recovery_rebuilds_when_the_store_and_the_log_disagree(tmp_path):
    logs = Logs()
    worker = make_worker(tmp_path, logs, band_handler())
    store = open_store(worker)
    call(worker, [records(10, 1, 2)])
    worker.stores.partitions.pop(("content", 1)).close()
    logs.records[CHANGELOG] = []  # the topic was deleted and created again: the log is behind the store
    logs.start[CHANGELOG] = 0
    store = open_store(make_worker(tmp_path, logs, band_handler()))
    assert state_of(store) == {} and store.changelog == -1


def test_replay_applies_compacted_and_repaired_groups_and_holds_back_a_cut_one():
    replay = Replay()
    replay.feed(5, b"a", b"1", headers("c1", 3, 7))  # two records of c1 were compacted away
    replay.feed(9, b"b", b"cut", [])  # a call a crash cut short ...
    replay.feed(12, b"b", b"2", headers("repair", 1, 7))  # ... and the repair its next owner wrote
    replay.feed(13, b"c", b"3", [])  # at the end of the log, no closing record yet
    calls = replay.take()
    assert [(c.applied, c.last_offset, c.writes) for c in calls] == [
        (7, 5, {b"a": b"1"}),
        (7, 12, {b"b": b"2"}),
    ]
    assert replay.trailing_keys() == ["c"] and (replay.calls, replay.short) == (2, 1)


def test_feeding_records_in_bulk_equals_feeding_them_one_by_one():
    records = [Record(0, b"a", b"1"), Record(1, None, b"x"), Record(2, b"b", None, headers("c1", 2, 4))]
    records += [Record(3, b"a", b"2"), Record(4, b"c", b"3", headers("c2", 2, 5)), Record(5, b"d", b"4")]
    one, bulk = Replay(), Replay()
    for record in records:
        one.feed(record.offset, record.key, record.value, record.headers)
    bulk.feed_records(records)
    assert [vars(c) for c in bulk.take()] == [vars(c) for c in one.take()] != []
    assert bulk.trailing_keys() == one.trailing_keys() == ["d"]


def test_recover_replays_to_the_end_and_reports_what_it_did(tmp_path):
    logs = Logs()
    log = logs.of(CHANGELOG.topic, 1)
    for i in range(7):
        closing = headers(f"c{i // 2}", 2, 100 + i // 2) if i % 2 else []
        log.append(Record(i, f"k{i % 3}".encode(), str(i).encode(), closing))
    store = PartitionStore(tmp_path, "content", 1, SETTINGS.engine_params())
    (report,) = asyncio.run(recover(RestoreConsumer(logs), {CHANGELOG: store})).values()  # type: ignore[arg-type]
    assert report.records == 6 and report.trailing == ("k0",)  # record 6 starts a call that never ended
    assert state_of(store) == {"k0": b"3", "k1": b"4", "k2": b"5"} and store.applied == 102


def test_the_watchdog_recommits_a_committed_offset_that_stays_behind(tmp_path):
    commits: list[dict[TopicPartition, int]] = []

    class Consumer:
        def assignment(self) -> set[TopicPartition]:
            return {STAGE_TP}

        async def committed(self, tp: TopicPartition) -> int:
            return 2  # what the group says, whatever was committed

        async def commit(self, offsets: dict[TopicPartition, int]) -> None:
            commits.append(offsets)

    worker = make_worker(tmp_path, Logs())
    worker._consumer = Consumer()  # type: ignore[assignment]
    worker._done[STAGE_TP] = 21
    assert asyncio.run(worker.check_commits()) == 0  # behind once: it may be a commit in flight
    assert asyncio.run(worker.check_commits()) == 1
    assert commits == [{STAGE_TP: 21}]
    assert "streamdedup_commit_repairs_total 1.0" in worker.metrics.render().decode()


def test_the_stores_a_data_directory_holds_are_opened_ahead_of_the_assignment(tmp_path):
    from streamdedup.core.params import EngineParams
    from streamdedup.drivers.kafka.partitions import PartitionStores

    before = PartitionStores(tmp_path, EngineParams())
    before.commit({("band", 1): {"k": b"v"}, ("content", 0): {"c": b"w"}}, {})
    before.close()

    again = PartitionStores(tmp_path, EngineParams())
    again.open_found()
    # Nothing was assigned or asked for by name: the keys are those of the stores it found and opened.
    assert again.keys("band") == [(1, "k")] and again.keys("content") == [(0, "c")]
    again.keep_only([("band", 1), ("source", 2)])
    assert sorted(again.partitions) == [("band", 1), ("source", 2)]
    assert again.get("band", 1, "k") == b"v"
    again.close()
    again.close()  # closing again does nothing
    with pytest.raises(StateError, match="closed"):
        again.open("band", 1)


def test_a_store_that_cannot_be_opened_ahead_fails_when_its_partition_is_assigned(tmp_path):
    from streamdedup.core.params import EngineParams
    from streamdedup.drivers.kafka.partitions import PartitionStores
    from streamdedup.errors import StateMismatchError

    built = PartitionStores(tmp_path, EngineParams(threshold=0.9))
    built.open("band", 0)
    built.close()

    other = PartitionStores(tmp_path, EngineParams())
    other.open_found()
    assert other.keys("band") == []  # left closed, not half open
    with pytest.raises(StateMismatchError, match="built with"):
        other.keep_only([("band", 0)])
    other.close()


def test_a_round_decodes_and_handles_with_the_collector_paused(tmp_path, monkeypatch):
    import gc

    import streamdedup.drivers.kafka.worker as worker_module

    seen: list[tuple[str, bool]] = []
    decode = worker_module.decode_batch

    def observed_decode(data: bytes) -> Any:
        seen.append(("decode", gc.isenabled()))
        return decode(data)

    def handle(stage: str, messages: list[BandJoin], state: Any) -> list[Any]:
        seen.append(("handle", gc.isenabled()))
        return band_handler()(stage, messages, state)

    monkeypatch.setattr(worker_module, "decode_batch", observed_decode)
    logs = Logs()
    worker = make_worker(tmp_path, logs, handle)
    store = open_store(worker)
    assert gc.isenabled()
    asyncio.run(worker._round({STAGE_TP: [records(10, 1, 2)]}))
    assert seen == [("decode", False), ("handle", False)]
    assert gc.isenabled() and store.pending is not None and store.pending.applied == 10


def test_a_worker_that_has_caught_up_commits_every_partition_at_once(tmp_path):
    commits: list[dict[TopicPartition, int]] = []
    other = TopicPartition("t.documents", 0)

    class Consumer:
        def assignment(self) -> set[TopicPartition]:
            return {STAGE_TP, other}

        async def commit(self, offsets: dict[TopicPartition, int]) -> None:
            commits.append(dict(offsets))

    worker = make_worker(tmp_path, Logs())
    worker._consumer = Consumer()  # type: ignore[assignment]
    worker._done = {STAGE_TP: 5, other: 3}
    worker._committed = dict(worker._done)  # committed, as far as the worker knows
    worker._last_commit = time.monotonic()
    asyncio.run(worker.commit_when_due(1.0, read=True))
    assert commits == []  # a round read something, within the interval: nothing to do
    asyncio.run(worker.commit_when_due(1.0, read=False))
    assert commits == []  # caught up, but at most four commits an interval
    worker._last_commit -= 0.3
    asyncio.run(worker.commit_when_due(1.0, read=False))
    assert commits == [
        {STAGE_TP: 5, other: 3}
    ]  # every partition, though none moved: a lost commit is made again
    worker._last_commit -= 0.3
    asyncio.run(worker.commit_when_due(1.0, read=False))
    assert len(commits) == 1  # still idle: once is enough
    worker._done[STAGE_TP] = 9
    worker._last_commit -= 1.0
    asyncio.run(worker.commit_when_due(1.0, read=True))
    assert commits[-1] == {STAGE_TP: 9}  # at the interval, the partitions that moved
