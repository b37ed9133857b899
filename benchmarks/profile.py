"""Where the embedded engine's time goes: wall time per stage handler, per commit, and per message kind.

    python -m benchmarks.profile

Runs the Django 4.2 docs through the embedded runner with RocksDB state and records, for every stage, the time
its handler took and the messages it handled; the rest of a batch is commits (RocksDB write batches) and the
driver (routing, output encoding, counters). For a call tree, run the same with pyinstrument:
``pyinstrument -m streamdedup.cli run <docs> --state <dir> --out <file>``.
"""

from __future__ import annotations

import collections
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import django_files, save, time_stages
from streamdedup.core.engine import Engine
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.store.base import Transaction
from streamdedup.store.rocksdb import RocksDBStore


def main() -> None:
    files = django_files(("4.2.30",))
    events = [
        UpsertEvent(
            source_id=path.as_posix(), version=1, attrs=SourceAttrs(acl=("*",), modified_at=1_700_000_000_000_000 + i),
            text=path.read_text(encoding="utf-8"),
        )
        for i, path in enumerate(files)
    ]  # fmt: skip
    seconds: collections.Counter[str] = collections.Counter()
    messages: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    engine = Engine(EngineParams())
    commit = Transaction.commit

    def count(stage: str, batch: Any) -> None:
        messages[stage] += len(batch)
        kinds.update(type(m).__name__ for m in batch)

    time_stages(engine, seconds, count)

    def timed_commit(self: Transaction) -> None:
        start = time.perf_counter()
        commit(self)
        seconds["commit"] += time.perf_counter() - start

    Transaction.commit = timed_commit  # type: ignore[method-assign]
    workdir = Path(tempfile.mkdtemp(prefix="streamdedup-profile-"))
    try:
        store = RocksDBStore(workdir / "state")
        runner = EmbeddedRunner(engine, store)
        start = time.perf_counter()
        for i in range(0, len(events), 256):
            runner.process(events[i : i + 256], lambda outputs: None)
        total = time.perf_counter() - start
        chunks, unique = runner.counters.positions, runner.counters.chunks
        store.close()
    finally:
        Transaction.commit = commit  # type: ignore[method-assign]
        shutil.rmtree(workdir, ignore_errors=True)
    seconds["driver and the rest"] = total - sum(seconds.values())
    for name, value in seconds.most_common():
        print(f"{name:22s} {value:6.2f}s {value / total:6.1%}  {messages.get(name, 0):>9,} messages")
    save(
        "profile",
        {
            "files": len(files),
            "chunks": chunks,
            "canonical": unique,
            "total_seconds": total,
            "seconds": dict(seconds),
            "messages": dict(messages),
            "message_kinds": dict(kinds),
        },
    )


if __name__ == "__main__":
    main()
