"""The development broker script: a restart keeps topics and records, nothing creates topics on its own."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from tests.integration.conftest import BROKER_SCRIPT, RESTART_PORTS, free_pair

pytestmark = pytest.mark.integration


def _script(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BROKER_SCRIPT), command], env=env, capture_output=True, text=True, timeout=300, check=False
    )


async def _create_and_write(servers: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("kept", 3, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=servers, request_timeout_ms=5000)
    await producer.start()
    try:
        await producer.send_and_wait("kept", b"still here", key=b"k")
        with pytest.raises(KafkaError):  # no topic appears because a producer writes to it
            await producer.send_and_wait("never-created", b"lost")
    finally:
        await producer.stop()


async def _read(servers: str) -> tuple[list[bytes], set[str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await admin.start()
    try:
        topics = {t for t in await admin.list_topics() if not t.startswith("__")}
    finally:
        await admin.close()
    if "kept" not in topics:
        return [], topics
    consumer = AIOKafkaConsumer("kept", bootstrap_servers=servers, auto_offset_reset="earliest")
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=10_000)
        return [record.value for records in batches.values() for record in records], topics
    finally:
        await consumer.stop()


def test_a_restarted_broker_keeps_its_data_until_wiped(tmp_path: Path):
    port = free_pair(RESTART_PORTS)
    servers = f"127.0.0.1:{port}"
    env = {**os.environ, "KAFKA_PORT": str(port), "KAFKA_HOME_DIR": str(tmp_path / "kafka")}
    try:
        assert _script("start", env).returncode == 0
        asyncio.run(_create_and_write(servers))
        assert _script("stop", {**env, "KAFKA_KEEP_DATA": "1"}).returncode == 0
        started = _script("start", env)
        assert started.returncode == 0 and "keeping the existing storage" in started.stderr
        values, topics = asyncio.run(_read(servers))
        assert values == [b"still here"] and topics == {"kept"}
        assert _script("wipe", env).returncode == 0 and not (tmp_path / "kafka").exists()
        assert _script("start", env).returncode == 0
        assert asyncio.run(_read(servers)) == ([], set())
    finally:
        _script("wipe", env)
