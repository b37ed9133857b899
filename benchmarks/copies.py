"""A feed where most chunks are copies: ``streamdedup run`` from launch beside the seed articles' datasketch loop.

    python -m benchmarks.copies
    python -m benchmarks.copies --rounds 3

The feed is the folder of the docs of five Django releases (3.2 to 5.2, from their PyPI sdists): most of its
chunk positions repeat a text of an earlier release. Each round runs, as a user runs them, each in a new process
timed from launch to exit (start included), in an order that alternates from round to round:

1. ``streamdedup run FOLDER --state NEW --out FILE``, on a new state and a new output file;
2. the seed articles' loop (:mod:`benchmarks.seeds_loop`): the articles' normalization, SHA-256, texts seen
   before skipped, ``MinHash.bulk`` on the distinct ones, ``MinHashLSH`` query and insert; nothing kept.

The ratio is the loop's seconds over the run's, medians of the rounds (at least 1.0 is the target). Every round's
output file must be the first round's, byte for byte. The first round's output file is measured by
:mod:`benchmarks.output_volume`: bytes by topic, rewrites and audit kinds, beside the folder's input bytes (the
target: output bytes at most input bytes).

After the rounds, what ``streamdedup run`` runs is run once more in this process (the same settings, feed, store,
sink and batches), with each part timed: reading the folder, each stage's handler, the state commits, the output
file and closing the state; its output file must be the command's.
"""

from __future__ import annotations

import argparse
import collections
import compileall
import hashlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import streamdedup
from benchmarks.common import django_docs, save, time_stages
from benchmarks.output_volume import measure
from streamdedup.cli.run import input_feed
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.feeds import run_feed
from streamdedup.drivers.folder import FolderFeed
from streamdedup.drivers.jsonl import opened_state
from streamdedup.settings import Settings
from streamdedup.store.base import Transaction

LOOP = Path(__file__).with_name("seeds_loop.py")
TARGET = 1.0  # the loop's seconds over the run's, at least
NAMES = ("streamdedup run", "seeds' datasketch loop")


