"""Running workers against the test broker, and waiting for them with bounded waits."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer

from streamdedup.cli.topic_io import materialize
from streamdedup.contract.codec import encode_event
from streamdedup.core.messages import STAGES
from streamdedup.core.model import InputEvent
from streamdedup.core.output_view import View
from streamdedup.drivers.kafka.admin import consumer_lag, ensure_topics, read_to_end
from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES, TopicNames
from streamdedup.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


T = TypeVar("T")


def until(
    condition: Callable[[], T], what: str, seconds: float = 120.0, details: Callable[[], str] = str
) -> T:
    """Return ``condition()`` once it is truthy, polling; fail saying ``what`` (and ``details()``) after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"{what} within {seconds} s\n{details()}")


class Worker:
    """A ``streamdedup worker`` process of a deployment."""

    #: Where the worker's pages are on its web server (``/health``, ``/metrics``).
    web_prefix = ""

    def __init__(
        self, deployment: Deployment, data_dir: Path, name: str, env: dict[str, str] | None = None
    ) -> None:
        self.deployment = deployment
        self.data_dir = data_dir
        self.name = name
        self.web_port = free_port()
        self.log = deployment.root / f"{name}.log"
        self.stopped = False
        env = {**os.environ, **deployment.env, **(env or {}), "STREAMDEDUP_WEB_PORT": str(self.web_port)}
        self._output = self.log.open("ab")
        self.process = subprocess.Popen(
            self.command(), env=env, stdout=self._output, stderr=subprocess.STDOUT, cwd=REPO
        )

    def command(self) -> list[str]:
        """Return the command line that runs the worker."""
        return [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "worker",
            "--data-dir",
            str(self.data_dir),
            "--loglevel",
            "info",
        ]

    def url(self, page: str) -> str:
        """Return the address of one of the worker's pages (``/health``, ``/metrics``)."""
        return f"http://127.0.0.1:{self.web_port}{self.web_prefix}{page}"

    def metrics(self) -> dict[str, float]:
        """Return the worker's Prometheus samples (name with labels -> value)."""
        import urllib.request

        with urllib.request.urlopen(self.url("/metrics"), timeout=5) as response:
            text = response.read().decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        return samples

    def stop(self, timeout: float = 40.0) -> None:
        """Stop the worker cleanly (SIGTERM), killing it if it does not finish in time."""
        self.stopped = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._output.close()

    def kill(self) -> None:
        """Kill the worker at once (SIGKILL), as a crash would."""
        self.stopped = True
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)
        self._output.close()

    def wait_for_exit(self, timeout: float = 180.0) -> int:
        """Wait until the worker process ends by itself; return its exit status."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker did not exit within {timeout} s:\n{self.tail()}") from None
        self.stopped = True
        self._output.close()
        return code

    def wait_for_log(self, text: str, timeout: float = 180.0) -> None:
        """Wait until the worker's log holds ``text``."""
        until(
            lambda: text in self.log.read_bytes().decode("utf-8", "replace"),
            f"the worker did not log {text!r}",
            timeout,
            self.tail,
        )

    def tail(self, lines: int = 40) -> str:
        """Return the end of the worker's log, for failure messages."""
        data = self.log.read_bytes().decode("utf-8", "replace").splitlines()
        return "\n".join(data[-lines:])


