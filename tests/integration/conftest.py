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
BROKER_SCRIPT = REPO / "deploy" / "kafka" / "broker.sh"
PORT = int(os.environ.get("STREAMDEDUP_TEST_KAFKA_PORT", "39092"))


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start the test broker (unless one already answers on the test port) and stop it at the end."""
    env = {**os.environ, "KAFKA_PORT": str(PORT)}
    started = False
    if not _answers(PORT):
        env["KAFKA_HOME_DIR"] = str(tmp_path_factory.mktemp("kafka"))
        result = subprocess.run(
            [str(BROKER_SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=900, check=False
        )
        assert result.returncode == 0, f"the test broker did not start:\n{result.stderr}"
        started = True
    yield f"kafka://127.0.0.1:{PORT}"
    if started:
        subprocess.run([str(BROKER_SCRIPT), "stop"], env=env, capture_output=True, timeout=120, check=True)


@pytest.fixture
def deployment(kafka_broker: str, tmp_path: Path) -> Iterator[Deployment]:
    """A fresh topic prefix on the broker; its workers are stopped after the test."""
    made = Deployment(kafka_broker, tmp_path)
    yield made
    made.stop()
