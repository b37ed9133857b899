"""`streamdedup run` from launch to exit on a pre-chunked JSONL feed, beside a script calling `MinHash.bulk`."""

from __future__ import annotations

import compileall
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import streamdedup
from benchmarks.common import django_chunks

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
