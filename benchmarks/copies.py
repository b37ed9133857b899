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
"""

from __future__ import annotations

import argparse
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
from benchmarks.common import django_docs, save
from benchmarks.output_volume import measure

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
    }
    print(
        f"Django docs folder: {files:,} files, {input_bytes:,} bytes; medians of {args.rounds} rounds: "
        f"streamdedup run {medians[NAMES[0]]:.2f}s ({cpu_medians[NAMES[0]]:.2f} CPU s), seeds' loop "
        f"{medians[NAMES[1]]:.2f}s ({cpu_medians[NAMES[1]]:.2f} CPU s); loop / run {ratio:.2f} (target >= {TARGET})"
    )
    print(f"output {volume['bytes']:,} bytes ({volume['bytes'] / input_bytes:.2f} x input): " + ", ".join(
        f"{topic} {found['records']:,} records {found['bytes']:,} bytes" for topic, found in volume["topics"].items()
    ))  # fmt: skip
    save("copies", result)


if __name__ == "__main__":
    main()
