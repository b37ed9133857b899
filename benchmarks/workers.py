"""The worker processes a streaming run starts on the broker, waited on until stable and healthy, then until idle."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.measurement import _cpu_seconds, scrape
from benchmarks.workload import REPO
from streamdedup.core.messages import STAGES
from streamdedup.drivers.kafka.admin import consumer_lag
from streamdedup.drivers.kafka.topics import TopicNames
from streamdedup.settings import Settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Workers:
    def __init__(
        self,
        settings: Settings,
        count: int,
        root: Path,
        env: dict[str, str] | None = None,
        loglevel: str = "warning",
    ) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.ports: list[int] = []
        self.data_dirs: list[Path] = []
        base = {**os.environ, "STREAMDEDUP_BROKER": settings.broker, "STREAMDEDUP_TOPIC_PREFIX": settings.topic_prefix,
                "STREAMDEDUP_PARTITIONS": str(settings.partitions), "PYTHONUNBUFFERED": "1", **(env or {})}  # fmt: skip
        root.mkdir(parents=True, exist_ok=True)
        self.started = time.perf_counter()
        for i in range(count):
            port = _free_port()
            self.ports.append(port)
            self.data_dirs.append(root / f"w{i}")
            log = (root / f"worker{i}.log").open("ab")
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "streamdedup.cli", "worker", "--data-dir", str(root / f"w{i}"),
                     "--loglevel", loglevel],
                    env={**base, "STREAMDEDUP_WEB_PORT": str(port)}, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                )
            )  # fmt: skip

    def health(self) -> list[dict[str, Any] | None]:
        """Return each worker's ``/health`` body when it answers 200 (ready), else None."""
        out: list[dict[str, Any] | None] = []
        for port in self.ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                    out.append(json.loads(response.read()))
            except (OSError, ValueError):  # refused, 503 while recovering (HTTPError), or not JSON yet
                out.append(None)
        return out

    def wait_ready(self, timeout: float = 180, assigned: int | None = None) -> float:
        """Wait until every worker answers /health with 200 (and, given ``assigned``, they hold that many stage
        partitions between them); return the time it happened (``time.perf_counter``)."""
        deadline = time.monotonic() + timeout
        while True:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a worker exited with {process.returncode} before it was ready")
            found = self.health()
            if all(found) and (assigned is None or sum(h["assigned"] for h in found if h) == assigned):
                return time.perf_counter()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the workers did not become ready: {found}")
            time.sleep(0.1)

    def wait_stable(self, settings: Settings, timeout: float = 180) -> None:
        """Wait until the consumer group is stable with every worker in it and every worker is healthy (its
        partition stores recovered) holding every stage partition, so no rebalance falls
        in a timed run."""
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.errors import GroupCoordinatorNotAvailableError

        async def state() -> tuple[str, int]:
            admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
            await admin.start()
            try:
                (response,) = await admin.describe_consumer_groups([TopicNames(settings.topic_prefix).group])
                group = response.to_object()["groups"][0]
                return group["state"], len(group["members"])
            finally:
                await admin.close()

        def current() -> tuple[str, int]:
            try:
                return asyncio.run(state())
            except GroupCoordinatorNotAvailableError:  # a new broker elects the coordinator on first use
                return "no coordinator yet", 0

        deadline = time.monotonic() + timeout
        while current() != ("Stable", len(self.processes)):
            if time.monotonic() > deadline:
                raise TimeoutError("the worker group did not settle")
            time.sleep(0.5)
        time.sleep(0.5)  # the assignment reaches the members just after the group turns stable
        self.wait_ready(timeout, assigned=len(STAGES) * settings.partitions)

    def cpu_seconds(self) -> list[float]:
        return [_cpu_seconds(p.pid) for p in self.processes]

    def scrape(self) -> list[dict[str, Any]]:
        return [scrape(port) for port in self.ports]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def _wait_idle(settings: Settings, group: _Workers | None = None, timeout: float = 900) -> float:
    """Wait until the worker group has committed every documents and stage message; return when (perf_counter).

    Raise if a worker of ``group`` exits first (its log is in the run's directory)."""
    names = TopicNames(settings.topic_prefix)
    topics = [names.documents, *(names.stage(s) for s in STAGES)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if asyncio.run(consumer_lag(settings, topics)) == 0:
            return time.perf_counter()
        for process in group.processes if group is not None else ():
            if process.poll() is not None:
                raise RuntimeError(
                    f"a worker exited with {process.returncode} before the input was processed"
                )
        time.sleep(0.25)
    raise TimeoutError("the workers did not catch up")
