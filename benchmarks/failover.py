"""Failover on a real broker: how long the worker group takes to drain its lag after a worker is killed, and after
the broker has been away.

    python -m benchmarks.failover [--rounds 3] [--port PORT] [--rate DOCS_PER_S] [--outage 20] [--only kill|outage]

Starts the project's broker (``deploy/kafka/broker.sh``) on ``--port`` (default the workload's, 29092) with a
storage directory of its own, and refuses to run if something already answers there: the outage rounds stop and
restart it. Then, each round on topics of its own:

1. *kill*: two workers in a stable, healthy group; a feed of 2,000 documents of five Django chunks each (10,000
   chunks, :mod:`benchmarks.workload`) produced at ``--rate`` documents a second; once half of it is sent, one
   worker is killed (SIGKILL). Measured: seconds from the kill until the group's lag is 0, that is every input and
   stage partition's committed offset is at its end offset, with the whole feed produced and acknowledged;
2. *outage*: one worker; the same feed; once half of it is sent, the broker is stopped (its data kept,
   ``KAFKA_KEEP_DATA=1``), kept down ``--outage`` seconds while the producer keeps trying, and started again.
   Measured: seconds from the broker's return (``broker.sh start`` has returned: it answers and has started)
   until the lag is 0, the feed all produced.

Lag is polled every tenth of a second or so (each reading asks the broker for the group's committed offsets and
the end offsets), and counts once it reads 0 twice in a row; the first of the two is the time reported. After each
round, the materialized view must equal an embedded run of the same feed (revisions aside), and every document must
have its source mapping. The workers log at info level, with timestamps, in the run's directory (kept with ``--logs``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from benchmarks.common import machine, save
from benchmarks.workers import _Workers
from benchmarks.workload import (
    CHUNKS_PER_DOCUMENT,
    PARTITIONS,
    PORT,
    _answers,
    _events,
    start_broker,
    stop_broker,
)
from streamdedup.core.messages import STAGES
from streamdedup.drivers.kafka.admin import ensure_topics
from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES, TopicNames
from streamdedup.settings import Settings

DOCUMENTS = 2000  # 10,000 chunks
RATE = 400.0  # documents a second: 2,000 chunks/s, about a third of what one worker takes on the reference machine
OUTAGE = 20.0
ROUNDS = 3
TARGET_SECONDS = 10.0  # lag 0 within this many seconds of the kill, and of the broker's return
SOURCE_PREFIX = "failover-"  # the same source ids every round, so one embedded run is the reference of all
POLL = 0.1


class _Feed(threading.Thread):
    """Produce ``values`` at ``rate`` a second in a thread; ``half`` is set once half of them are sent."""

    def __init__(self, settings: Settings, values: list[bytes], rate: float) -> None:
        super().__init__(daemon=True)
        self.settings, self.values, self.rate = settings, values, rate
        self.half = threading.Event()
        self.error: BaseException | None = None
        self.done_at: float | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._produce())
            self.done_at = time.perf_counter()
        except BaseException as exc:  # reported by the round
            self.error = exc
            self.half.set()

    async def _produce(self) -> None:
        # A feed that rides out a broker outage: it waits for the broker rather than giving up on a batch.
        producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.bootstrap_servers, max_request_size=MAX_MESSAGE_BYTES, linger_ms=5,
            acks="all", request_timeout_ms=180_000,
        )  # fmt: skip
        await producer.start()
        topic = TopicNames(self.settings.topic_prefix).documents
        start = time.perf_counter()
        try:
            pending = []
            for i, value in enumerate(self.values):
                delay = start + i / self.rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                key = json.loads(value)["source_id"].encode()
                pending.append(await producer.send(topic, value, key=key))
                if i + 1 == len(self.values) // 2:
                    self.half.set()
            await asyncio.gather(*pending)
        finally:
            await producer.stop()


class _Lag:
    """The group's lag on the input and stage topics, from one admin client and one consumer kept between
    readings (a reading then takes a few hundredths of a second); both are made again after an error."""

    def __init__(self, settings: Settings) -> None:
        names = TopicNames(settings.topic_prefix)
        self.settings, self.group = settings, names.group
        self.partitions = [
            TopicPartition(topic, p)
            for topic in (names.documents, *(names.stage(s) for s in STAGES))
            for p in range(settings.partitions)
        ]
        self.admin: AIOKafkaAdminClient | None = None
        self.consumer: AIOKafkaConsumer | None = None

    async def read(self) -> int:
        """The lag, or -1 when the broker cannot tell (it is away, or just back)."""
        try:
            if self.admin is None or self.consumer is None:
                servers = self.settings.bootstrap_servers
                self.admin = AIOKafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=5000)
                self.consumer = AIOKafkaConsumer(bootstrap_servers=servers, request_timeout_ms=5000)
                await asyncio.wait_for(self.admin.start(), 10)
                await asyncio.wait_for(self.consumer.start(), 10)
            committed = await asyncio.wait_for(self.admin.list_consumer_group_offsets(self.group), 10)
            ends = await asyncio.wait_for(self.consumer.end_offsets(self.partitions), 10)
        except Exception:  # not known yet; start over
            await self.close()
            return -1
        done = {
            tp: found.offset for tp, found in committed.items() if found is not None and found.offset >= 0
        }
        return sum(ends[tp] - done.get(tp, 0) for tp in self.partitions)

    async def close(self) -> None:
        for client in (self.admin, self.consumer):
            try:
                if isinstance(client, AIOKafkaAdminClient):
                    await client.close()
                elif client is not None:
                    await client.stop()
            except Exception:  # closing what failed
                pass
        self.admin = self.consumer = None


def _drained(
    settings: Settings, feed: _Feed, workers: _Workers, since: float, timeline: list[tuple[float, int]],
    timeout: float = 600,
) -> float:  # fmt: skip
    """Wait until the feed is all produced and the lag reads 0 twice in a row; return when it first read 0.

    Every reading goes to ``timeline`` as (seconds since ``since``, lag)."""

    async def wait() -> float:
        lag = _Lag(settings)
        deadline = time.monotonic() + timeout
        first: float | None = None
        try:
            while time.monotonic() < deadline:
                if feed.error is not None:
                    raise RuntimeError(f"the feed failed: {feed.error!r}")
                for process in workers.processes:
                    if process.poll() not in (None, -9):
                        raise RuntimeError(f"a worker exited with {process.returncode}")
                at = time.perf_counter()
                found = await lag.read()
                timeline.append((round(at - since, 2), found))
                if feed.done_at is not None and found == 0:
                    if first is not None:
                        return first
                    first = at
                else:
                    first = None
                await asyncio.sleep(POLL)
        finally:
            await lag.close()
        raise TimeoutError("the group did not drain its lag")

    return asyncio.run(wait())


def _view_check(settings: Settings, expected: str) -> dict[str, Any]:
    from streamdedup.cli.topic_io import materialize

    view = asyncio.run(materialize(settings))
    mapped = sum(1 for i in range(DOCUMENTS) if f"{SOURCE_PREFIX}doc-{i:06d}" in view.mappings)
    return {"view_equal": view.compacted(with_revision=False) == expected, "documents_mapped": mapped}


def _embedded_view(values: list[bytes]) -> str:
    """The view an embedded run of the feed materializes (revisions aside)."""
    from streamdedup.contract.codec import decode_event
    from streamdedup.core.engine import Engine
    from streamdedup.core.output_view import View
    from streamdedup.drivers.embedded import EmbeddedRunner
    from streamdedup.store.memory import MemoryStore

    settings = Settings()
    runner = EmbeddedRunner(Engine(settings.engine_params()), MemoryStore())
    events = [decode_event(value, settings.event_limits()) for value in values]
    return View().apply_all(runner.process(events, lambda outputs: None)).compacted(with_revision=False)


class _Run:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args, self.root = args, root
        self.port = args.port
        self.home = root / "kafka"
        self.broker = f"kafka://127.0.0.1:{self.port}"
        self.values = _events(SOURCE_PREFIX)[:DOCUMENTS]
        self.expected = _embedded_view(self.values)

    def _settings(self, kind: str) -> Settings:
        prefix = f"bench-{kind}-{uuid.uuid4().hex[:6]}."
        settings = Settings(broker=self.broker, topic_prefix=prefix, partitions=PARTITIONS)
        asyncio.run(ensure_topics(settings))
        return settings

    def kill_round(self) -> dict[str, Any]:
        settings = self._settings("kill")
        workers = _Workers(settings, 2, self.root / settings.topic_prefix, loglevel="info")
        try:
            workers.wait_stable(settings)
            feed = _Feed(settings, self.values, self.args.rate)
            feed.start()
            feed.half.wait(600)
            victim = workers.processes[1]
            victim.kill()
            killed, wall = time.perf_counter(), time.time()
            victim.wait(30)
            timeline: list[tuple[float, int]] = []
            try:
                drained = _drained(settings, feed, workers, killed, timeline)
            except RuntimeError as exc:  # a worker stopped: the round failed, and says so
                return _failed(exc, settings, timeline)
            assert feed.done_at is not None
            result = {"seconds": drained - killed, "produced_after_kill_s": feed.done_at - killed}
        finally:
            workers.stop()
        result |= {"prefix": settings.topic_prefix, "killed_at": _clock(wall), "killed_pid": victim.pid,
                   "lag_timeline": timeline}  # fmt: skip
        return result | _view_check(settings, self.expected)

    def outage_round(self) -> dict[str, Any]:
        settings = self._settings("outage")
        workers = _Workers(settings, 1, self.root / settings.topic_prefix, loglevel="info")
        try:
            workers.wait_stable(settings)
            feed = _Feed(settings, self.values, self.args.rate)
            feed.start()
            feed.half.wait(600)
            stopping = time.perf_counter()
            stop_broker(self.port, self.home, keep_data=True)
            down, wall_down = time.perf_counter(), time.time()
            time.sleep(max(0.0, down + self.args.outage - time.perf_counter()))
            starting = time.perf_counter()
            start_broker(self.port, self.home)
            back, wall_back = time.perf_counter(), time.time()
            timeline = []
            try:
                drained = _drained(settings, feed, workers, back, timeline)
            except RuntimeError as exc:
                return _failed(exc, settings, timeline)
            assert feed.done_at is not None
            result = {
                "seconds": drained - back,
                "broker_stop_s": down - stopping,
                "broker_down_s": starting - down,
                "broker_start_s": back - starting,
                "produced_after_return_s": feed.done_at - back,
            }
        finally:
            workers.stop()
        result |= {"prefix": settings.topic_prefix, "down_at": _clock(wall_down), "back_at": _clock(wall_back),
                   "lag_timeline": timeline}  # fmt: skip
        return result | _view_check(settings, self.expected)


def _clock(wall: float) -> str:
    """A wall-clock time as the workers' logs write it."""
    return time.strftime("%H:%M:%S", time.localtime(wall)) + f",{int(wall % 1 * 1000):03d}"


