"""Shared pieces of the benchmarks: the corpus, timing, machine facts and result files."""

from __future__ import annotations

import collections
import json
import os
import platform
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
CACHE = Path(os.environ.get("STREAMDEDUP_BENCH_CACHE", Path.home() / ".cache" / "streamdedup" / "bench"))
DJANGO_VERSIONS = ("3.2.25", "4.2.30", "5.0.14", "5.1.15", "5.2.19")


def django_docs(versions: tuple[str, ...] = DJANGO_VERSIONS) -> Path:
    """Return a folder holding ``<version>/**/*.txt`` from Django's sdists (downloaded with pip, cached)."""
    target = CACHE / "django-docs"
    for version in versions:
        folder = target / version
        if folder.exists():
            continue
        sdist_dir = CACHE / "sdists"
        sdist_dir.mkdir(parents=True, exist_ok=True)
        sdist = sdist_dir / f"django-{version}.tar.gz"
        if not sdist.exists():
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", f"django=={version}",
                 "-d", str(sdist_dir), "-q"],
                check=True,
            )  # fmt: skip
            found = sorted(sdist_dir.glob(f"[Dd]jango-{version}.tar.gz"))
            found[0].rename(sdist) if found and found[0] != sdist else None
        with tarfile.open(sdist) as archive:
            for member in archive.getmembers():
                parts = Path(member.name).parts
                if (
                    len(parts) > 2
                    and parts[1] == "docs"
                    and member.name.endswith(".txt")
                    and "_theme" not in parts
                ):
                    data = archive.extractfile(member)
                    if data is None:
                        continue
                    out = folder / Path(*parts[2:])
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(data.read())
    return target


def django_files(versions: tuple[str, ...] = DJANGO_VERSIONS) -> list[Path]:
    """Return the docs' text files of the given Django versions."""
    root = django_docs(versions)
    return [path for version in versions for path in sorted((root / version).rglob("*.txt"))]


def django_chunks(versions: tuple[str, ...] = DJANGO_VERSIONS) -> list[str]:
    """Return the normalized chunks of the Django docs, as the engine cuts them."""
    from streamdedup.core.chunking import chunk_document
    from streamdedup.core.normalize import normalize

    return [
        normalize(chunk.plain)
        for path in django_files(versions)
        for chunk in chunk_document(path.read_text(encoding="utf-8"), "text/plain", max_chars=2000)
    ]


def best_of(function: Callable[[], Any], repeat: int = 3) -> float:
    """Return the best wall time of ``repeat`` runs of ``function``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def time_stages(
    engine: Any, seconds: collections.Counter[str], each: Callable[[str, Any], None] | None = None
) -> None:
    """Make ``engine.handle`` add the seconds of every call to ``seconds[stage]`` (and show ``each`` the batch)."""
    handle = engine.handle

    def timed(stage: str, batch: Any, state: Any) -> Any:
        start = time.perf_counter()
        try:
            return handle(stage, batch, state)
        finally:
            seconds[stage] += time.perf_counter() - start
            if each is not None:
                each(stage, batch)

    engine.handle = timed


def machine() -> dict[str, Any]:
    """Describe the machine a benchmark ran on."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {
        "commit": _commit(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": memory,
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _commit() -> str:
    """Return the commit the benchmark ran (``STREAMDEDUP_BENCH_COMMIT`` for a snapshot outside git), with
    ``-dirty`` when the work tree had changes."""
    given = os.environ.get("STREAMDEDUP_BENCH_COMMIT")
    if given:
        return given
    try:
        found = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return ""
    return found.stdout.strip()


def rss_bytes() -> int:
    """Return this process's resident memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def save(name: str, result: dict[str, Any], *, run: dict[str, Any] | None = None) -> Path:
    """Write a benchmark's result (with the machine and the command) to benchmarks/results/<name>.json.

    ``run`` keeps the machine and command of an earlier run whose results ``result`` extends.
    """
    RESULTS.mkdir(exist_ok=True)
    run = run or {"machine": machine(), "command": f"python -m benchmarks.{name}"}
    result = {"machine": run["machine"], "command": run["command"], **result}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2))
    from benchmarks.report import write_report

    write_report()
    return path
