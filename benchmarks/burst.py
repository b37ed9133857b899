"""A burst on a running worker: 400 documents of 20 chunks produced at once, against ``streamdedup run`` on them.

    python -m benchmarks.burst        # on the benchmark broker (started unless one answers), a few minutes

The worker runs and is healthy in a stable group before the first produce; its time is from the first produce to
the last record it wrote (output, stage or changelog record), once the group has committed every message. ``run``
reads the same events from a JSONL file, from launch to exit; the embedded engine's time in this process is
reported beside it. Each runs ``--repeats`` times, interleaved, and the best of each counts: the ratio of the
worker's seconds to ``run``'s is the figure (target: at most 2).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import save
from benchmarks.measurement import _written
from benchmarks.workers import _wait_idle, _Workers
from benchmarks.workload import BROKER, PARTITIONS, _events, _produce, start_broker, stop_broker
from streamdedup.drivers.kafka.admin import ensure_topics
from streamdedup.drivers.kafka.topics import TopicNames
from streamdedup.settings import Settings

DOCUMENTS = 400
CHUNKS_PER_DOCUMENT = 20
TARGET = 2.0


def burst_events(prefix: str) -> list[bytes]:
    """Return the burst's upserts: ``DOCUMENTS`` documents of ``CHUNKS_PER_DOCUMENT`` Django chunks each."""
    return _events(prefix, DOCUMENTS, CHUNKS_PER_DOCUMENT, seed=7)


def worker_burst(root: Path) -> dict[str, Any]:
    """Produce the burst at once to one running, healthy worker; return its seconds to the last record written."""
    prefix = f"bench-burst-{uuid.uuid4().hex[:6]}."
    settings = Settings(broker=BROKER, topic_prefix=prefix, partitions=PARTITIONS)
    asyncio.run(ensure_topics(settings))
    group = _Workers(settings, 1, root / prefix)
    values = burst_events(prefix)
    try:
        group.wait_stable(settings)
        wall, perf = time.time(), time.perf_counter()
        start = asyncio.run(_produce(settings, TopicNames(prefix).documents, values))
        wall_start = wall + (start - perf)
        idle = _wait_idle(settings, group)
    finally:
        group.stop()
    _, last_write = _written(settings)
    seconds = last_write - wall_start
    print(f"worker: the burst in {seconds:.2f} s ({idle - start:.2f} s until committed)", flush=True)
    return {"seconds": seconds, "seconds_until_committed": idle - start}


def run_burst(root: Path) -> dict[str, Any]:
    """``streamdedup run`` on the burst's events, from launch to exit, into a new state."""
    where = root / f"run-{uuid.uuid4().hex[:6]}"
    where.mkdir(parents=True)
    events = where / "events.jsonl"
    events.write_bytes(b"\n".join(burst_events("bench-burst.")) + b"\n")
    command = [sys.executable, "-m", "streamdedup.cli", "run", str(events), "--state", str(where / "state"),
               "--out", str(where / "outputs.jsonl")]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    print(f"streamdedup run: the burst in {seconds:.2f} s from launch", flush=True)
    return {"seconds": seconds}


def measure(root: Path, repeats: int) -> dict[str, Any]:
    """Interleaved runs of both; the best of each, and their ratio."""
    workers, runs = [], []
    for _ in range(repeats):
        workers.append(worker_burst(root))
        runs.append(run_burst(root))
    worker = min(workers, key=lambda r: r["seconds"])
    run = min(runs, key=lambda r: r["seconds"])
    ratio = worker["seconds"] / run["seconds"]
    print(
        f"burst: worker {worker['seconds']:.2f} s, run {run['seconds']:.2f} s: ratio {ratio:.2f} (target {TARGET})"
    )
    return {
        "documents": DOCUMENTS,
        "chunks_per_document": CHUNKS_PER_DOCUMENT,
        "worker": worker,
        "run": run,
        "worker_runs": workers,
        "run_runs": runs,
        "ratio_worker_to_run": ratio,
        "target": TARGET,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs of each (default %(default)s)")
    args = parser.parse_args()
    started = start_broker()
    root = Path(tempfile.mkdtemp(prefix="streamdedup-burst-"))
    try:
        result = measure(root, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if started:
            stop_broker()
    save("burst", {"command": f"python -m benchmarks.burst --repeats {args.repeats}", **result})


if __name__ == "__main__":
    main()
