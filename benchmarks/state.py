"""State: bytes on disk per unique chunk, restart time with local state, rebuild time from the changelogs.

    python -m benchmarks.state

1. The embedded engine over the docs of five Django releases, RocksDB compacted at the end: bytes on disk per
   unique chunk (canonical or near member), and how many of those bytes are chunk text kept in the records
   (original and normalized text of contents and sources, uncompressed); "without the stored text" subtracts them;
   and the uncompressed bytes of keys and records per state family, to show where the bytes are.
2. The worker on a real broker (started on 127.0.0.1:29092 unless one answers) after the Django 4.2 docs:
   a restart with its RocksDB directory kept, and one with the directory wiped (state rebuilt from the changelog
   topics), each timed from process start until it has processed one new event.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.common import django_files, save
from benchmarks.streaming import BROKER, PARTITIONS, PORT, REPO, _answers, _produce, _wait_idle, _Workers
from streamdedup.codec import encode_event
from streamdedup.core.engine import Engine
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.core.params import EngineParams
from streamdedup.core.state import ContentRecord, SourceRecord
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.kafka.admin import ensure_topics
from streamdedup.drivers.kafka.topics import TopicNames
from streamdedup.settings import Settings
from streamdedup.store.rocksdb import RocksDBStore


def _events(versions: tuple[str, ...] | None = None) -> list[UpsertEvent]:
    files = django_files() if versions is None else django_files(versions)
    return [
        UpsertEvent(
            source_id=path.as_posix(), version=1, attrs=SourceAttrs(acl=("*",), modified_at=1_700_000_000_000_000 + i),
            text=path.read_text(encoding="utf-8"), collection="django",
        )
        for i, path in enumerate(files)
    ]  # fmt: skip


def _disk(workdir: Path) -> dict[str, Any]:
    engine = Engine(EngineParams())
    store = RocksDBStore(workdir / "state")
    runner = EmbeddedRunner(engine, store)
    events = _events()
    for i in range(0, len(events), 256):
        runner.process(events[i : i + 256], lambda outputs: None)
    unique = 0
    text_bytes = 0
    for partition, key in store.keys("content"):
        record = msgspec.msgpack.decode(store.get("content", partition, key) or b"", type=ContentRecord)
        if record.alive:
            unique += 1
            text_bytes += len(record.text.encode()) + len(record.norm.encode())
            text_bytes += sum(len(t.encode()) for ref in record.refs.values() for t in ref.texts)
    for partition, key in store.keys("source"):
        if key.startswith("\x00"):
            continue
        record = msgspec.msgpack.decode(store.get("source", partition, key) or b"", type=SourceRecord)
        text_bytes += sum(len(t.encode()) for t in record.texts) + sum(len(n.encode()) for n in record.norms)
    families = {}
    for family in ("source", "content", "band", "collection", "view"):
        records = logical = 0
        for partition, key in store.keys(family):
            records += 1
            logical += len(key.encode()) + len(store.get(family, partition, key) or b"")
        families[family] = {"records": records, "bytes": logical}
    # Flush and compact every family (metadata included, so no write-ahead log is left): the size is the state's,
    # not a matter of timing.
    store._db.compact_range(None, None)
    for handle in store._families.values():
        handle.compact_range(None, None)
    disk = store.disk_bytes()
    store.close()
    start = time.perf_counter()
    reopened = RocksDBStore(workdir / "state")
    EmbeddedRunner(engine, reopened).process([_events(("5.2.19",))[0]], lambda outputs: None)
    reopen_seconds = time.perf_counter() - start
    reopened.close()
    result = {
        "unique_chunks": unique,
        "disk_bytes": disk,
        "bytes_per_unique_chunk": disk / unique,
        "text_bytes": text_bytes,
        "bytes_per_unique_chunk_without_text": max(0, disk - text_bytes) / unique,
        "embedded_restart_seconds": reopen_seconds,
        "families": families,
    }
    print(result)
    return result


def _kafka(root: Path) -> dict[str, Any]:
    prefix = f"bench-state-{uuid.uuid4().hex[:6]}."
    settings = Settings(broker=BROKER, topic_prefix=prefix, partitions=PARTITIONS)
    asyncio.run(ensure_topics(settings))
    documents = TopicNames(prefix).documents
    values = [encode_event(e) for e in _events(("4.2.30",))]
    data = root / "logs" / "w0"  # the data directory _Workers gives its first worker

    def run_until_processed(extra: list[bytes]) -> float:
        start = time.perf_counter()
        group = _Workers(settings, 1, root / "logs")
        try:
            asyncio.run(_produce(settings, documents, extra))
            _wait_idle(settings)
        finally:
            elapsed = time.perf_counter() - start
            group.stop()
        return elapsed

    (root / "logs").mkdir(parents=True, exist_ok=True)
    first = run_until_processed(values)
    probe = [encode_event(e) for e in _events(("5.2.19",))]
    kept = run_until_processed(probe[:1])
    shutil.rmtree(data, ignore_errors=True)
    wiped = run_until_processed(probe[1:2])
    result = {"documents": len(values), "first_run_seconds": first, "restart_kept_seconds": kept,
              "restart_rebuilt_seconds": wiped}  # fmt: skip
    print(result)
    return result


def main() -> None:
    script = REPO / "deploy" / "kafka" / "broker.sh"
    env = {**os.environ, "KAFKA_PORT": str(PORT)}
    started = False
    root = Path(tempfile.mkdtemp(prefix="streamdedup-state-"))
    try:
        disk = _disk(root)
        if not _answers(PORT):
            subprocess.run([str(script), "start"], env=env, check=True)
            started = True
        kafka = _kafka(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if started:
            subprocess.run([str(script), "stop"], env=env, check=False)
    save("state", {"embedded": disk, "kafka": kafka})


if __name__ == "__main__":
    main()
