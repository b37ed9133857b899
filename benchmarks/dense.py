"""Dense neighbourhood: many near copies of one text that each state a different fact.

    python -m benchmarks.dense                  # 1,500 copies
    python -m benchmarks.dense --copies 600

A support macro sent 1,500 times with a different customer number: every pair is above the threshold and every
pair conflicts on the number, so nothing may merge. Each new copy must verify no more than
``STREAMDEDUP_MAX_CANDIDATES`` others and raise at most one ``fact_conflict`` flag. The copies go through
``streamdedup run`` as a user runs it (a JSONL file, RocksDB state, process start included). The baseline, in the
same run: as many unrelated texts of the same length, which have no candidates at all.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import save

MACRO = (
    "Thank you for contacting support about your order. Your customer number is {number} and we have opened a "
    "ticket for it. A member of the billing team will review the charge on your account and reply within two "
    "business days. Please keep this number for any later message about the same request so we can find it."
)


def write_feed(path: Path, copies: int, *, unrelated: bool = False) -> None:
    """Write ``copies`` upserts of the macro, one source each, each with its own number (or unrelated words)."""
    rng = random.Random(7)
    vocabulary = [f"word{i}" for i in range(5_000)]
    length = len(MACRO.split())
    with path.open("w") as feed:
        for i in range(copies):
            text = MACRO.format(number=100_000 + (i * 7_919) % 900_000)
            if unrelated:
                text = " ".join(rng.choice(vocabulary) for _ in range(length))
            event = {
                "schema": "streamdedup.document/v1",
                "op": "upsert",
                "source_id": f"ticket-{i:05d}",
                "version": 1,
                "modified_at": f"2024-03-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
                "acl": ["support"],
                "text": text,
            }
            feed.write(json.dumps(event) + "\n")


def run(copies: int, *, unrelated: bool) -> tuple[float, collections.Counter[str]]:
    """Run ``streamdedup run`` over a fresh feed and state; return its wall time and its outputs by kind."""
    workdir = Path(tempfile.mkdtemp(prefix="streamdedup-dense-"))
    try:
        feed, out = workdir / "feed.jsonl", workdir / "out.jsonl"
        write_feed(feed, copies, unrelated=unrelated)
        command = [sys.executable, "-m", "streamdedup", "run", str(feed), "--state", str(workdir / "state"),
                   "--out", str(out)]  # fmt: skip
        began = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        seconds = time.perf_counter() - began
        counts: collections.Counter[str] = collections.Counter()
        for line in out.read_text().splitlines():
            record = json.loads(line)
            reason = (record["value"] or {}).get("reason") if record["topic"] == "review" else None
            counts[f"{record['topic']}:{reason}" if reason else record["topic"]] += 1
        return seconds, counts
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=1_500)
    args = parser.parse_args()
    run(20, unrelated=True)  # warm what a first run loads, as any earlier run would have
    baseline, _ = run(args.copies, unrelated=True)
    seconds, counts = run(args.copies, unrelated=False)
    flags = counts["review:fact_conflict"]
    print(f"{args.copies:,} near copies: {seconds:.2f} s from launch ({baseline:.2f} s for unrelated texts); "
          f"{flags:,} fact_conflict flags; {counts['canonical-chunks']:,} canonical chunks")  # fmt: skip
    save(
        "dense",
        {
            "copies": args.copies,
            "seconds": seconds,
            "baseline_seconds": baseline,
            "ratio_to_baseline": seconds / baseline,
            "fact_conflict_flags": flags,
            "outputs": dict(sorted(counts.items())),
        },
    )


if __name__ == "__main__":
    main()
