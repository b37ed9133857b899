"""Retrieval: what dedup does to a BM25 top-5, and what each threshold would merge, on two Django releases.

    python -m benchmarks.retrieval

The documentation of two Django releases (from their PyPI sdists) becomes one folder, each release's files dated
to its release day so that the newer copy of a page is canonical, and one collection. ``streamdedup eval`` ranks
500 queries drawn from the docs' headings over every chunk position and over canonical chunks only;
``streamdedup calibrate`` shows what each threshold from 0.50 to 0.95 would merge and flag. Both run as a user
runs them, and their JSON and the threshold plot go into the report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import CACHE, django_docs, save
from benchmarks.sections.figures import PLOTS

#: The two releases and the day each came out.
RELEASES = {"5.1.15": "2024-08-07T12:00:00", "5.2.19": "2025-04-02T12:00:00"}


def corpus() -> Path:
    """Return the folder of both releases' docs, each file dated to its release (built once, cached)."""
    target = CACHE / "retrieval-corpus"
    if target.exists():
        return target
    source = django_docs(tuple(RELEASES))
    building = Path(tempfile.mkdtemp(dir=CACHE))
    for version, day in RELEASES.items():
        stamp = time.mktime(time.strptime(day, "%Y-%m-%dT%H:%M:%S"))
        shutil.copytree(source / version, building / version)
        for path in (building / version).rglob("*.txt"):
            os.utime(path, (stamp, stamp))
    building.rename(target)
    return target


def command(*args: str) -> float:
    """Run a streamdedup command as a user would; return its wall time."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "streamdedup.cli", *args], check=True)
    return time.perf_counter() - started


def main() -> None:
    folder = corpus()
    with tempfile.TemporaryDirectory() as scratch:
        figures = Path(scratch) / "eval.json"
        eval_seconds = command(
            "eval", str(folder), "--collection", "django", "-k", "5", "--json", str(figures)
        )
        evaluation: dict[str, Any] = json.loads(figures.read_text())
        evaluation.pop("per_query", None)
        plots = Path(scratch) / "calibration"
        calibrate_seconds = command("calibrate", str(folder), "--collection", "django", "--out", str(plots))
        calibration: dict[str, Any] = json.loads((plots / "calibration.json").read_text())
        PLOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plots / "thresholds.png", PLOTS / "retrieval-thresholds.png")
    save(
        "retrieval",
        {
            "releases": list(RELEASES),
            "files": sum(1 for _ in folder.rglob("*.txt")),
            "eval": evaluation,
            "eval_seconds": eval_seconds,
            "calibration": {
                "threshold": calibration["threshold"],
                "corpus": calibration["corpus"],
                "thresholds": calibration["thresholds"],
                "suggestion": calibration["suggestion"],
            },
            "calibrate_seconds": calibrate_seconds,
        },
    )


if __name__ == "__main__":
    main()
