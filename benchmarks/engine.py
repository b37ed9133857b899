"""The embedded engine: chunks/s end to end with RocksDB state, against signature-only throughput, and at scale.

    python -m benchmarks.engine            # the Django corpus, then 1,000,000 chunks
    python -m benchmarks.engine --scale 300000

1. The docs of five Django releases (3.2 to 5.2, from their PyPI sdists) as text upserts, run through the
   embedded runner with RocksDB state (batches of 2,048 events, the default), in one process and with
   ``--workers 2`` (the engine's partitions in two worker processes). The baselines, on the same normalized chunks:
   datasketch's ``MinHash.bulk`` computing their signatures alone (what a user's own datasketch loop costs
   before any LSH query), and the engine's compiled signature kernel alone; and the engine in one process on its
   Python kernels (``STREAMDEDUP_KERNELS=python``: what an installation without the compiled ones runs). Each
   runs ``--repeat`` times (3), interleaved, each engine run on a new state, and the best run of each counts (the
   shared machine's speed drifts, and one run of each compared rates measured minutes apart).
2. As a user runs it: a pre-chunked JSONL feed of about 10,000 positions (documents of ten Django chunks),
   ``streamdedup run`` from launch to exit, against a script that reads the same file and calls ``MinHash.bulk``
   (its launch included too), both with their modules' bytecode compiled, as after a first run.
3. Growth: documents of ten chunks made from the real chunks with seeded edits, until the state holds the
   requested number of chunk positions: 30% exact copies of an earlier generated chunk, 10% near copies (one word
   changed) of an earlier one (drawn from a reservoir of 50,000), 60% new text (the first half of one real
   chunk and the second half of another, one word changed). Throughput and resident memory are recorded for
   every 50,000 chunks. After every batch the run also times a fixed piece of work of the same kind on a new
   in-memory state (the same 100 positions through the engine, once per 256 documents of the batch), outside the
   window's time: summed over a window, the machine's speed during that window, which on a shared machine drifts
   during a run of several minutes. The throughput ratio is reported as measured and at the machine's speed of
   each window (scaled by how much longer the fixed work took than in the first window). Each window also records
   the CPU time of the thread that runs the engine and of the process's other threads (RocksDB's flushes and
   compactions), what the engine did (new texts joining their bands, candidate checks, as messages counted by
   kind) and its state reads per stage (keys asked, keys found).
4. ``--generator flat``: the growth run with the new 60% made of corpus words drawn at random instead of two real
   half-chunks. With the halves, a new text shares a half with more earlier texts as the state grows, so its LSH
   candidates (each checked against its record) grow with the state; drawn words leave the candidates per new text
   flat, and what still grows is what the state's size costs. The target counts the default generator; this one
   tells the two apart. Saved as ``growth_flat`` beside a full run's results (it needs one; the next full run
   replaces them whole).
5. ``--memory-growth``: the growth run with each generator and the state in memory (the engine's dictionary
   store, no RocksDB): how much of the slowdown is the engine's own work on a larger state rather than storage.
   Saved as ``growth_memory`` beside a full run's results, like ``growth_flat``.
6. ``--datasketch-growth``: the growth run's feed (the default generator) through the loop a datasketch user
   writes: new texts' ``MinHash.bulk`` signatures, an in-memory ``MinHashLSH`` query with the engine's bands and
   rows, each candidate verified by the exact Jaccard of the shingle sets, insert; nothing persisted. Its last
   window against its first says how much harder the feed itself gets as the state grows. Saved as
   ``growth_datasketch`` beside a full run's results, like ``growth_flat``.

The Django runs are in :mod:`benchmarks.django_runs`, the run as a user runs it in :mod:`benchmarks.cli_run`,
and the growth runs in :mod:`benchmarks.growth_runs`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.cli_run import _cli_run
from benchmarks.common import RESULTS, machine, save
from benchmarks.django_runs import _django_run
from benchmarks.growth_runs import _datasketch_growth, _growth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=1_000_000, help="chunk positions for the growth run")
    parser.add_argument(
        "--repeat", type=int, default=3, help="interleaved runs of the Django engine and baselines"
    )
    parser.add_argument(
        "--generator",
        choices=("halves", "flat"),
        default="halves",
        help="the growth run's new texts: two real half-chunks (the target's), or drawn words (flat candidates); "
        "'flat' runs the growth alone and adds its result to the saved one",
    )
    parser.add_argument(
        "--memory-growth",
        action="store_true",
        help="run the growth with the state in memory (a dictionary, no RocksDB), with both generators, and add "
        "them to the saved results",
    )
    parser.add_argument(
        "--datasketch-growth",
        action="store_true",
        help="run the growth feed through a datasketch loop (MinHash.bulk, MinHashLSH, every candidate verified) "
        "and add its windows to the saved results",
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="streamdedup-bench-"))
    try:
        added = [
            option
            for option, given in (
                ("--generator flat", args.generator == "flat"),
                ("--memory-growth", args.memory_growth),
                ("--datasketch-growth", args.datasketch_growth),
            )
            if given
        ]
        if added:
            saved_path = RESULTS / "engine.json"
            if not saved_path.is_file():
                option = " ".join(added)
                parser.error(
                    f"{option} adds to a full run's results: run 'python -m benchmarks.engine' first"
                )
            saved = json.loads(saved_path.read_text(encoding="utf-8"))
            # Each added run records its own machine and command; the file keeps the full run's.
            this_run = {
                "machine": machine(),
                "command": " ".join(["python -m benchmarks.engine", *sys.argv[1:]]),
            }
            if args.generator == "flat":
                saved["growth_flat"] = {**_growth(workdir, args.scale, "flat"), **this_run}
            if args.memory_growth:
                saved["growth_memory"] = {
                    generator: {**_growth(workdir, args.scale, generator, "memory"), **this_run}
                    for generator in ("halves", "flat")
                }
            if args.datasketch_growth:
                saved["growth_datasketch"] = {**_datasketch_growth(args.scale), **this_run}
            run = {key: saved.pop(key) for key in ("machine", "command")}
            save("engine", saved, run=run)
            return
        django = _django_run(workdir, args.repeat)
        cli = _cli_run(workdir)
        growth = _growth(workdir, args.scale)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    save("engine", {"django": django, "cli": cli, "growth": growth})


if __name__ == "__main__":
    main()
