"""The Floors section: CPU per chunk of the engine beside plain loops doing only the storage work."""

from __future__ import annotations

from benchmarks.sections.figures import (
    load_result,
    machine_of,
)

_FLOOR_ROWS = {
    "engine": "the engine, embedded (RocksDB state)",
    "engine_bands_in_memory": "the engine with its band family in a dict (nothing persisted)",
    "exact": "floor `exact`: hash, one record per document and per text",
    "lsh_rocksdb": "floor `lsh_rocksdb`: also LSH buckets, one record each (as the engine keeps them)",
    "lsh_memory": "floor `lsh_memory`: also LSH buckets, in a dict in memory with a log record per batch",
    "lsh_sorted": "floor `lsh_sorted`: the same, as sorted NumPy runs looked up a batch at a time",
    "datasketch_bulk": "datasketch `MinHash.bulk` signatures alone (the engine benchmark's baseline)",
    "quix_peer": "the Quix Streams peer after its startup, Kafka included (the streaming benchmark's)",
}
_FEED_TITLES = {
    "streaming": "the streaming benchmark's feed (pre-chunked documents of five Django chunks)",
    "django": "the docs of five Django releases (text upserts, the engine benchmark's feed)",
}


def section(lines: list[str]) -> None:
    result = load_result("floor")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.floor`.", ""]
        return
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        "A floor is a plain loop doing only the storage work the engine cannot avoid, on the project's RocksDB",
        "store with the engine's chunker, normalization and signature kernel, in batches of "
        f"{result['batch']} documents: no verification, ACLs, versions, deletions, canonical choice or output",
        "records (`benchmarks/floor.py` says exactly what each does; `make bench-floor` adds the Quix peer's row).",
        "CPU time per input chunk, each contender's",
        f"least of {result['repeat']} interleaved runs:",
        "",
    ]
    for feed, found in result["feeds"].items():
        per_chunk = found["cpu_us_per_chunk"]
        counts = found["counts"].get("lsh_rocksdb", {})
        lines += [
            f"**{_FEED_TITLES.get(feed, feed)}**: {found['chunks']:,} chunks, {counts.get('new_texts', 0):,} "
            f"distinct texts, {counts.get('candidates', 0):,} bucket candidates",
            "",
            "| | CPU µs per chunk | engine / this | this / datasketch bulk | this / Quix peer |",
            "|---|---:|---:|---:|---:|",
            *(
                f"| {label} | {per_chunk[name]:,.1f} | {per_chunk['engine'] / per_chunk[name]:.2f} | "
                f"{per_chunk[name] / per_chunk['datasketch_bulk']:.2f} | "
                + (f"{per_chunk[name] / per_chunk['quix_peer']:.2f} |" if "quix_peer" in per_chunk else " |")
                for name, label in _FLOOR_ROWS.items()
                if name in per_chunk
            ),
            "",
        ]
    lines += [
        "Reading it: a target that asks the engine to beat a baseline is out of reach for every implementation",
        "whose floor alone costs more CPU than the baseline (`this / datasketch bulk` or `this / Quix peer` above 1;",
        "the floors have no Kafka, so beside the peer they flatter the worker).",
        "",
        *(_floor_reading(feed, found["cpu_us_per_chunk"]) for feed, found in result["feeds"].items()),
        "",
        "The machine's speed drifts within a run; each contender's least CPU time is kept, so ratios between rows",
        "move by some 10% from run to run (see `runs` in `benchmarks/results/floor.json`).",
        "",
    ]


def _floor_reading(feed: str, per_chunk: dict[str, float]) -> str:
    """Say, for one feed, how far the engine is from its own floor and what keeping its buckets in memory gives."""
    engine, floor = per_chunk["engine"], per_chunk["lsh_rocksdb"]
    bands = per_chunk.get("engine_bands_in_memory")
    return (
        f"- {feed}: the engine costs {engine / floor:.1f}x the floor of its own storage design (`lsh_rocksdb`), "
        f"which is {floor / per_chunk['datasketch_bulk']:.2f} of datasketch bulk"
        + (f" and {floor / per_chunk['quix_peer']:.2f} of the Quix peer" if "quix_peer" in per_chunk else "")
        + (
            f"; with its buckets in memory the engine costs {bands / engine:.2f} of itself: "
            "what any change to where it keeps its buckets can give."
            if bands
            else "."
        )
    )
