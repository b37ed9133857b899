"""Rebuilding a state under a new threshold from its retained record, against the original build, both from launch.

    python -m benchmarks.rebuild
    python -m benchmarks.rebuild --rounds 3

The feed is the engine benchmark's: the docs of five Django releases (3.2 to 5.2, from their PyPI sdists) as text
upserts, one per file, written once as a JSONL file of the event contract. Each round runs three commands as a
user runs them (a new process, timed from launch to exit, outputs appended to a file, RocksDB state):

1. the original build, under the default settings: ``streamdedup run FEED --state OLD``;
2. the rebuild under a new threshold, from that round's OLD and nothing else:
   ``streamdedup --set threshold=0.85 run --state NEW --rebuild-from OLD``;
3. for reference, the same threshold from the feed: ``streamdedup --set threshold=0.85 run FEED --state REF``.

The order of the three rotates from round to round (the rebuild always after its OLD), and the median of each
counts: the shared machine's speed drifts. Besides wall time, each run's CPU seconds (user and system) are
recorded, and the CPU seconds the machine's other processes used while it ran. Every round checks that the
rebuild's materialized view (the compacted topics, revisions left out) and counters are the reference's, and stops
(keeping that round's outputs) if they are not.

The retained record is measured on the first round's OLD: every retained entry of its source stage, read as the
rebuild reads them, in key and value bytes, per live position (the run's counters) and per live source; the
uncompressed key and value bytes of each family, and the record's share of the source family's and of all of them;
the state directory's size on disk as the run left it; and, both compacted to the last level (zstd), the whole
state and the record alone (written to a new store with the state's options).
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import rocksdict

import streamdedup
from benchmarks.common import DJANGO_VERSIONS, django_docs, save
from benchmarks.measurement import machine_busy
from streamdedup.contract.codec import encode_event
from streamdedup.core.messages import Output
from streamdedup.core.model import DecisionEvent, DeleteEvent, SourceAttrs, UpsertEvent
from streamdedup.core.output_view import View
from streamdedup.core.state import Retained
from streamdedup.drivers.embedded import COUNTERS_KEY, RunCounters
from streamdedup.drivers.rebuild import _retained_entries
from streamdedup.store.base import FAMILIES
from streamdedup.store.rocksdb import RocksDBStore

NEW_THRESHOLD = "0.85"
TARGET = 1.5  # the rebuild's time over the original build's, at most
RUNS = ("original", "rebuild", "reference")
# The order of the runs in each round, in turn; the rebuild always after the original it reads.
ORDERS = (
    ("original", "rebuild", "reference"),
    ("reference", "original", "rebuild"),
    ("original", "reference", "rebuild"),
)


def _feed(path: Path) -> int:
    """Write the Django docs as a JSONL feed of text upserts (one a second apart); return the number of files."""
    root = django_docs()
    count = 0
    with path.open("wb") as out:
        for version in DJANGO_VERSIONS:
            for file in sorted((root / version).rglob("*.txt")):
                attrs = SourceAttrs(acl=("*",), modified_at=(1_700_000_000 + count) * 1_000_000)
                event = UpsertEvent(
                    source_id=file.relative_to(root).as_posix(), version=1, attrs=attrs,
                    text=file.read_text(encoding="utf-8"), collection="django",
                )  # fmt: skip
                out.write(encode_event(event) + b"\n")
                count += 1
    return count


def _launch(args: list[str]) -> tuple[float, float, float]:
    """Run ``streamdedup ARGS`` in a new process; return its wall and CPU seconds, and the CPU seconds the machine's
    other processes used meanwhile (on a shared machine, what the wall time also waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = machine_busy()
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "streamdedup", *args], check=False, capture_output=True, text=True
    )
    wall = time.perf_counter() - began
    busy = machine_busy() - busy
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(
            f"streamdedup {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, max(0.0, busy - cpu)


def _view_digest(out: Path) -> str:
    """The SHA-256 of the materialized view of an output file (compacted topics, revisions left out)."""
    view = View()
    with out.open(encoding="utf-8") as lines:
        for line in lines:
            view.apply(Output(**json.loads(line)))
    return hashlib.sha256(view.compacted(with_revision=False)).hexdigest()


def _counters(state: Path) -> RunCounters:
    store = RocksDBStore(state, records=None)
    try:
        return RunCounters.from_json(store.get_meta(COUNTERS_KEY))
    finally:
        store.close()


def _directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _family_bytes(state: Path) -> dict[str, int]:
    """The uncompressed key and value bytes of each family of a state."""
    store = RocksDBStore(state, records=None)
    found = {}
    try:
        for family in FAMILIES:
            total = 0
            cursor = store._family(family).iter()
            cursor.seek_to_first()
            while cursor.valid():
                total += len(cursor.key()) + len(cursor.value())
                cursor.next()
            found[family] = total
    finally:
        store.close()
    return found


def _compact(store: RocksDBStore) -> None:
    """Compact every family of ``store`` down to its last level (metadata included: no write-ahead log is left)."""
    options = rocksdict.CompactOptions()
    options.set_bottommost_level_compaction(rocksdict.BottommostLevelCompaction.force())
    store._db.compact_range(None, None, options)
    for handle in store._families.values():
        handle.compact_range(None, None, options)


def _record(state: Path, positions: int, scratch: Path) -> dict[str, Any]:
    """What the retained record of ``state`` holds and weighs."""
    began = time.perf_counter()
    entries = _retained_entries(state)
    read_seconds = time.perf_counter() - began
    kinds = {"live sources": [0, 0], "deleted sources": [0, 0], "decisions": [0, 0]}
    for key, value in entries:
        event = msgspec.msgpack.decode(value, type=Retained).event
        size = len(key.encode("utf-8")) + len(value)
        kind = (
            "live sources" if isinstance(event, UpsertEvent)
            else "deleted sources" if isinstance(event, DeleteEvent)
            else "decisions" if isinstance(event, DecisionEvent)
            else None
        )  # fmt: skip
        if kind is None:
            raise SystemExit(f"a retained entry holds no event: {key!r}")
        kinds[kind][0] += 1
        kinds[kind][1] += size
    total = sum(size for _, size in kinds.values())
    text_bytes = sum(
        len((e.text or "").encode("utf-8")) + sum(len(c.encode("utf-8")) for c in e.chunks or ())
        for _, value in entries
        if isinstance(e := msgspec.msgpack.decode(value, type=Retained).event, UpsertEvent)
    )
    families = _family_bytes(state)
    state_disk = _directory_bytes(state)
    # Compacted to the last level (zstd, as the state's options compress it), the whole state and the record alone
    # (written to a new store with the same options) compare on disk without depending on when RocksDB compacts.
    compacted = RocksDBStore(state, records=None)
    try:
        _compact(compacted)
        state_compacted = compacted.disk_bytes()
    finally:
        compacted.close()
    alone = RocksDBStore(scratch / "record-alone", records=None)
    try:
        alone.commit({("source", 0): dict(entries)}, {})
        _compact(alone)
        alone_disk = alone.disk_bytes()
    finally:
        alone.close()
    live = kinds["live sources"][0]
    return {
        "entries": len(entries),
        "kinds": {kind: {"entries": n, "bytes": size} for kind, (n, size) in kinds.items()},
        "bytes": total,
        "text_bytes": text_bytes,
        "bytes_per_live_position": total / positions,
        "bytes_per_live_source": kinds["live sources"][1] / live if live else 0.0,
        "read_seconds": read_seconds,
        "state_disk_bytes": state_disk,
        "family_bytes": families,
        "share_of_source_family": total / families["source"],
        "share_of_all_families": total / sum(families.values()),
        "state_compacted_disk_bytes": state_compacted,
        "alone_disk_bytes": alone_disk,
        "alone_share_of_compacted_state": alone_disk / state_compacted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the three runs; the medians count")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="streamdedup-rebuild-"))
    try:
        feed = workdir / "django.jsonl"
        files = _feed(feed)
        # As after a user's first run: the package's modules load compiled (cf. benchmarks.cli_run).
        compileall.compile_dir(str(Path(streamdedup.__file__).parent), quiet=1)
        wall: dict[str, list[float]] = {name: [] for name in RUNS}
        cpu: dict[str, list[float]] = {name: [] for name in RUNS}
        others: dict[str, list[float]] = {name: [] for name in RUNS}
        record: dict[str, Any] = {}
        counters = RunCounters()
        for number in range(args.rounds):
            here = workdir / f"round-{number}"
            here.mkdir()
            new = ("--set", f"threshold={NEW_THRESHOLD}", "run")
            commands = {
                "original": ["run", str(feed), "--state", str(here / "old"), "--out", str(here / "old.jsonl")],
                "rebuild": [*new, "--state", str(here / "new"), "--rebuild-from", str(here / "old"),
                            "--out", str(here / "new.jsonl")],
                "reference": [*new, str(feed), "--state", str(here / "ref"), "--out", str(here / "ref.jsonl")],
            }  # fmt: skip
            for name in ORDERS[number % len(ORDERS)]:
                seconds, cpu_seconds, others_seconds = _launch(commands[name])
                wall[name].append(seconds)
                cpu[name].append(cpu_seconds)
                others[name].append(others_seconds)
            rebuilt, reference = _view_digest(here / "new.jsonl"), _view_digest(here / "ref.jsonl")
            rebuilt_counters, reference_counters = _counters(here / "new"), _counters(here / "ref")
            if rebuilt != reference or rebuilt_counters != reference_counters:
                kept = shutil.move(here, tempfile.mkdtemp(prefix="streamdedup-rebuild-differs-"))
                raise SystemExit(
                    f"round {number + 1}: the rebuild differs from the run of the feed under the same threshold: "
                    f"views {rebuilt} and {reference}, counters {rebuilt_counters} and {reference_counters}; "
                    f"outputs and states kept in {kept}"
                )
            if number == 0:
                counters = _counters(here / "old")
                record = _record(here / "old", counters.positions, workdir)
                record["rebuilt"] = {"canonical": rebuilt_counters.chunks, "near": rebuilt_counters.near}
            each = ", ".join(
                f"{name} {wall[name][-1]:.2f}s ({cpu[name][-1]:.2f} CPU s, others {others[name][-1]:.2f})"
                for name in RUNS
            )
            print(f"  round {number + 1}: {each}; views equal")
            shutil.rmtree(here)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    medians = {name: statistics.median(wall[name]) for name in RUNS}
    cpu_medians = {name: statistics.median(cpu[name]) for name in RUNS}
    result = {
        "files": files,
        "positions": counters.positions,
        "canonical": counters.chunks,
        "near": counters.near,
        "threshold": float(NEW_THRESHOLD),
        "rounds": args.rounds,
        "seconds": medians,
        "cpu_seconds": cpu_medians,
        "others_cpu_seconds": {name: statistics.median(others[name]) for name in RUNS},
        "runs": {"wall": wall, "cpu": cpu, "others_cpu": others},
        "rebuild_to_original": medians["rebuild"] / medians["original"],
        "rebuild_to_reference": medians["rebuild"] / medians["reference"],
        "cpu_rebuild_to_original": cpu_medians["rebuild"] / cpu_medians["original"],
        "cpu_rebuild_to_reference": cpu_medians["rebuild"] / cpu_medians["reference"],
        "target": TARGET,
        "record": record,
    }
    print(
        f"Django feed: {files:,} files, {counters.positions:,} live positions; medians of {args.rounds}: "
        f"original {medians['original']:.2f}s, rebuild {medians['rebuild']:.2f}s, reference "
        f"{medians['reference']:.2f}s; rebuild / original {result['rebuild_to_original']:.2f} (target <= {TARGET}), "
        f"rebuild / reference {result['rebuild_to_reference']:.2f}; CPU: rebuild / original "
        f"{result['cpu_rebuild_to_original']:.2f}, rebuild / reference {result['cpu_rebuild_to_reference']:.2f}"
    )
    print(
        f"retained record: {record['entries']:,} entries, {record['bytes']:,} bytes "
        f"({record['bytes_per_live_position']:,.0f} per live position, {record['bytes_per_live_source']:,.0f} per "
        f"live source); read in {record['read_seconds']:.2f}s; state on disk {record['state_disk_bytes']:,} bytes "
        f"({record['state_compacted_disk_bytes']:,} compacted), the record alone compacted "
        f"{record['alone_disk_bytes']:,} ({record['alone_share_of_compacted_state']:.1%}); "
        f"{record['share_of_source_family']:.1%} of the source family's and {record['share_of_all_families']:.1%} "
        f"of all families' uncompressed bytes"
    )
    save("rebuild", result)


if __name__ == "__main__":
    main()
