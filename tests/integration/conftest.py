"""One real Kafka broker per test session, started with the project's own script on a test port."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import Deployment

REPO = Path(__file__).resolve().parents[2]

#: A team's own Faust app, run by ``faust -A`` in a subprocess with its settings in the environment: not a module
#: for the doctest collector to import.
collect_ignore = ["faust_user_app.py"]
BROKER_SCRIPT = REPO / "deploy" / "kafka" / "broker.sh"

#: Brokers that tests start listen below the ephemeral port range (32768 and up on Linux): a client that keeps
#: reconnecting to a stopped broker on an ephemeral port can be given that very port as its own and connect to
#: itself, and a broker started later then finds its port taken.
SESSION_PORTS = 24092
RESTART_PORTS = 23092

#: A broker a developer keeps running (``kafka://127.0.0.1:9092``); the tests then use it and never stop it.
REUSE = os.environ.get("STREAMDEDUP_TEST_KAFKA", "")


def free_pair(start: int) -> int:
    """Return a port that is free, with the next one (the controller's) free too."""
    for port in range(start, start + 200, 2):
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise AssertionError(f"no two free ports from {start}")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start a broker of the session's own and stop it at the end (or use the one ``STREAMDEDUP_TEST_KAFKA`` names).

    A broker found already answering on some port is never borrowed: whoever runs it may stop it halfway through.
    """
    if REUSE:
        yield REUSE
        return
    port = free_pair(SESSION_PORTS)
    env = {**os.environ, "KAFKA_PORT": str(port), "KAFKA_HOME_DIR": str(tmp_path_factory.mktemp("kafka"))}
    result = subprocess.run(
        [str(BROKER_SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert result.returncode == 0, f"the test broker did not start:\n{result.stderr}"
    try:
        yield f"kafka://127.0.0.1:{port}"
    finally:
        subprocess.run([str(BROKER_SCRIPT), "stop"], env=env, capture_output=True, timeout=120, check=True)


@pytest.fixture
def deployment(kafka_broker: str, tmp_path: Path) -> Iterator[Deployment]:
    """A fresh topic prefix on the broker; its workers are stopped after the test."""
    made = Deployment(kafka_broker, tmp_path)
    yield made
    made.stop()
