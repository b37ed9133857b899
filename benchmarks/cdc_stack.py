"""The services of the deletion-propagation benchmark (benchmarks/cdc_latency.py): broker, PostgreSQL, Kafka
Connect with Debezium, a worker and the index writer, started on free loopback ports and stopped at the end."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

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


def terminate(*_: Any) -> None:
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
        """Write the example's feeds file (deploy/connect/feeds.toml) with the benchmark's topic."""
        example = (REPO / "deploy" / "connect" / "feeds.toml").read_text()
        topic = 'topic = "streamdedup_pg.public.documents"'
        assert topic in example, "deploy/connect/feeds.toml no longer names the example's topic"
        self.feeds.write_text(example.replace(topic, f'topic = "{FEED_TOPIC}"'))

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