def _launch(command: list[str]) -> tuple[float, float, str]:
    """Run ``command`` in a new process; return its wall and CPU seconds and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        while block := data.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _parts(folder: Path, workdir: Path) -> tuple[dict[str, float], str]:
    """Run what ``streamdedup run`` runs, in this process, timing its parts; return their seconds and the digest of
    the output file (which must be the command's)."""
    settings = Settings()
    seconds: dict[str, float] = {}
    stages: collections.Counter[str] = collections.Counter()
    commit = Transaction.commit

    def timed_commit(self: Transaction) -> None:
        began = time.perf_counter()
        commit(self)
        seconds["state commits"] = seconds.get("state commits", 0.0) + time.perf_counter() - began

    out = workdir / "parts.jsonl"
    began = time.perf_counter()
    Transaction.commit = timed_commit  # type: ignore[method-assign]
    try:
        with opened_state(settings, workdir / "parts-state", str(out)) as (runner, sink):
            assert isinstance(runner, EmbeddedRunner)
            time_stages(runner.engine, stages)
            feed = input_feed(settings, folder, None)
            assert isinstance(feed, FolderFeed)
            feed.load(runner.store.get_meta(feed.meta_key))
            opened = feed.open

            def timed_open() -> Any:
                start = time.perf_counter()
                try:
                    return opened()
                finally:
                    seconds["reading the folder (sync)"] = time.perf_counter() - start

            def timed_sink(outputs: list[Any]) -> Any:
                start = time.perf_counter()
                try:
                    return sink(outputs)
                finally:
                    seconds["output file (encode, write, fsync)"] = (
                        seconds.get("output file (encode, write, fsync)", 0.0) + time.perf_counter() - start
                    )

            feed.open = timed_open  # type: ignore[method-assign]
            run_feed(
                runner, feed, timed_sink, batch_size=settings.batch_size, batch_chars=settings.batch_chars
            )
            closing = time.perf_counter()
        seconds["closing the state (flush)"] = time.perf_counter() - closing
    finally:
        Transaction.commit = commit  # type: ignore[method-assign]
    total = time.perf_counter() - began
    seconds.update({f"stage {stage}": value for stage, value in stages.most_common()})
    seconds["the rest (conversion, routing, counters)"] = total - sum(seconds.values())
    seconds["total"] = total
    digest = _digest(out)
    out.unlink()
    shutil.rmtree(workdir / "parts-state")
    return seconds, digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of both runs; the medians count")
    parser.add_argument("--keep", type=Path, help="copy the first round's output file here")
    args = parser.parse_args()
    folder = django_docs()
    input_bytes = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    files = sum(1 for path in folder.rglob("*") if path.is_file())
    # As after a user's first run: the package's modules load compiled, as the loop's datasketch and NumPy do.
    compileall.compile_dir(str(Path(streamdedup.__file__).parent), quiet=1)
    subprocess.run([sys.executable, str(LOOP), str(folder)], check=True, capture_output=True)  # warm caches
    wall: dict[str, list[float]] = {name: [] for name in NAMES}
    cpu: dict[str, list[float]] = {name: [] for name in NAMES}
    workdir = Path(tempfile.mkdtemp(prefix="streamdedup-copies-"))
    digests: list[str] = []
    loop_counts = ""
    volume: dict[str, Any] = {}
    try:
        for number in range(args.rounds):
            out = workdir / f"out-{number}.jsonl"
            commands = {
                NAMES[0]: [sys.executable, "-m", "streamdedup", "run", str(folder),
                           "--state", str(workdir / f"state-{number}"), "--out", str(out)],
                NAMES[1]: [sys.executable, str(LOOP), str(folder)],
            }  # fmt: skip
            for name in NAMES if number % 2 == 0 else NAMES[::-1]:
                seconds, cpu_seconds, printed = _launch(commands[name])
                wall[name].append(seconds)
                cpu[name].append(cpu_seconds)
                if name == NAMES[1]:
                    loop_counts = printed
            digests.append(_digest(out))
            if number == 0:
                volume = measure(out)
                if args.keep is not None:
                    shutil.copyfile(out, args.keep)
            if digests[-1] != digests[0]:
                raise SystemExit(f"round {number + 1}: the output file differs from the first round's")
            print(f"  round {number + 1}: " + ", ".join(
                f"{name} {wall[name][-1]:.2f}s ({cpu[name][-1]:.2f} CPU s)" for name in NAMES
            ) + f"; loop / run {wall[NAMES[1]][-1] / wall[NAMES[0]][-1]:.2f}")  # fmt: skip
            out.unlink()
            shutil.rmtree(workdir / f"state-{number}")
        parts, parts_digest = _parts(folder, workdir)
        if parts_digest != digests[0]:
            raise SystemExit("the run in this process wrote another output file than the command")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    medians = {name: statistics.median(wall[name]) for name in NAMES}
    cpu_medians = {name: statistics.median(cpu[name]) for name in NAMES}
    positions, distinct, near = (int(n) for n in loop_counts.split())
    ratio = medians[NAMES[1]] / medians[NAMES[0]]
    result = {
        "files": files,
        "input_bytes": input_bytes,
        "rounds": args.rounds,
        "seconds": medians,
        "cpu_seconds": cpu_medians,
        "runs": {"wall": wall, "cpu": cpu},
        "ratio": ratio,
        "ratios": [loop / run for run, loop in zip(wall[NAMES[0]], wall[NAMES[1]], strict=True)],
        "cpu_ratio": cpu_medians[NAMES[1]] / cpu_medians[NAMES[0]],
        "target": TARGET,
        "output_digest": digests[0],
        "loop": {"positions": positions, "distinct": distinct, "near_candidates": near},
        "output": volume,
        "parts_seconds": parts,
    }
    print(
        f"Django docs folder: {files:,} files, {input_bytes:,} bytes; medians of {args.rounds} rounds: "
        f"streamdedup run {medians[NAMES[0]]:.2f}s ({cpu_medians[NAMES[0]]:.2f} CPU s), seeds' loop "
        f"{medians[NAMES[1]]:.2f}s ({cpu_medians[NAMES[1]]:.2f} CPU s); loop / run {ratio:.2f} (target >= {TARGET})"
    )
    print(f"output {volume['bytes']:,} bytes ({volume['bytes'] / input_bytes:.2f} x input): " + ", ".join(
        f"{topic} {found['records']:,} records {found['bytes']:,} bytes" for topic, found in volume["topics"].items()
    ))  # fmt: skip
    print(
        "where the run's time goes, in this process: " + ", ".join(f"{k} {v:.2f}s" for k, v in parts.items())
    )
    save("copies", result)


if __name__ == "__main__":
    main()
