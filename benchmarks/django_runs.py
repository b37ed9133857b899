"""The engine on the docs of five Django releases: in one process, in two, on its Python kernels, and baselines."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.common import django_chunks, django_files
from benchmarks.signatures import _bulk
from streamdedup.core import kernels
from streamdedup.core.engine import Engine
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.parallel import ParallelRunner
from streamdedup.settings import Settings
from streamdedup.store.rocksdb import RocksDBStore

BATCH = Settings.model_fields["batch_size"].default  # as `streamdedup run`


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
