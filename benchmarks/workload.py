"""The streaming benchmarks' workload: the broker they run on, a feed of pre-chunked Django documents, its producer."""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import subprocess
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

from benchmarks.common import django_chunks
from streamdedup.contract.codec import encode_event
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES
from streamdedup.settings import Settings

REPO = Path(__file__).resolve().parents[1]
PORT = int(os.environ.get("STREAMDEDUP_BENCH_KAFKA_PORT", "29092"))
BROKER = f"kafka://127.0.0.1:{PORT}"
DOCUMENTS = 6000
CHUNKS_PER_DOCUMENT = 5
PARTITIONS = 4


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _events(
    prefix: str, documents: int = DOCUMENTS, chunks_per_document: int = CHUNKS_PER_DOCUMENT, seed: int = 3
) -> list[bytes]:
    """Return ``documents`` upserts of ``chunks_per_document`` Django chunks each, drawn with ``seed``."""
    rng = random.Random(seed)
    pool = [c for c in django_chunks() if len(c.split()) >= 8]
    out = []
    for i in range(documents):
        chunks = tuple(rng.choice(pool) for _ in range(chunks_per_document))
        attrs = SourceAttrs(acl=("*",), modified_at=1_700_000_000_000_000 + i)
        out.append(
            encode_event(UpsertEvent(source_id=f"{prefix}doc-{i:06d}", version=1, attrs=attrs, chunks=chunks))
        )
    return out


async def _produce(settings: Settings, topic: str, values: list[bytes], rate: float | None = None) -> float:
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, max_request_size=MAX_MESSAGE_BYTES, linger_ms=5
    )
    await producer.start()
    start = time.perf_counter()
    try:
        pending = []
        for i, value in enumerate(values):
            if rate is not None:
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            key = json.loads(value)["source_id"].encode()
            pending.append(await producer.send(topic, value, key=key))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return start


def _broker_env(port: int, home: Path | None, keep_data: bool = False) -> dict[str, str]:
    env = {**os.environ, "KAFKA_PORT": str(port)}
    if home is not None:
        env["KAFKA_HOME_DIR"] = str(home)
    if keep_data:
        env["KAFKA_KEEP_DATA"] = "1"
    return env


def start_broker(port: int = PORT, home: Path | None = None) -> bool:
    """Start the project's broker on ``port`` (in ``home``, default the script's) unless one answers there; return
    whether this started it."""
    if _answers(port):
        return False
    script = REPO / "deploy" / "kafka" / "broker.sh"
    subprocess.run([str(script), "start"], env=_broker_env(port, home), check=True)
    return True


def stop_broker(port: int = PORT, home: Path | None = None, *, keep_data: bool = False) -> None:
    """Stop the broker :func:`start_broker` started (with ``keep_data``, its topics stay for the next start)."""
    script = REPO / "deploy" / "kafka" / "broker.sh"
    subprocess.run([str(script), "stop"], env=_broker_env(port, home, keep_data), check=False)