def _failed(exc: BaseException, settings: Settings, timeline: list[tuple[float, int]]) -> dict[str, Any]:
    print(f"  the round failed: {exc}")
    return {"seconds": None, "failure": str(exc), "prefix": settings.topic_prefix, "lag_timeline": timeline}


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median and worst of the rounds that drained (``worst_s`` None when some round failed)."""
    done = [r for r in rounds if r["seconds"] is not None]
    seconds = [r["seconds"] for r in done]
    return {
        "rounds": rounds,
        "failed_rounds": len(rounds) - len(done),
        "median_s": statistics.median(seconds) if seconds else None,
        "worst_s": max(seconds) if len(done) == len(rounds) else None,
        "views_equal": all(r["view_equal"] for r in done),
        "all_mapped": all(r["documents_mapped"] == DOCUMENTS for r in done),
    }


def main() -> None:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the feed's retries while the broker is away
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument(
        "--port", type=int, default=PORT, help="the broker's port (the next one is its controller's)"
    )
    parser.add_argument("--rate", type=float, default=RATE, help="documents a second (five chunks each)")
    parser.add_argument("--outage", type=float, default=OUTAGE, help="seconds the broker stays down")
    parser.add_argument("--only", choices=("kill", "outage"), help="run one of the two")
    parser.add_argument("--logs", type=Path, help="keep the workers' logs and the broker's in this directory")
    parser.add_argument("--name", default="failover", help="the result file's name in benchmarks/results/")
    parser.add_argument("--no-save", action="store_true", help="print, but write no result file")
    args = parser.parse_args()
    if _answers(args.port) or _answers(args.port + 1):
        raise SystemExit(f"something answers on 127.0.0.1:{args.port} or the next port; choose --port")
    root = Path(tempfile.mkdtemp(prefix="streamdedup-failover-"))
    run = _Run(args, root)
    kills: list[dict[str, Any]] = []
    outages: list[dict[str, Any]] = []
    start_broker(args.port, run.home)
    try:
        for i in range(args.rounds):
            if args.only in (None, "kill"):
                kills.append(run.kill_round())
                print(
                    f"kill round {i + 1}: lag 0 {_seconds(kills[-1]['seconds'])} after the kill {_extra(kills[-1])}"
                )
                print("  lag:", kills[-1]["lag_timeline"])
            if args.only in (None, "outage"):
                outages.append(run.outage_round())
                print(
                    f"outage round {i + 1}: lag 0 {_seconds(outages[-1]['seconds'])} after the broker's return "
                    f"{_extra(outages[-1])}"
                )
                print("  lag:", outages[-1]["lag_timeline"])
    finally:
        stop_broker(args.port, run.home, keep_data=True)
        if args.logs is not None:
            shutil.copytree(
                root, args.logs, dirs_exist_ok=True, ignore=shutil.ignore_patterns("w0", "w1", "data")
            )
        shutil.rmtree(root, ignore_errors=True)
    result: dict[str, Any] = {
        "documents": DOCUMENTS,
        "chunks": DOCUMENTS * CHUNKS_PER_DOCUMENT,
        "partitions": PARTITIONS,
        "rate_chunks_per_second": args.rate * CHUNKS_PER_DOCUMENT,
        "outage_seconds": args.outage,
        "target_seconds": TARGET_SECONDS,
        "kill": _summary(kills) if kills else None,
        "outage": _summary(outages) if outages else None,
    }
    for name in ("kill", "outage"):
        if result[name]:
            found = result[name]
            print(
                f"{name}: median {_seconds(found['median_s'])}, worst {_seconds(found['worst_s'])} "
                f"({found['failed_rounds']} rounds failed) "
                f"(target {TARGET_SECONDS:.0f} s); views equal: {found['views_equal']}; "
                f"every document mapped: {found['all_mapped']}"
            )
    if not args.no_save:
        print(save(args.name, result, run={"machine": machine(), "command": _command(args)}))


def _command(args: argparse.Namespace) -> str:
    given = [
        f"--{k.replace('_', '-')} {v}"
        for k, v in vars(args).items()
        if k in ("rounds", "port", "rate", "outage")
    ]
    return " ".join(
        ["python -m benchmarks.failover", *given, *([f"--only {args.only}"] if args.only else [])]
    )


def _seconds(value: float | None) -> str:
    return "never (the round failed)" if value is None else f"{value:.2f} s"


def _extra(found: dict[str, Any]) -> str:
    skip = {"seconds", "prefix", "rounds", "lag_timeline", "failure"}
    return "(" + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in found.items()
                           if k not in skip) + ")"  # fmt: skip


if __name__ == "__main__":
    main()
