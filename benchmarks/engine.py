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
"""

from __future__ import annotations

import argparse
import collections
import compileall
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import streamdedup
from benchmarks.common import (
    RESULTS,
    django_chunks,
    django_files,
    machine,
    rss_bytes,
    save,
    time_stages,
)
from benchmarks.sections.growth import checks_per_new_text
from benchmarks.signatures import _bulk
from streamdedup.core import kernels
from streamdedup.core.engine import Engine
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.core.normalize import normalize
from streamdedup.core.params import EngineParams
from streamdedup.core.shingles import shingles
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.parallel import ParallelRunner
from streamdedup.settings import Settings
from streamdedup.store.memory import MemoryStore
from streamdedup.store.rocksdb import RocksDBStore

BATCH = Settings.model_fields["batch_size"].default  # as `streamdedup run`
WINDOW = 50_000
# Fixed-work probes after each batch of the growth run: one per 256 documents, so that a window holds as many as
# with batches of 256 (with one per batch of 2,048, a window of three batches summed three short probes).
PROBES = max(1, BATCH // 256)


def _discard(outputs: list[Any]) -> None:
    del outputs


def _django_run(workdir: Path, repeat: int) -> dict[str, Any]:
    """The engine and the baselines ``repeat`` times each, interleaved; the best run of each counts."""
    files = django_files()
    events = []
    for i, path in enumerate(files):
        attrs = SourceAttrs(acl=("*",), modified_at=1_700_000_000_000_000 + i)
        events.append(
            UpsertEvent(
                source_id=path.as_posix(), version=1, attrs=attrs, text=path.read_text(encoding="utf-8"),
                collection="django",
            )
        )  # fmt: skip
    chunks = django_chunks()
    names = ("engine", "engine, 2 workers", "datasketch bulk", "signatures alone", "engine, Python kernels")
    runs: dict[str, list[float]] = {name: [] for name in names}
    for attempt in range(repeat):
        parallel = ParallelRunner(EngineParams(), workdir / f"django-parallel-{attempt}", workers=2)
        start = time.perf_counter()
        for i in range(0, len(events), BATCH):
            parallel.process(events[i : i + BATCH], _discard)
        runs["engine, 2 workers"].append(parallel.counters.positions / (time.perf_counter() - start))
        parallel.close()
        engine = Engine(EngineParams())
        store = RocksDBStore(workdir / f"django-{attempt}")
        runner = EmbeddedRunner(engine, store)
        start = time.perf_counter()
        for i in range(0, len(events), BATCH):
            runner.process(events[i : i + BATCH], _discard)
        seconds = time.perf_counter() - start
        counters = runner.counters
        disk = store.disk_bytes()
        store.close()
        runs["engine"].append(counters.positions / seconds)
        runs["engine, Python kernels"].append(
            _python_kernels_rate(events, workdir / f"django-python-{attempt}")
        )
        engine.scheme.signatures(chunks[:10])
        sig_start = time.perf_counter()
        for i in range(0, len(chunks), 4096):
            engine.scheme.signatures(chunks[i : i + 4096])
        runs["signatures alone"].append(len(chunks) / (time.perf_counter() - sig_start))
        bulk_start = time.perf_counter()
        for i in range(0, len(chunks), 4096):
            _bulk(chunks[i : i + 4096])
        runs["datasketch bulk"].append(len(chunks) / (time.perf_counter() - bulk_start))
        print(f"  Django run {attempt + 1}: engine {runs['engine'][-1]:,.0f} chunks/s, "
              f"2 workers {runs['engine, 2 workers'][-1]:,.0f} chunks/s, "
              f"datasketch bulk {runs['datasketch bulk'][-1]:,.0f} chunks/s, "
              f"Python kernels {runs['engine, Python kernels'][-1]:,.0f} chunks/s")  # fmt: skip
    rate, parallel_rate, bulk_rate, signature_rate, python_rate = (max(runs[name]) for name in names)
    print(f"Django: {len(files)} files, {counters.positions:,} chunks, best of {repeat}: {rate:,.0f} chunks/s; "
          f"2 workers {parallel_rate:,.0f} chunks/s ({parallel_rate / bulk_rate:.2f}); "
          f"datasketch bulk {bulk_rate:,.0f} chunks/s ({rate / bulk_rate:.2f}); "
          f"signatures alone {signature_rate:,.0f} chunks/s; "
          f"Python kernels {python_rate:,.0f} chunks/s ({python_rate / bulk_rate:.2f})")  # fmt: skip
    return {
        "files": len(files),
        "batch": BATCH,
        "chunks": counters.positions,
        "exact": counters.exact,
        "near": counters.near,
        "canonical": counters.chunks,
        "seconds": counters.positions / rate,
        "chunks_per_second": rate,
        "signature_chunks_per_second": signature_rate,
        "ratio_to_signatures": rate / signature_rate,
        "datasketch_bulk_chunks_per_second": bulk_rate,
        "ratio_to_datasketch_bulk": rate / bulk_rate,
        "workers_2_chunks_per_second": parallel_rate,
        "workers_2_ratio_to_datasketch_bulk": parallel_rate / bulk_rate,
        "python_kernels_chunks_per_second": python_rate,
        "python_kernels_ratio_to_datasketch_bulk": python_rate / bulk_rate,
        "python_kernels_ratio_to_compiled": python_rate / rate,
        "runs": runs,
        "disk_bytes": disk,
    }


def _python_kernels_rate(events: list[UpsertEvent], path: Path) -> float:
    """The engine in one process on its Python kernels (what an installation without compiled ones runs)."""
    kernels.use("python")
    try:
        engine = Engine(EngineParams())
        store = RocksDBStore(path)
        runner = EmbeddedRunner(engine, store)
        start = time.perf_counter()
        for i in range(0, len(events), BATCH):
            runner.process(events[i : i + BATCH], _discard)
        seconds = time.perf_counter() - start
        store.close()
    finally:
        kernels.use("compiled")
    return runner.counters.positions / seconds


_BULK_SCRIPT = """
import json, sys
from datasketch import MinHash
from streamdedup.core.normalize import normalize
from streamdedup.core.shingles import shingles
texts = [normalize(c) for line in open(sys.argv[1]) for c in json.loads(line)["chunks"]]
MinHash.bulk([[s.encode("utf-8") for s in shingles(t, 5)] for t in texts], num_perm=128, seed=1)
print(len(texts))
"""


def _cli_run(workdir: Path, positions: int = 10_000) -> dict[str, Any]:
    """``streamdedup run`` on a pre-chunked feed against a datasketch script on the same file, both launched."""
    chunks = django_chunks()[:positions]
    feed = workdir / "prechunked.jsonl"
    with feed.open("w") as out:
        for number, start in enumerate(range(0, len(chunks), 10)):
            event = {
                "schema": "streamdedup.document/v1", "op": "upsert", "source_id": f"doc-{number:05d}",
                "version": 1, "modified_at": "2024-05-01T00:00:00Z", "acl": ["*"],
                "chunks": chunks[start : start + 10],
            }  # fmt: skip
            out.write(json.dumps(event) + "\n")
    script = workdir / "bulk.py"
    script.write_text(_BULK_SCRIPT)
    # A user's runs after the first (or after pip installed a wheel) load this package's modules compiled, as they
    # load the baseline's datasketch and NumPy; where writing bytecode is turned off (PYTHONDONTWRITEBYTECODE),
    # every launch would compile them again, so compile them once, ahead of both.
    compileall.compile_dir(str(Path(streamdedup.__file__).parent), quiet=1)
    subprocess.run([sys.executable, str(script), str(feed)], check=True, capture_output=True)  # warm caches
    runs: dict[str, list[float]] = {"streamdedup run": [], "datasketch bulk script": []}
    for attempt in range(3):
        state = workdir / f"cli-state-{attempt}"
        commands = {
            "streamdedup run": [sys.executable, "-m", "streamdedup", "run", str(feed), "--state", str(state),
                                "--out", str(workdir / f"cli-out-{attempt}.jsonl")],
            "datasketch bulk script": [sys.executable, str(script), str(feed)],
        }  # fmt: skip
        for name, command in commands.items():
            began = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            runs[name].append(time.perf_counter() - began)
    ours, theirs = min(runs["streamdedup run"]), min(runs["datasketch bulk script"])
    print(f"pre-chunked feed of {len(chunks):,} positions, from launch: streamdedup run {ours:.2f}s, "
          f"datasketch bulk script {theirs:.2f}s ({theirs / ours:.2f})")  # fmt: skip
    return {
        "positions": len(chunks),
        "streamdedup_run_seconds": ours,
        "datasketch_script_seconds": theirs,
        "ratio_to_datasketch_bulk": theirs / ours,
    }


def _edit(rng: random.Random, text: str, count: int, vocabulary: list[str]) -> str:
    """Replace ``count`` words of ``text`` with words of the corpus.

    The new words hold no digits: a number would be a fact token, and the copy a fact conflict instead of a near
    copy (the growth run's near copies would then all become review flags and none would merge).
    """
    words = text.split()
    for _ in range(count):
        words[rng.randrange(len(words))] = rng.choice(vocabulary)
    return " ".join(words)


def _fixed_work(engine: Engine, pool: list[str]) -> Callable[[], float]:
    """Return a probe of the machine's speed: the seconds the same 100 positions take through ``engine`` on a
    new in-memory state. Nothing in it grows with the growth run's state, so its time tracks the machine: other
    work on it, and the run's own RocksDB flushes and compactions beside it (those do grow with the state)."""
    events = [
        UpsertEvent(
            source_id=f"fixed-{doc:04d}",
            version=1,
            attrs=SourceAttrs(acl=("*",), modified_at=1_700_000_000_000_000 + doc),
            chunks=tuple(pool[(doc * 10 + i) * 7 % len(pool)] for i in range(10)),
        )
        for doc in range(10)
    ]

    def probe() -> float:
        runner = EmbeddedRunner(engine, MemoryStore())
        start = time.perf_counter()
        runner.process(events, _discard)
        return time.perf_counter() - start

    return probe


def _counting_reads(store: RocksDBStore | MemoryStore, reads: dict[str, list[int]]) -> None:
    """Make ``store.get_many`` add the keys it is asked for and those it finds to ``reads[stage]``."""
    get_many = store.get_many

    def counted(stage: str, partition: int, keys: list[str]) -> list[bytes | None]:
        values = get_many(stage, partition, keys)
        tally = reads.setdefault(stage, [0, 0])
        tally[0] += len(keys)
        tally[1] += len(values) - values.count(None)
        return values

    store.get_many = counted  # type: ignore[method-assign]


def _growth_feed(pool: list[str], vocabulary: list[str], generator: str) -> Iterator[list[tuple[str, ...]]]:
    """Yield the growth run's batches: ``BATCH`` documents of ten chunks each, the same for the same arguments."""
    rng = random.Random(7)
    made: list[str] = []
    while True:
        batch = []
        for _ in range(BATCH):
            chunks = []
            for _ in range(10):
                roll = rng.random()
                if made and roll < 0.3:
                    text = rng.choice(made)
                elif made and roll < 0.4:
                    text = _edit(rng, rng.choice(made), 1, vocabulary)
                else:
                    a, b = rng.choice(pool).split(), rng.choice(pool).split()
                    if generator == "flat":
                        text = " ".join(
                            rng.choice(vocabulary) for _ in range(len(a) // 2 + len(b) - len(b) // 2)
                        )
                    else:
                        text = _edit(rng, " ".join(a[: len(a) // 2] + b[len(b) // 2 :]), 1, vocabulary)
                # A bounded reservoir of earlier chunks, so the generator's memory does not grow with the state.
                if len(made) < 50_000:
                    made.append(text)
                else:
                    made[rng.randrange(50_000)] = text
                chunks.append(text)
            batch.append(tuple(chunks))
        yield batch


def _growth_corpus() -> tuple[list[str], list[str]]:
    """The growth run's pool of real chunks (eight words or more) and the words its edits draw from."""
    pool = sorted({c for c in django_chunks() if len(c.split()) >= 8})
    return pool, sorted({w for c in pool for w in c.split() if w.isalpha()})


def _growth(workdir: Path, target: int, generator: str = "halves", state: str = "rocksdb") -> dict[str, Any]:
    pool, vocabulary = _growth_corpus()
    probe = _fixed_work(Engine(EngineParams()), pool)
    probe()  # its first run loads what later ones reuse
    fixed = 0.0
    engine = Engine(EngineParams())
    stage_seconds: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[type] = collections.Counter()
    time_stages(engine, stage_seconds, lambda stage, batch: kinds.update(map(type, batch)))
    store = RocksDBStore(workdir / f"growth-{generator}") if state == "rocksdb" else MemoryStore()
    reads: dict[str, list[int]] = {}
    _counting_reads(store, reads)
    runner = EmbeddedRunner(engine, store)
    windows = []
    done = 0
    doc = 0
    window_start, window_done = time.perf_counter(), 0
    # CPU time of the process's other threads (RocksDB's flushes and compactions) and of the thread that runs the
    # engine, per window; the fixed work's own CPU time is left out of the latter.
    cpu_start, thread_start = time.process_time(), time.thread_time()
    feed = _growth_feed(pool, vocabulary, generator)
    while done < target:
        events = []
        for chunks in next(feed):
            attrs = SourceAttrs(acl=("*",), modified_at=1_700_000_000_000_000 + doc)
            events.append(UpsertEvent(source_id=f"doc-{doc:08d}", version=1, attrs=attrs, chunks=chunks))
            doc += 1
        runner.process(events, _discard)
        done += 10 * len(events)
        paused, paused_thread = time.perf_counter(), time.thread_time()
        for _ in range(PROBES):
            fixed += probe()
        window_start += time.perf_counter() - paused  # the probe is not the window's work
        probe_cpu = time.thread_time() - paused_thread
        cpu_start += probe_cpu
        thread_start += probe_cpu
        if done - window_done >= WINDOW:
            now = time.perf_counter()
            rate = (done - window_done) / (now - window_start)
            thread_cpu = time.thread_time() - thread_start
            messages = {
                kind.__name__: count for kind, count in sorted(kinds.items(), key=lambda k: k[0].__name__)
            }
            windows.append(
                {"chunks": done, "chunks_per_second": rate, "rss_bytes": rss_bytes(),
                 "stage_seconds": dict(stage_seconds), "fixed_work_seconds": fixed,
                 "engine_thread_cpu_seconds": thread_cpu,
                 "background_cpu_seconds": time.process_time() - cpu_start - thread_cpu,
                 "messages": messages,
                 "reads": {stage: {"keys": keys, "found": found} for stage, (keys, found) in sorted(reads.items())}}
            )  # fmt: skip
            stage_seconds.clear()
            kinds.clear()
            reads.clear()
            print(
                f"  {done:>9,} chunks: {rate:8,.0f} chunks/s, RSS {rss_bytes() / 2**20:,.0f} MiB, "
                f"fixed work {fixed:.3f} s, CPU {thread_cpu:.1f} s engine, "
                f"{windows[-1]['background_cpu_seconds']:.1f} s background, "
                f"{checks_per_new_text(messages):.2f} candidate checks a new text"
            )
            window_start, window_done, fixed = time.perf_counter(), done, 0.0
            cpu_start, thread_start = time.process_time(), time.thread_time()
    counters = runner.counters
    disk = store.disk_bytes() if isinstance(store, RocksDBStore) else 0
    store.close()
    first, last = windows[0], windows[-1]
    return {
        "target": target,
        "generator": generator,
        "state": state,
        "windows": windows,
        "canonical": counters.chunks,
        "exact": counters.exact,
        "near": counters.near,
        "disk_bytes": disk,
        "throughput_ratio_end_to_start": last["chunks_per_second"] / first["chunks_per_second"],
        # The same ratio with each window's rate scaled to the machine's speed of the first window.
        "throughput_ratio_end_to_start_at_machine_speed": (
            (last["chunks_per_second"] / first["chunks_per_second"])
            * (last["fixed_work_seconds"] / first["fixed_work_seconds"])
        ),
        "rss_ratio_end_to_start": last["rss_bytes"] / first["rss_bytes"],
        "state_ratio_end_to_start": last["chunks"] / first["chunks"],
    }


def _datasketch_growth(target: int) -> dict[str, Any]:
    """The growth run's feed through the loop a datasketch user writes, timed per window like the engine's.

    Each batch's texts are normalized as the engine normalizes them; texts seen before are skipped (a set of
    them), the new ones get ``MinHash.bulk`` signatures of their shingles (the window's ``signatures`` seconds),
    each queries an in-memory ``MinHashLSH`` with the engine's bands and rows, has every candidate verified by the
    exact Jaccard of the two shingle sets (as the engine verifies every candidate), and is inserted. Nothing is
    persisted and no output is made.
    """
    from datasketch import MinHash, MinHashLSH

    params = EngineParams()
    pool, vocabulary = _growth_corpus()
    lsh = MinHashLSH(num_perm=params.num_perm, params=(params.bands, params.rows))
    shingle_sets: dict[str, frozenset[str]] = {}
    seconds: dict[str, float] = collections.defaultdict(float)
    windows: list[dict[str, Any]] = []
    done = window_done = new_texts = checks = above = 0
    window_start = time.perf_counter()
    feed = _growth_feed(pool, vocabulary, "halves")
    while done < target:
        batch = next(feed)
        texts = [normalize(text) for chunks in batch for text in chunks]
        new = [text for text in dict.fromkeys(texts) if text not in shingle_sets]
        start = time.perf_counter()
        sets = [frozenset(shingles(text, params.shingle_size)) for text in new]
        signatures = MinHash.bulk(
            [[s.encode("utf-8") for s in shingle_set] for shingle_set in sets],
            num_perm=params.num_perm,
            seed=params.seed,
        )
        seconds["signatures"] += time.perf_counter() - start
        for text, mine, signature in zip(new, sets, signatures, strict=True):
            start = time.perf_counter()
            candidates = lsh.query(signature)
            verified = time.perf_counter()
            for other in candidates:
                theirs = shingle_sets[other]
                above += len(mine & theirs) / len(mine | theirs) >= params.threshold
            checks += len(candidates)
            inserted = time.perf_counter()
            lsh.insert(text, signature, check_duplication=False)
            shingle_sets[text] = mine
            seconds["lsh"] += verified - start + time.perf_counter() - inserted
            seconds["verification"] += inserted - verified
        new_texts += len(new)
        done += len(texts)
        if done - window_done >= WINDOW:
            now = time.perf_counter()
            windows.append(
                {"chunks": done, "chunks_per_second": (done - window_done) / (now - window_start),
                 "seconds": dict(seconds), "checks_per_new_text": checks / max(new_texts, 1),
                 "checks_above_threshold": above}
            )  # fmt: skip
            print(
                f"  datasketch loop {done:>9,} chunks: {windows[-1]['chunks_per_second']:8,.0f} chunks/s "
                f"(signatures {seconds['signatures']:.2f} s, LSH {seconds['lsh']:.2f} s, verification "
                f"{seconds['verification']:.2f} s), {windows[-1]['checks_per_new_text']:.2f} candidate checks a "
                "new text"
            )
            seconds.clear()
            window_start, window_done, new_texts, checks, above = time.perf_counter(), done, 0, 0, 0
    first, last = windows[0], windows[-1]
    return {
        "target": target,
        "windows": windows,
        "throughput_ratio_end_to_start": last["chunks_per_second"] / first["chunks_per_second"],
    }


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
