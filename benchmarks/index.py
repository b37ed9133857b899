"""Index writer: embeddings per second of ``streamdedup index`` with the ONNX embedder, and where its time goes.

    python -m benchmarks.index                 # 30 pages of Django 5.1 and 5.2, both copies of each (a few minutes)
    python -m benchmarks.index --sources 60    # more pages
    python -m benchmarks.index --all           # both releases whole, ~35,000 canonical chunks (over an hour)

The documentation of two Django releases, as in ``benchmarks.retrieval`` (one folder, each release's files dated to
its release day, one collection). The ONNX embedder makes 10 to 35 embeddings/s per core on chunk-sized texts,
depending on how busy the machine is, and the benchmark embeds every text three times (steps 2, 4 and 5 below), so
both releases whole would take over an hour on one core. By default it takes a sample: ``--sources N`` pages that
both releases have, in the order of the SHA-256 of their path (a fixed, deterministic choice spread over the whole
docs tree), each with both releases' copies, so dedup has copies to save. ``--all`` takes every file of both
releases.

1. ``streamdedup run SAMPLE --state S --out outputs.jsonl`` runs the embedded engine on the sample.
2. ``streamdedup index --into lancedb://A --from outputs.jsonl``, from launch to exit: texts embedded per second.
3. A replay: the same file under a second name (a hard link), which the writer has never read, into the same
   index: every record is applied again, and every vector must come from the writer's cache (0 texts embedded).
   Then the command's start: an empty file into an empty index, from launch to exit, and of that, importing
   lancedb (``python -c "import lancedb"`` less ``python -c pass``).
4. The same index run in this process into an empty index B: an :class:`~streamdedup.index.writer.IndexWriter`
   with an ``OnnxEmbedder`` and a ``LanceDBSink`` whose methods are timed by a thin subclass (and the writer's
   view's RocksDB calls by wrappers), so the writer's time splits exactly into the model, the database (sink
   writes, lookups and searches, the table's ``optimize``) and the rest. The replay is timed the same way.
5. The bare embedder in the same run: ``OnnxEmbedder.embed`` (batches of at most 32, one thread per core) on the
   texts the writer embedded, in one call. The writer's embeddings/s over the bare embedder's is the figure
   compared across runs; on a shared machine it still moves by a fifth or more from one run to the next, as the
   other work on the machine comes and goes between the measurements.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.common import save
from benchmarks.index_timing import Clock, TimedEmbedder, timed_sink
from benchmarks.retrieval import RELEASES, corpus

T = TypeVar("T")

#: Pages (each with both releases' copies) indexed by default: about 1,600 canonical chunks.
DEFAULT_SOURCES = 30
#: The parts of the writer's time that are the database (the LanceDB sink).
SINK_PARTS = ("upsert", "update_metadata", "delete", "search", "rows", "optimize")
#: The parts that are the writer's view (RocksDB): staging records, committing them, the vector cache.
VIEW_PARTS = ("view stage", "view commit", "vector cache")


# -- The sample ------------------------------------------------------------------------------------------------


def common_pages(folder: Path) -> list[str]:
    """Return the pages (paths relative to a release) both releases have, ordered by the SHA-256 of the path."""
    first, *others = (
        {path.relative_to(folder / v).as_posix() for path in (folder / v).rglob("*.txt")} for v in RELEASES
    )
    both = first.intersection(*others)
    return sorted(both, key=lambda page: hashlib.sha256(page.encode()).hexdigest())


def build_sample(folder: Path, pages: Sequence[str], into: Path) -> None:
    """Copy both releases' copies of ``pages`` into ``into``, keeping the folder layout and the files' dates."""
    for version in RELEASES:
        for page in pages:
            target = into / version / page
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(folder / version / page, target)


def read_outputs(path: Path) -> dict[str, Any]:
    """Return what an embedded run's output file leaves: live chunks, positions by relation, review flags."""
    chunks: dict[str, bool] = {}
    mappings: dict[str, list[dict[str, Any]]] = {}
    reviews: collections.Counter[str] = collections.Counter()
    with path.open() as lines:
        for line in lines:
            record = json.loads(line)
            topic, key, value = record["topic"], record["key"], record["value"]
            if topic == "canonical-chunks":
                chunks[key] = value is not None
            elif topic == "source-mappings":
                mappings[key] = [] if value is None else value["chunks"]
            elif topic == "review" and value is not None:
                reviews[str(value.get("reason"))] += 1
    relations = collections.Counter(str(p["relation"]) for positions in mappings.values() for p in positions)
    return {
        "documents": sum(bool(positions) for positions in mappings.values()),
        "positions": sum(relations.values()),
        "relations": dict(sorted(relations.items())),
        "canonical_chunks": sum(chunks.values()),
        "review_flags": dict(sorted(reviews.items())),
    }


