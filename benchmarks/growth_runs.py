"""The growth runs: the engine as its state grows window by window, and the same feed through a datasketch loop."""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import django_chunks, rss_bytes, time_stages
from benchmarks.sections.growth import checks_per_new_text
from streamdedup.core.engine import Engine
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.core.normalize import normalize
from streamdedup.core.params import EngineParams
from streamdedup.core.shingles import shingles
from streamdedup.drivers.embedded import EmbeddedRunner
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