class Deployment:
    """One topic prefix on the test broker: its settings, its workers, and everything produced to it."""

    def __init__(self, broker: str, root: Path, *, partitions: int = 4) -> None:
        self.root = root
        self.prefix = f"it-{uuid.uuid4().hex[:10]}."
        self.env = {
            "STREAMDEDUP_BROKER": broker,
            "STREAMDEDUP_TOPIC_PREFIX": self.prefix,
            "STREAMDEDUP_PARTITIONS": str(partitions),
            "STREAMDEDUP_COMMIT_INTERVAL": "0.5",
            "PYTHONUNBUFFERED": "1",
        }
        self.settings = Settings(broker=broker, topic_prefix=self.prefix, partitions=partitions)
        self.names = TopicNames(self.prefix)
        self.events: list[InputEvent] = []
        self.workers: list[Worker] = []
        asyncio.run(ensure_topics(self.settings))

    def start_worker(
        self,
        data_dir: Path | None = None,
        name: str | None = None,
        env: dict[str, str] | None = None,
        kind: type[Worker] = Worker,
    ) -> Worker:
        """Start a worker with its own data directory (``env``: settings of this worker alone; ``kind``: how it
        runs, ``streamdedup worker`` unless told)."""
        name = name or f"worker{len(self.workers)}"
        worker = kind(self, data_dir or self.root / name, name, env)
        self.workers.append(worker)
        return worker

    def produce(self, events: Sequence[InputEvent]) -> None:
        """Send input events to the documents topic, keyed by source_id, and remember them."""
        self.produce_raw([(e.source_id.encode(), encode_event(e)) for e in events])
        self.events.extend(events)

    def produce_raw(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        """Send raw records to the documents topic."""

        async def send() -> None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.settings.bootstrap_servers,
                acks="all",
                max_request_size=MAX_MESSAGE_BYTES,
            )
            await producer.start()
            try:
                for key, value in records:
                    await producer.send_and_wait(self.names.documents, value, key=key)
            finally:
                await producer.stop()

        asyncio.run(send())

    def produce_stage(self, stage: str, partition: int, values: Iterable[bytes]) -> None:
        """Send raw batches to a partition of a stage topic, as a worker would."""

        async def send() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=self.settings.bootstrap_servers, acks="all")
            await producer.start()
            try:
                for value in values:
                    await producer.send_and_wait(self.names.stage(stage), value, partition=partition)
            finally:
                await producer.stop()

        asyncio.run(send())

    def review_keys(self) -> list[tuple[str, str]]:
        """Return the distinct (reason, key) pairs on the review topic, sorted."""

        async def read() -> list[tuple[str, str]]:
            found = set()
            async for _, _, _, key, value, _ in read_to_end(self.settings, [self.names.output("review")]):
                if key is not None and value is not None:
                    found.add((json.loads(value)["reason"], key.decode()))
            return sorted(found)

        return asyncio.run(read())

    def records(self, topic: str) -> list[tuple[str | None, bytes | None]]:
        """Return every record of a topic (``documents`` or an output's name) as (key, value) in order."""
        name = self.names.documents if topic == "documents" else self.names.output(topic)

        async def read() -> list[tuple[str | None, bytes | None]]:
            return [
                (key.decode() if key is not None else None, value)
                async for _, _, _, key, value, _ in read_to_end(self.settings, [name])
            ]

        return asyncio.run(read())

    def view(self) -> View:
        """Return the materialized view of the compacted output topics."""
        return asyncio.run(materialize(self.settings))

    def lag(self) -> int:
        """Return the messages of the input and stage topics not yet processed."""
        topics = [self.names.documents, *(self.names.stage(s) for s in STAGES)]
        return int(asyncio.run(consumer_lag(self.settings, topics)))

    def wait_until_idle(self, timeout: float = 90.0) -> None:
        """Wait until every input and stage message is processed and committed (twice in a row)."""
        deadline = time.monotonic() + timeout
        quiet = 0
        while time.monotonic() < deadline:
            for worker in self.workers:
                if not worker.stopped and worker.process.poll() is not None:
                    raise AssertionError(f"worker exited with {worker.process.returncode}:\n{worker.tail()}")
            quiet = quiet + 1 if self.lag() == 0 and self._started() else 0
            if quiet >= 2:
                return
            time.sleep(0.5)
        logs = "\n---\n".join(w.tail() for w in self.workers if not w.stopped)
        raise AssertionError(f"the workers did not catch up within {timeout} s (lag {self.lag()}):\n{logs}")

    def _started(self) -> bool:
        # A worker that has not joined the group yet has committed nothing, which can look like no lag at all
        # when nothing was produced; require every running worker to answer on its web port.
        import urllib.request

        for worker in self.workers:
            if worker.stopped or worker.process.poll() is not None:
                continue
            try:
                urllib.request.urlopen(worker.url("/health"), timeout=2).close()
            except OSError:
                return False
        return True

    def stop(self) -> None:
        """Stop every worker still running."""
        for worker in self.workers:
            worker.stop()


def dlq_records(deployment: Deployment) -> list[dict[str, Any]]:
    """Return the records of the deployment's dlq topic with their headers."""
    from streamdedup.drivers.kafka.admin import read_to_end

    async def read() -> list[dict[str, Any]]:
        out = []
        async for _, _, _, key, value, headers in read_to_end(
            deployment.settings, [deployment.names.output("dlq")]
        ):
            out.append({"key": key, "value": value, "headers": {k: v.decode() for k, v in headers}})
        return out

    return asyncio.run(read())


def as_json(view: View) -> Any:
    return json.loads(view.compacted(with_revision=False))