# -- Running the commands ---------------------------------------------------------------------------------------


def command(*args: str) -> float:
    """Run a streamdedup command as a user would; return its wall time from launch to exit."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", *args], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"streamdedup {args[0]} failed with exit code {done.returncode}")
    return seconds


def totals(index: Path, embedder: Any) -> Any:
    """Return the counters the index writer of ``lancedb://index`` committed."""
    from streamdedup.index.lancedb import LanceDBSink
    from streamdedup.index.writer import IndexWriter

    sink = LanceDBSink(index, embedder.dimensions, model=embedder.model_id)
    try:
        with IndexWriter(index / "_writer", sink, embedder) as writer:
            return writer.totals
    finally:
        sink.close()


def python_seconds(code: str) -> float:
    """Return the wall time of ``python -c code`` from launch to exit."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


# -- Timing inside one run --------------------------------------------------------------------------------------


def timed_index(outputs: Path, index: Path, embedder: Any, reviews: Path) -> dict[str, Any]:
    """Index ``outputs`` into ``lancedb://index`` in this process, as ``streamdedup index --from`` does, timed."""
    from streamdedup.contract.codec import encode_output_line
    from streamdedup.index.writer import IndexWriter
    from streamdedup.query.output_file import OutputFile
    from streamdedup.settings import Settings

    settings = Settings()
    clock = Clock()
    timed = TimedEmbedder(embedder, clock)
    opened = time.perf_counter()
    sink = timed_sink(index, timed.dimensions, timed.model_id, clock)
    try:
        with IndexWriter(
            index / "_writer",
            sink,
            timed,
            semantic_threshold=settings.semantic_threshold,
            params=settings.engine_params(),
        ) as writer:
            view = writer.view
            view.stage = clock.wrap("view stage", view.stage)  # type: ignore[method-assign]
            view.commit = clock.wrap("view commit", view.commit)  # type: ignore[method-assign]
            view.extras = clock.wrap("vector cache", view.extras)  # type: ignore[method-assign]
            view.put_extras = clock.wrap("vector cache", view.put_extras)  # type: ignore[method-assign]
            first = writer.totals

            class Applier:  # what the command's file applier does: flags appended to a file before each commit
                def progress(self, where: str) -> bytes | None:
                    return writer.progress(where)

                def apply(self, records: Sequence[Any], progress: dict[str, bytes]) -> object:
                    def deliver(flags: Sequence[Any]) -> None:
                        if flags:
                            with reviews.open("ab") as handle:
                                handle.write(b"".join(encode_output_line(r) for r in flags))

                    return writer.apply(records, progress, deliver=deliver)

            started = time.perf_counter()
            OutputFile(outputs, Applier()).catch_up()
            seconds = time.perf_counter() - started
            last = writer.totals
    finally:
        sink.close()
    open_seconds = started - opened
    parts = {name: clock.seconds[name] for name in ("embed", *SINK_PARTS, *VIEW_PARTS)}
    parts["other"] = seconds - sum(parts.values())
    return {
        "seconds": seconds,
        "open_seconds": open_seconds,
        "embedded": last.embedded - first.embedded,
        "rows_written": last.rows_written - first.rows_written,
        "metadata_updates": last.metadata_updates - first.metadata_updates,
        "rows_deleted": last.rows_deleted - first.rows_deleted,
        "review_flags": last.review_flags - first.review_flags,
        "positions": last.positions,
        "rows": last.rows,
        "embedding_calls_saved": last.embedding_calls_saved,
        "parts": parts,
        "calls": {name: clock.calls[name] for name in parts if name in clock.calls},
        "items": {name: clock.items[name] for name in parts if clock.items[name]},
        "embed_calls": clock.calls["embed"],
        "texts": timed.texts,
    }


