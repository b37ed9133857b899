"""Popularity: the cost of one more copy of a text must not grow with the copies it already has.

    python -m benchmarks.popularity              # 100,000 sources
    python -m benchmarks.popularity --sources 20000

Each source is one document of two chunks: one passage that every source shares, and one text of its own (long
enough for near matching). Sources arrive newest first in the canonical policy's order (each later one has a
newer ``modified_at``), so the shared chunk's canonical source moves with every batch: the worst case for its
record. The embedded runner (RocksDB state, batches of 2,048 documents, the default) takes them in windows of
10,000 sources; the throughput of the last window is compared with the first's, and every ``canonical-chunks``
record written is measured.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.common import save
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.settings import Settings
from streamdedup.store.rocksdb import RocksDBStore

BATCH = Settings.model_fields["batch_size"].default  # as `streamdedup run`
WINDOW = 10_000
SHARED = (
    "To reset your password open the sign-in page and choose forgot password then enter the email address of "
    "your account and follow the link we send you to choose a new password for every workspace you belong to"
)


def _events(count: int) -> list[UpsertEvent]:
    rng = random.Random(11)
    words = [f"term{i}" for i in range(5_000)]
    events = []
    for i in range(count):
        own = " ".join(rng.choice(words) for _ in range(30))
        attrs = SourceAttrs(acl=(f"team-{i % 50}",), modified_at=1_700_000_000_000_000 + i * 1_000_000)
        events.append(UpsertEvent(source_id=f"page-{i:06d}", version=1, attrs=attrs, chunks=(SHARED, own)))
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sources", type=int, default=100_000)
    args = parser.parse_args()
    events = _events(args.sources)
    engine = Engine(EngineParams())
    workdir = Path(tempfile.mkdtemp(prefix="streamdedup-popularity-"))
    largest = {"bytes": 0}
    encode = msgspec.json.encode

    def sink(outputs: list[Output]) -> None:
        for output in outputs:
            if output.topic == "canonical-chunks" and output.value is not None:
                largest["bytes"] = max(largest["bytes"], len(encode(output.value)))

    windows: list[dict[str, Any]] = []
    try:
        store = RocksDBStore(workdir / "state")
        runner = EmbeddedRunner(engine, store)
        for start in range(0, len(events), WINDOW):
            began = time.perf_counter()
            window = events[start : start + WINDOW]
            for i in range(0, len(window), BATCH):
                runner.process(window[i : i + BATCH], sink)
            seconds = time.perf_counter() - began
            windows.append(
                {"sources": start + len(window), "seconds": seconds, "per_second": len(window) / seconds}
            )
            print(f"{start + len(window):>8,} sources: {len(window) / seconds:,.0f} sources/s; "
                  f"largest chunk record so far {largest['bytes']:,} bytes")  # fmt: skip
        shared_count = runner.counters.positions - runner.counters.chunks
        store.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratio = windows[-1]["per_second"] / windows[0]["per_second"]
    print(f"last window / first: {ratio:.2f}; largest canonical-chunks record {largest['bytes']:,} bytes")
    save(
        "popularity",
        {
            "sources": args.sources,
            "window": WINDOW,
            "batch": BATCH,
            "windows": windows,
            "ratio_last_to_first": ratio,
            "largest_chunk_record_bytes": largest["bytes"],
            "copies_of_shared_chunk_beyond_one": shared_count,
        },
    )


if __name__ == "__main__":
    main()
