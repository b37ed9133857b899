"""Deletion propagation from a database: a row's DELETE (or ACL change) to its chunk gone from the index.

    python -m benchmarks.cdc_latency                         # 240 deletes and 200 ACL changes at 20/s (~3 min)
    python -m benchmarks.cdc_latency --poll-interval-ms 500  # Debezium's default poll interval
    python -m benchmarks.cdc_latency --profile               # py-spy on the worker and the index writer too

Everything runs on this machine, on free loopback ports, in a temporary directory that is removed at the end (on
failure and Ctrl-C too): the project's broker (deploy/kafka/broker.sh), a PostgreSQL cluster
(deploy/postgres/postgres.sh), Kafka Connect with Debezium's PostgreSQL connector (deploy/connect/connect.sh), one
``streamdedup worker`` reading the connector's topic through a feeds file, and ``streamdedup index --into
lancedb://DIR --follow`` with the default embedder.

1. The table ``documents`` gets ``--rows`` rows, each a distinct single paragraph, before the connector starts, so
   they arrive as its snapshot. The benchmark waits until the view holds one single-source chunk per row and the
   index holds a row per chunk.
2. Deletes: ``--deletes`` rows deleted one per transaction (autocommit) at ``--rate`` per second, scheduled by
   absolute time. t0 is the wall time at which the DELETE's commit returned. From t0 it measures: the ``d`` record
   on the connector's topic (its timestamp: Connect's producer, CreateTime), the source mapping's tombstone and the
   chunk's tombstone (their timestamps: the worker's producer; and when this process received them), and the row
   gone from the LanceDB table, which a thread of this process reads every ``--index-poll-ms`` (the table's latest
   version each time) for the chunk ids still pending.
3. ACL changes: ``--acl-changes`` ``update documents set acl = ...`` of remaining rows at the same rate; t0 to the
   chunk record carrying the new ACL and to the index row's ``acl`` field equal to it.

Every timestamp is this machine's wall clock (the producers run here too), in milliseconds for Kafka's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.common import machine, save

REPO = Path(__file__).resolve().parents[1]
BROKER_SH = REPO / "deploy" / "kafka" / "broker.sh"
POSTGRES_SH = REPO / "deploy" / "postgres" / "postgres.sh"
CONNECT_SH = REPO / "deploy" / "connect" / "connect.sh"
CONNECTOR = "bench-documents"
TOPIC_PREFIX = "bench_pg"
FEED_TOPIC = f"{TOPIC_PREFIX}.public.documents"
PREFIX = "bench."
SPACES = ("eng", "sales", "support")
ACLS = (["group:all"], ["group:eng"], ["group:sales"], ["group:eng", "user:ana"])
#: Bounds on every wait, generous for a machine three times slower than the one it was written on.
START_SECONDS = 600
SETTLE_SECONDS = 900
DRAIN_SECONDS = 120
#: The connector's poll.interval.ms: how long Debezium's streaming loop sleeps when the replication stream has
#: nothing, and how long its queue waits to fill a batch (2,048 events) before handing it to Kafka Connect; a change
#: can wait for both. Debezium's default is 500.
POLL_INTERVAL_MS = 50


class Stop(Exception):
    """SIGTERM: unwind as Ctrl-C does, so everything started is stopped."""


def _terminate(*_: Any) -> None:
    raise Stop("terminated")


def free_port(pair: bool = False) -> int:
    """Return a free loopback port (with ``pair``, one whose next port is free too: the broker's controller)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if not pair:
            return port
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- The table's texts --------------------------------------------------------------------------------------------


def paragraphs(count: int, seed: int = 11) -> list[str]:
    """Return ``count`` distinct single paragraphs of made-up words (no two near each other)."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "pe", "da", "gu", "fi", "ho", "ze", "wa", "bri",
                 "tor", "lan", "mes", "quo", "ril", "sen", "dor", "pal", "vin", "gal", "tre", "nos"]  # fmt: skip
    words = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(6000)})
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < count:
        sentences = []
        for _ in range(rng.randint(4, 6)):
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(8, 14)))
            sentences.append(sentence[0].upper() + sentence[1:] + ".")
        text = " ".join(sentences)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


# -- The services -------------------------------------------------------------------------------------------------


class Services:
    """The broker, PostgreSQL, Kafka Connect, the worker and the index writer, started in ``root``; ``close`` stops
    whatever was started, in reverse order."""

    def __init__(self, root: Path, poll_interval_ms: int, embedder: str | None) -> None:
        self.root = root
        self.poll_interval_ms = poll_interval_ms
        self.kafka_port = free_port(pair=True)
        self.pg_port = free_port()
        self.connect_port = free_port()
        self.worker_port = free_port()
        self.index_port = free_port()
        self.broker = f"kafka://127.0.0.1:{self.kafka_port}"
        self.index_dir = root / "index"
        self._stops: list[Any] = []
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("STREAMDEDUP_", "KAFKA_", "PG_", "CONNECT_"))
        }
        if os.environ.get("STREAMDEDUP_CACHE"):
            base["STREAMDEDUP_CACHE"] = os.environ["STREAMDEDUP_CACHE"]
        self.kafka_env = {**base, "KAFKA_PORT": str(self.kafka_port), "KAFKA_HOME_DIR": str(root / "kafka")}
        self.pg_env = {
            **base,
            "PG_PORT": str(self.pg_port),
            "PG_HOME_DIR": str(root / "pg"),
            "PG_DB": "bench",
        }
        self.connect_env = {
            **base,
            "CONNECT_PORT": str(self.connect_port),
            "CONNECT_HOME_DIR": str(root / "connect"),
            "KAFKA_BOOTSTRAP": f"127.0.0.1:{self.kafka_port}",
        }
        self.feeds = root / "feeds.toml"
        self.streamdedup_env = {
            **base,
            "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "PYTHONUNBUFFERED": "1",
            "STREAMDEDUP_BROKER": self.broker,
            "STREAMDEDUP_TOPIC_PREFIX": PREFIX,
            "STREAMDEDUP_FEEDS": str(self.feeds),
            **({"STREAMDEDUP_EMBEDDER": embedder} if embedder else {}),
        }
        if embedder and embedder.startswith("callable:tests."):
            self.streamdedup_env["STREAMDEDUP_TEST_EMBED_LOG"] = str(root / "embedded.jsonl")
        self.connector_config = root / "connector.properties"

    # Scripts.

    def _script(self, script: Path, env: dict[str, str], *args: str, timeout: float = START_SECONDS) -> None:
        done = subprocess.run(
            [str(script), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False,
            start_new_session=True,  # Ctrl-C reaches this process, which stops them in order
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{script.name} {' '.join(args)} failed:\n{done.stderr[-4000:]}")

    def start_broker_and_postgres(self) -> None:
        self._stops.append(lambda: self._quiet(BROKER_SH, self.kafka_env, "wipe"))
        self._stops.append(lambda: self._quiet(POSTGRES_SH, self.pg_env, "wipe"))
        errors: list[BaseException] = []

        def run(script: Path, env: dict[str, str]) -> None:
            try:
                self._script(script, env, "start")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(BROKER_SH, self.kafka_env)),
                   threading.Thread(target=run, args=(POSTGRES_SH, self.pg_env))]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def _quiet(self, script: Path, env: dict[str, str], *args: str) -> None:
        subprocess.run([str(script), *args], env=env, capture_output=True, timeout=300, check=False,
                       start_new_session=True)  # fmt: skip

    def connector_properties(self) -> list[str]:
        return [
            f"name={CONNECTOR}",
            "connector.class=io.debezium.connector.postgresql.PostgresConnector",
            "tasks.max=1",
            "database.hostname=127.0.0.1",
            f"database.port={self.pg_port}",
            "database.user=postgres",
            "database.dbname=bench",
            "plugin.name=pgoutput",
            "slot.name=bench_documents",
            "publication.name=bench_documents",
            "publication.autocreate.mode=filtered",
            f"topic.prefix={TOPIC_PREFIX}",
            "table.include.list=public.documents",
            "snapshot.mode=initial",
            "tombstones.on.delete=true",
            "decimal.handling.mode=string",
            "interval.handling.mode=string",
            "time.precision.mode=adaptive_time_microseconds",
            "unavailable.value.placeholder=__debezium_unavailable_value",
            # How long Debezium's task waits for change events before it hands a batch to Kafka Connect.
            f"poll.interval.ms={self.poll_interval_ms}",
            "topic.creation.default.replication.factor=1",
            "topic.creation.default.partitions=1",
        ]

    def start_connect(self) -> None:
        self.connector_config.write_text("\n".join(self.connector_properties()) + "\n")
        self._stops.append(lambda: self._quiet(CONNECT_SH, self.connect_env, "wipe"))
        self._script(CONNECT_SH, self.connect_env, "start", str(self.connector_config))
        self._script(CONNECT_SH, self.connect_env, "wait-streaming", CONNECTOR)

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        output = (self.root / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "streamdedup.cli", *args], env=env, stdout=output, stderr=subprocess.STDOUT,
            cwd=REPO, start_new_session=True,
        )  # fmt: skip
        self.processes[name] = process

        def stop() -> None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(30)
            output.close()

        self._stops.append(stop)

    def write_feeds(self) -> None:
        self.feeds.write_text(
            f"""[[feed]]
name = "documents"
topic = "{FEED_TOPIC}"
table = "public.documents"
source_id = "pg:{{table}}:{{id}}"
text = "body"
acl = "acl"
modified_at = "modified_at"
collection = "{{space}}"
title = "title"
uri = "https://wiki.example/{{space}}/{{id}}"
metadata = ["space"]
"""
        )

    def start_worker(self) -> None:
        self.write_feeds()
        env = {**self.streamdedup_env, "STREAMDEDUP_WEB_PORT": str(self.worker_port)}
        self._spawn("worker", ["worker", "--data-dir", str(self.root / "worker"), "--loglevel", "info"], env)

    def start_index(self) -> None:
        env = {**self.streamdedup_env, "STREAMDEDUP_INDEX_PORT": str(self.index_port)}
        self._spawn("index", ["index", "--into", f"lancedb://{self.index_dir}", "--follow"], env)

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                tail = (self.root / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{tail}")

    def pids(self) -> dict[str, list[int]]:
        """The processes whose CPU the benchmark reports: the JVMs, PostgreSQL's, the worker and the writer."""
        import psutil

        found: dict[str, list[int]] = {name: [p.pid] for name, p in self.processes.items()}
        for name, pidfile in (("broker", self.root / "kafka" / "broker.pid"),
                              ("connect", self.root / "connect" / "connect.pid")):  # fmt: skip
            with contextlib.suppress(OSError, ValueError):
                found[name] = [int(pidfile.read_text().split()[0])]
        with contextlib.suppress(OSError, ValueError, psutil.Error):
            postmaster = int((self.root / "pg" / "data" / "postmaster.pid").read_text().split()[0])
            found["postgres"] = [postmaster, *(c.pid for c in psutil.Process(postmaster).children())]
        return found

    def close(self) -> None:
        while self._stops:
            stop = self._stops.pop()
            try:
                stop()
            except Exception as exc:
                log(f"while stopping: {exc!r}")


def cpu_seconds(pids: dict[str, list[int]]) -> dict[str, float]:
    import psutil

    out: dict[str, float] = {}
    for name, numbers in pids.items():
        total = 0.0
        for pid in numbers:
            with contextlib.suppress(psutil.Error):
                times = psutil.Process(pid).cpu_times()
                total += times.user + times.system
        out[name] = total
    return out


# -- Watching the topics and the index ----------------------------------------------------------------------------


class TopicWatch:
    """Reads the connector's topic and the two compacted outputs from their ends, in a thread; keeps every record
    with its timestamp and the time it arrived here."""

    def __init__(self, settings: Any) -> None:
        from streamdedup.drivers.kafka.topics import TopicNames

        names = TopicNames(settings.topic_prefix)
        self.settings = settings
        self.topics = {FEED_TOPIC: "feed", names.output("source-mappings"): "mapping",
                       names.output("canonical-chunks"): "chunk"}  # fmt: skip
        self.records: list[
            tuple[str, Any, Any, float, float]
        ] = []  # kind, key, value, timestamp s, received s
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="topic-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(120):
            raise TimeoutError("the topic reader did not start")
        if self.error is not None:
            raise self.error

    def _main(self) -> None:
        try:
            asyncio.run(self._read())
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    async def _read(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        from streamdedup.drivers.kafka.admin import partitions_of

        found = await partitions_of(self.settings, list(self.topics))
        partitions = [TopicPartition(t, p) for t, ps in found.items() for p in ps]
        consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.bootstrap_servers, enable_auto_commit=False,
                                    fetch_max_wait_ms=100)  # fmt: skip
        await consumer.start()
        try:
            consumer.assign(partitions)
            await consumer.seek_to_end(*partitions)
            for tp in partitions:
                await consumer.position(tp)
            self.ready.set()
            while not self.stop.is_set():
                batches = await consumer.getmany(timeout_ms=20)
                received = time.time()
                found_records = []
                for tp, records in batches.items():
                    kind = self.topics[tp.topic]
                    for r in records:
                        key = r.key.decode() if r.key is not None else None
                        value = json.loads(r.value) if r.value is not None else None
                        if kind == "feed" and key is not None:
                            key = json.loads(key).get("id")
                        found_records.append((kind, key, value, r.timestamp / 1000, received))
                if found_records:
                    with self.lock:
                        self.records.extend(found_records)
        finally:
            await consumer.stop()

    def snapshot(self) -> list[tuple[str, Any, Any, float, float]]:
        with self.lock:
            return list(self.records)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


class IndexWatch:
    """Reads the LanceDB table every ``interval`` seconds in a thread, for the chunk ids still pending: when each
    row is first seen gone, or first seen with a wanted ACL."""

    def __init__(self, directory: Path, interval: float) -> None:
        self.directory = directory
        self.interval = interval
        self.lock = threading.Lock()
        self.gone: dict[str, float] = {}  # chunk_id -> when first seen gone
        self.acl: dict[str, float] = {}  # chunk_id -> when first seen with the wanted ACL
        self._want_gone: set[str] = set()
        self._want_acl: dict[str, list[str]] = {}
        self.stop = threading.Event()
        self.reads = 0
        self.read_seconds = 0.0
        self.cpu_seconds = 0.0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="index-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def expect_gone(self, chunk_id: str) -> None:
        with self.lock:
            self._want_gone.add(chunk_id)

    def expect_acl(self, chunk_id: str, acl: list[str]) -> None:
        with self.lock:
            self._want_acl[chunk_id] = sorted(acl)

    def pending(self) -> int:
        with self.lock:
            return len(self._want_gone) + len(self._want_acl)

    def _main(self) -> None:
        import lancedb

        try:
            table = lancedb.connect(self.directory, read_consistency_interval=timedelta(0)).open_table(
                "chunks"
            )
            cpu_started = time.thread_time()
            next_at = time.monotonic()
            while not self.stop.is_set():
                next_at += self.interval
                with self.lock:
                    ids = sorted(self._want_gone | set(self._want_acl))
                if ids:
                    started = time.time()
                    table.checkout_latest()
                    quoted = ", ".join("'" + i.replace("'", "''") + "'" for i in ids)
                    found = table.search().where(f"chunk_id IN ({quoted})").select(["chunk_id", "acl"])
                    rows = {r["chunk_id"]: sorted(r["acl"]) for r in found.limit(None).to_arrow().to_pylist()}
                    self.reads += 1
                    self.read_seconds += time.time() - started
                    with self.lock:
                        asked = set(ids)  # an id added during the read is judged by the next one
                        for chunk_id in list(self._want_gone & asked):
                            if chunk_id not in rows:
                                self.gone[chunk_id] = started
                                self._want_gone.discard(chunk_id)
                        for chunk_id, acl in list(self._want_acl.items()):
                            if chunk_id in asked and rows.get(chunk_id) == acl:
                                self.acl[chunk_id] = started
                                del self._want_acl[chunk_id]
                self.cpu_seconds = time.thread_time() - cpu_started
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    next_at = time.monotonic()
        except BaseException as exc:
            self.error = exc

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


# -- Statistics ---------------------------------------------------------------------------------------------------


def stats(values: list[float]) -> dict[str, float] | None:
    import numpy as np

    if not values:
        return None
    data = np.asarray(values, dtype=float)
    return {
        "n": int(data.size),
        "p50": float(np.percentile(data, 50)),
        "p90": float(np.percentile(data, 90)),
        "p99": float(np.percentile(data, 99)),
        "max": float(data.max()),
        "mean": float(data.mean()),
    }


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- The benchmark ------------------------------------------------------------------------------------------------


def until(condition: Any, what: str, seconds: float, services: Services) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = condition()
        if found:
            return found
        services.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {seconds} s")
        time.sleep(0.5)


def schedule(count: int, rate: float, action: Any) -> list[tuple[float, float]]:
    """Run ``action(i)`` for i in range(count) at ``rate`` per second by absolute time; return (due, t0) pairs,
    t0 being the wall time at which the action (a committed statement) returned."""
    start = time.time() + 0.2
    out = []
    for i in range(count):
        due = start + i / rate
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        action(i)
        out.append((due, time.time()))
    return out


def py_spy(pid: int, path: Path, seconds: int) -> subprocess.Popen[bytes] | None:
    found = Path(sys.executable).with_name("py-spy")
    binary = str(found) if found.exists() else shutil.which("py-spy")
    if binary is None:
        return None
    return subprocess.Popen(
        [binary, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "200", "--format", "raw",
         "--output", str(path), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import psycopg

    from streamdedup.cli.topic_io import materialize
    from streamdedup.drivers.kafka.admin import ensure_topics
    from streamdedup.settings import Settings

    embedder = args.embedder
    if embedder is None:
        try:
            from streamdedup.index.embeddings import OnnxEmbedder

            OnnxEmbedder().embed(["a test"])
            embedder_used = "onnx (default)"
        except Exception as exc:
            log(f"the default embedder is unavailable ({exc!r}); using the tests' callable embedder")
            embedder = "callable:tests.integration.embedder:embedder"
            embedder_used = embedder
    else:
        embedder_used = embedder
    services = Services(root, args.poll_interval_ms, embedder)
    try:
        log(
            f"starting the broker on 127.0.0.1:{services.kafka_port} and PostgreSQL on 127.0.0.1:{services.pg_port}"
        )
        services.start_broker_and_postgres()
        settings = Settings(broker=services.broker, topic_prefix=PREFIX)
        db = psycopg.connect(
            f"host=127.0.0.1 port={services.pg_port} user=postgres dbname=bench", autocommit=True
        )
        services._stops.append(db.close)
        db.execute(
            "create table documents (id bigint primary key, space text not null, body text, acl text[], "
            "modified_at timestamptz not null default now(), title text)"
        )
        rng = random.Random(5)
        texts = paragraphs(args.rows)
        with db.cursor() as cursor:
            values = [
                (i + 1, rng.choice(SPACES), texts[i], rng.choice(ACLS), f"Document {i + 1}")
                for i in range(args.rows)
            ]
            cursor.executemany(
                "insert into documents (id, space, body, acl, title) values (%s, %s, %s, %s, %s)", values
            )
        log(
            f"{args.rows} rows inserted; starting the worker, the index writer ({embedder_used}) and Kafka Connect"
        )
        asyncio.run(ensure_topics(settings))
        services.start_worker()
        services.start_index()
        started = time.monotonic()
        services.start_connect()
        log(
            f"the connector streams ({time.monotonic() - started:.1f} s); waiting for the snapshot in the index"
        )

        def view_complete() -> Any:
            view = asyncio.run(materialize(settings))
            return view if len(view.mappings) == args.rows and len(view.chunks) == args.rows else None

        view = until(view_complete, "the worker's view did not hold every row", SETTLE_SECONDS, services)
        import lancedb

        def index_rows() -> int:
            if not (services.index_dir / "chunks.lance").exists():
                return 0
            table = lancedb.connect(services.index_dir).open_table("chunks")
            return int(table.count_rows())

        until(lambda: index_rows() == len(view.chunks), "the index did not hold every chunk", SETTLE_SECONDS,
              services)  # fmt: skip
        snapshot_seconds = time.monotonic() - started
        log(
            f"snapshot indexed: {len(view.chunks)} chunks, {snapshot_seconds:.1f} s after the connector started"
        )
        chunk_of: dict[int, str] = {}
        for row_id in range(1, args.rows + 1):
            chunks = view.mappings[f"pg:documents:{row_id}"]["chunks"]
            assert len(chunks) == 1, f"row {row_id} has {len(chunks)} chunks"
            chunk_id = chunks[0]["chunk_id"]
            assert view.chunks[chunk_id]["source_count"] == 1, f"row {row_id}'s chunk has other sources"
            chunk_of[row_id] = chunk_id
        ids = list(range(1, args.rows + 1))
        rng.shuffle(ids)
        deleted, changed = ids[: args.deletes], ids[args.deletes : args.deletes + args.acl_changes]

        topics = TopicWatch(settings)
        topics.start()
        index = IndexWatch(services.index_dir, args.index_poll_ms / 1000)
        index.start()
        services._stops.append(index.close)
        services._stops.append(topics.close)
        time.sleep(2)  # let the watchers settle

        pids = services.pids()
        phases: dict[str, Any] = {}
        for phase in ("deletes", "acl"):
            count = len(deleted) if phase == "deletes" else len(changed)
            seconds = count / args.rate
            profiles = {}
            if args.profile:
                for name in ("worker", "index"):
                    spy = py_spy(services.processes[name].pid, root / f"{phase}-{name}.txt", int(seconds) + 3)
                    if spy is not None:
                        profiles[name] = spy
            cpu_before, load_before, wall_before = cpu_seconds(pids), loadavg(), time.monotonic()
            poll_cpu_before = index.cpu_seconds
            log(f"{phase}: {count} at {args.rate:g}/s (load average {load_before})")
            new_acl = {row_id: [f"user:u{row_id}", "group:acl-change"] for row_id in changed}

            def act(i: int, phase: str = phase, new_acl: dict[int, list[str]] = new_acl) -> None:
                if phase == "deletes":
                    row_id = deleted[i]
                    index.expect_gone(chunk_of[row_id])
                    db.execute("delete from documents where id = %s", (row_id,))
                else:
                    row_id = changed[i]
                    index.expect_acl(chunk_of[row_id], new_acl[row_id])
                    db.execute("update documents set acl = %s where id = %s", (new_acl[row_id], row_id))

            timing = schedule(count, args.rate, act)
            until(lambda: index.pending() == 0, f"{phase}: the index did not show every change", DRAIN_SECONDS,
                  services)  # fmt: skip
            time.sleep(1.0)
            wall = time.monotonic() - wall_before
            cpu_after, load_after = cpu_seconds(pids), loadavg()
            for spy in profiles.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    spy.wait(seconds + 30)
            if index.error is not None:
                raise index.error
            rows = deleted if phase == "deletes" else changed
            records = topics.snapshot()
            phases[phase] = measure(phase, rows, timing, records, chunk_of, index, new_acl)
            phases[phase].update(
                {
                    "load_before": load_before,
                    "load_after": load_after,
                    "wall_seconds": wall,
                    "schedule_lag": stats([t0 - due for due, t0 in timing]),
                    "cpu_seconds": {k: cpu_after[k] - cpu_before.get(k, 0.0) for k in cpu_after},
                    "index_poller_cpu_seconds": index.cpu_seconds - poll_cpu_before,
                }
            )
            if profiles:
                phases[phase]["profiles"] = {
                    name: summarize_profile(root / f"{phase}-{name}.txt") for name in profiles
                }
            show(phase, phases[phase])
        return {
            "embedder": embedder_used,
            "rows": args.rows,
            "deletes": len(deleted),
            "acl_changes": len(changed),
            "rate": args.rate,
            "poll_interval_ms": args.poll_interval_ms,
            "index_poll_ms": args.index_poll_ms,
            "snapshot_seconds": snapshot_seconds,
            "index_reads": index.reads,
            "index_read_ms_mean": 1000 * index.read_seconds / max(1, index.reads),
            "partitions": settings.partitions,
            "fetch_wait": settings.fetch_wait,
            "phases": phases,
            "connector_properties": services.connector_properties(),
        }
    finally:
        log("stopping everything")
        services.close()


def measure(
    phase: str,
    rows: list[int],
    timing: list[tuple[float, float]],
    records: list[tuple[str, Any, Any, float, float]],
    chunk_of: dict[int, str],
    index: IndexWatch,
    new_acl: dict[int, list[str]],
) -> dict[str, Any]:
    """Match each change with the records and the index reading that show it; return the latencies in seconds."""
    first: dict[tuple[str, Any], tuple[float, float]] = {}
    for kind, key, value, stamp, received in records:
        if kind == "feed":
            if value is None:
                continue
            op = value.get("op")
            if phase == "deletes" and op == "d":
                first.setdefault(("feed", key), (stamp, received))
            elif phase == "acl" and op == "u":
                first.setdefault(("feed", key, json.dumps(sorted(value["after"]["acl"]))), (stamp, received))
        elif kind == "mapping" and (value is None) == (phase == "deletes"):
            first.setdefault(("mapping", key), (stamp, received))
        elif kind == "chunk":
            if phase == "deletes" and value is None:
                first.setdefault(("chunk", key), (stamp, received))
            elif phase == "acl" and value is not None:
                first.setdefault(("chunk", key, json.dumps(sorted(value["acl"]))), (stamp, received))
    series: dict[str, list[float]] = {}
    missing: dict[str, int] = {}

    def add(name: str, value: float | None) -> None:
        if value is None:
            missing[name] = missing.get(name, 0) + 1
        else:
            series.setdefault(name, []).append(value)

    for row_id, (_, t0) in zip(rows, timing, strict=False):
        chunk_id = chunk_of[row_id]
        if phase == "deletes":
            feed = first.get(("feed", row_id))
            mapping = first.get(("mapping", f"pg:documents:{row_id}"))
            chunk = first.get(("chunk", chunk_id))
            done = index.gone.get(chunk_id)
        else:
            acl = json.dumps(sorted(new_acl[row_id]))
            feed = first.get(("feed", row_id, acl))
            mapping = first.get(("mapping", f"pg:documents:{row_id}"))
            chunk = first.get(("chunk", chunk_id, acl))
            done = index.acl.get(chunk_id)
        add("t0 -> feed record", feed and feed[0] - t0)
        add("t0 -> mapping record", mapping and mapping[0] - t0)
        add("t0 -> mapping record received", mapping and mapping[1] - t0)
        add("t0 -> chunk record", chunk and chunk[0] - t0)
        add("t0 -> chunk record received", chunk and chunk[1] - t0)
        add("t0 -> index", None if done is None else done - t0)
        # The stages on the index's path, each from the end of the one before. A delete reaches the index with
        # the mapping's tombstone (the writer's view then holds no source of the chunk), whichever comes first.
        add("connector (t0 -> feed record)", feed and feed[0] - t0)
        if phase == "deletes":
            add("worker (feed record -> mapping record)", feed and mapping and mapping[0] - feed[0])
            add("worker (mapping record -> chunk record)", mapping and chunk and chunk[0] - mapping[0])
            trigger = min((r[0] for r in (mapping, chunk) if r), default=None)
        else:
            add("worker (feed record -> mapping record)", feed and mapping and mapping[0] - feed[0])
            add("worker (feed record -> chunk record)", feed and chunk and chunk[0] - feed[0])
            trigger = chunk and chunk[0]
        add(
            "index writer (trigger record -> index)",
            None if trigger is None or done is None else done - trigger,
        )
        if feed is not None and trigger is not None:
            add("worker (feed record -> trigger record)", trigger - feed[0])
    return {
        "latency": {name: stats(values) for name, values in series.items()},
        "missing": missing,
        "samples": {name: [round(v, 4) for v in values] for name, values in series.items()},
    }


def summarize_profile(path: Path) -> dict[str, Any]:
    """The heaviest leaf frames and a few named parts of a py-spy raw profile."""
    if not path.exists():
        return {}
    total = 0
    own: dict[str, int] = {}
    parts = {
        "idle (epoll / select / sleep / waits)": (
            "select.epoll",
            "EpollSelector.select",
            "time.sleep",
            "wait (",
        ),
        "lancedb": ("lancedb", "lance"),
        "rocksdb / view": ("rocksdict", "live_view"),
        "engine handlers": ("Engine.handle",),
        "aiokafka": ("aiokafka",),
    }
    hits = dict.fromkeys(parts, 0)
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        leaf = stack.rsplit(";", 1)[-1]
        own[leaf] = own.get(leaf, 0) + count
        for part, markers in parts.items():
            if any(m in stack for m in markers):
                hits[part] += count
    if not total:
        return {}
    top = sorted(own.items(), key=lambda kv: -kv[1])[:12]
    return {"samples": total, "parts": {p: h / total for p, h in hits.items()},
            "top_frames": [[frame, n / total] for frame, n in top]}  # fmt: skip


def show(phase: str, result: dict[str, Any]) -> None:
    log(
        f"{phase}: load average {result['load_before']} -> {result['load_after']}; missing {result['missing']}"
    )
    for name, s in result["latency"].items():
        if s:
            print(f"    {name:50s} p50 {1000 * s['p50']:7.0f} ms  p90 {1000 * s['p90']:7.0f}  "
                  f"p99 {1000 * s['p99']:7.0f}  max {1000 * s['max']:7.0f}  (n={s['n']})")  # fmt: skip
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in result["cpu_seconds"].items())
    print(f"    CPU seconds: {cpu}; index poller {result['index_poller_cpu_seconds']:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=480, help="rows in the table (default %(default)s)")
    parser.add_argument("--deletes", type=int, default=240, help="rows deleted (default %(default)s)")
    parser.add_argument("--acl-changes", type=int, default=200, help="ACL changes (default %(default)s)")
    parser.add_argument("--rate", type=float, default=20.0, help="changes per second (default %(default)s)")
    parser.add_argument("--poll-interval-ms", type=int, default=POLL_INTERVAL_MS,
                        help="the connector's poll.interval.ms (Debezium's default: 500)")  # fmt: skip
    parser.add_argument("--index-poll-ms", type=float, default=20.0,
                        help="how often the benchmark reads the index table (default %(default)s ms)")  # fmt: skip
    parser.add_argument(
        "--embedder", default=None, help="STREAMDEDUP_EMBEDDER of the index writer (default: onnx)"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy on the worker and the index writer")
    parser.add_argument("--no-save", action="store_true", help="print the results; do not write them")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (its logs)")
    args = parser.parse_args()
    if args.deletes + args.acl_changes > args.rows:
        parser.error("--rows must be at least --deletes plus --acl-changes")
    command = "python -m benchmarks.cdc_latency" + "".join(
        f" {flag} {value}"
        for flag, value, default in (
            ("--rows", args.rows, 480), ("--deletes", args.deletes, 240), ("--acl-changes", args.acl_changes, 200),
            ("--rate", args.rate, 20.0), ("--poll-interval-ms", args.poll_interval_ms, POLL_INTERVAL_MS),
            ("--index-poll-ms", args.index_poll_ms, 20.0), ("--embedder", args.embedder, None),
        )
        if value != default
    ) + (" --profile" if args.profile else "")  # fmt: skip
    signal.signal(signal.SIGTERM, _terminate)
    run_info = {"machine": machine(), "command": command}
    root = Path(
        tempfile.mkdtemp(prefix="streamdedup-cdc-", dir="/var/tmp" if Path("/var/tmp").is_dir() else None)
    )
    root.chmod(0o755)  # PostgreSQL runs as another user when this runs as root: it must reach its directory
    began = time.monotonic()
    try:
        result = run(args, root)
    except (KeyboardInterrupt, Stop):
        log("interrupted; everything started was stopped")
        raise SystemExit(130) from None
    finally:
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    result["benchmark_seconds"] = time.monotonic() - began
    if not args.no_save:
        # The standard run is the section's; one with another poll interval is a comparison row beside it.
        name = (
            "cdc_latency"
            if args.poll_interval_ms == POLL_INTERVAL_MS
            else f"cdc_latency-poll{args.poll_interval_ms}"
        )
        print(save(name, result, run=run_info))


if __name__ == "__main__":
    main()