def shares(parts: dict[str, float], seconds: float) -> dict[str, float]:
    """Return the model / database / rest split of a run's seconds."""
    model = parts["embed"]
    database = sum(parts[name] for name in SINK_PARTS)
    return {
        "model": model / seconds,
        "database": database / seconds,
        "rest": (seconds - model - database) / seconds,
    }


# -- The benchmark ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sources",
        type=int,
        default=DEFAULT_SOURCES,
        help="pages that both releases have, each with both copies (default %(default)s)",
    )
    parser.add_argument("--all", action="store_true", help="every file of both releases (over an hour)")
    args = parser.parse_args()
    if args.sources < 1:
        parser.error("--sources must be at least 1")

    from streamdedup.index.embeddings import OnnxEmbedder

    folder = corpus()
    pages = common_pages(folder)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        if args.all:
            source, chosen = folder, None
            what = f"every file of both releases ({sum(1 for _ in folder.rglob('*.txt')):,} files)"
        else:
            chosen = pages[: args.sources]
            source = scratch / "sample"
            build_sample(folder, chosen, source)
            what = (
                f"{len(chosen)} of the {len(pages)} pages both releases have (the first by SHA-256 of their "
                f"path), both copies of each: {2 * len(chosen)} files"
            )
        print(f"indexing {what}", flush=True)

        outputs = scratch / "outputs.jsonl"
        run_seconds = command(
            "run",
            str(source),
            "--state",
            str(scratch / "state"),
            "--out",
            str(outputs),
            "--collection",
            "django",
        )
        engine = read_outputs(outputs)
        print(
            f"engine: {engine['documents']:,} documents, {engine['positions']:,} positions, "
            f"{engine['canonical_chunks']:,} canonical chunks ({run_seconds:.1f} s from launch)",
            flush=True,
        )

        # As a user runs it: the first index run, then a replay of the same file under another name.
        cli_index = scratch / "cli-index"
        cli_seconds = command(
            "index", "--into", f"lancedb://{cli_index}", "--from", str(outputs),
            "--reviews", str(scratch / "cli-reviews.jsonl"),
        )  # fmt: skip
        reader = OnnxEmbedder()  # reads the writers' counters; never embeds
        cli = totals(cli_index, reader)
        print(f"index: {cli.embedded:,} texts embedded in {cli_seconds:.1f} s from launch", flush=True)
        replay_file = scratch / "outputs-replay.jsonl"
        try:
            os.link(outputs, replay_file)
        except OSError:
            shutil.copyfile(outputs, replay_file)
        replay_seconds = command(
            "index", "--into", f"lancedb://{cli_index}", "--from", str(replay_file),
            "--reviews", str(scratch / "cli-replay-reviews.jsonl"),
        )  # fmt: skip
        after = totals(cli_index, reader)
        replay_embedded = after.embedded - cli.embedded
        print(f"replay: {replay_embedded:,} texts embedded in {replay_seconds:.1f} s from launch", flush=True)
        # What any run pays before its first record and after its last: an empty file into an empty index, and
        # of that, importing lancedb (beyond the interpreter's own start).
        empty = scratch / "empty.jsonl"
        empty.touch()
        start_seconds = command(
            "index", "--into", f"lancedb://{scratch / 'empty-index'}", "--from", str(empty),
            "--reviews", str(scratch / "empty-reviews.jsonl"),
        )  # fmt: skip
        lancedb_seconds = python_seconds("import lancedb") - python_seconds("pass")
        print(
            f"start: an empty file in {start_seconds:.1f} s from launch (importing lancedb {lancedb_seconds:.1f} s)",
            flush=True,
        )

        # In this process, timed: the same first run into an empty index, then its replay.
        load_started = time.perf_counter()
        embedder = OnnxEmbedder()
        load_seconds = time.perf_counter() - load_started
        inside_index = scratch / "timed-index"
        inside = timed_index(outputs, inside_index, embedder, scratch / "timed-reviews.jsonl")
        texts = inside.pop("texts")
        print(
            f"timed: {inside['embedded']:,} texts embedded in {inside['seconds']:.1f} s "
            f"(model {inside['parts']['embed']:.1f} s)",
            flush=True,
        )
        replay_inside = timed_index(
            replay_file, inside_index, embedder, scratch / "timed-replay-reviews.jsonl"
        )
        replay_inside.pop("texts")

        # The bare embedder on the same texts, batch 32, in one call.
        bare = OnnxEmbedder(batch_size=32)
        started = time.perf_counter()
        bare.embed(texts)
        bare_seconds = time.perf_counter() - started
    total_seconds = time.perf_counter() - began

    bare_rate = len(texts) / bare_seconds
    cli_rate = cli.embedded / cli_seconds
    after_start_rate = cli.embedded / (cli_seconds - start_seconds)
    inside_rate = inside["embedded"] / inside["seconds"]
    model_rate = inside["embedded"] / inside["parts"]["embed"]
    split = shares(inside["parts"], inside["seconds"])
    print(
        f"embeddings/s: index from launch {cli_rate:.2f}, writer in process {inside_rate:.2f}, its model calls "
        f"{model_rate:.2f}, bare embedder {bare_rate:.2f}; ratio to the bare embedder {cli_rate / bare_rate:.2f} "
        f"from launch, {inside_rate / bare_rate:.2f} in process, {after_start_rate / bare_rate:.2f} from launch "
        f"without the {start_seconds:.1f} s start"
    )
    print(
        f"writer's time: model {split['model']:.0%}, database {split['database']:.0%}, rest {split['rest']:.0%}; "
        + ", ".join(f"{name} {value:.1f} s" for name, value in inside["parts"].items())
    )
    print(
        f"replay: {replay_embedded} texts embedded, {replay_seconds:.1f} s from launch; "
        f"the benchmark took {total_seconds:.0f} s"
    )
    save(
        "index",
        {
            "command": "python -m benchmarks.index"
            + (" --all" if args.all else f" --sources {args.sources}"),
            "releases": list(RELEASES),
            "sample": {
                "all": args.all,
                "what": what,
                "pages": chosen,
                "common_pages": len(pages),
                "files": engine["documents"] if chosen is None else 2 * len(chosen),
            },
            "engine": {**engine, "run_seconds": run_seconds},
            "cli": {
                "seconds": cli_seconds,
                "embedded": cli.embedded,
                "rows_written": cli.rows_written,
                "positions": cli.positions,
                "rows": cli.rows,
                "embedding_calls_saved": cli.embedding_calls_saved,
                "review_flags": cli.review_flags,
                "embeddings_per_second": cli_rate,
            },
            "start": {
                "seconds": start_seconds,
                "lancedb_import_seconds": lancedb_seconds,
                "embeddings_per_second_after_start": after_start_rate,
            },
            "replay": {
                "seconds": replay_seconds,
                "embedded": replay_embedded,
                "timed": {
                    k: v
                    for k, v in replay_inside.items()
                    if k in ("seconds", "embedded", "parts", "calls", "items")
                },
            },
            "timed": {
                **inside,
                "model_load_seconds": load_seconds,
                "embeddings_per_second": inside_rate,
                "model_embeddings_per_second": model_rate,
                "shares": split,
            },
            "bare": {
                "texts": len(texts),
                "seconds": bare_seconds,
                "embeddings_per_second": bare_rate,
                "batch": 32,
                "threads": bare.threads,
            },
            "ratio_to_bare": cli_rate / bare_rate,
            "ratio_to_bare_in_process": inside_rate / bare_rate,
            "ratio_to_bare_after_start": after_start_rate / bare_rate,
            "ratio_model_calls_to_bare": model_rate / bare_rate,
            "benchmark_seconds": total_seconds,
        },
    )


if __name__ == "__main__":
    main()
