"""Index writer: embeddings per second of ``streamdedup index`` with the ONNX embedder, and where its time goes.

    python -m benchmarks.index                 # 100 pages of Django 5.1 and 5.2, both copies of each (~7 minutes)
    python -m benchmarks.index --sources 30    # fewer pages
    python -m benchmarks.index --all           # both releases whole, ~35,000 canonical chunks (hours)

The documentation of two Django releases, as in ``benchmarks.retrieval`` (one folder, each release's files dated to
its release day, one collection). The ONNX embedder makes 50 to 130 embeddings/s on chunk-sized texts on two cores,
depending on how busy the machine is, and the benchmark embeds every text eight times (steps 2 to 5 below, with
three rounds), so both releases whole would take hours. By default it takes a sample: ``--sources N`` pages that
both releases have, in the order of the SHA-256 of their path (a fixed, deterministic choice spread over the whole
docs tree), each with both releases' copies, so dedup has copies to save. ``--all`` takes every file of both
releases.

1. ``streamdedup run SAMPLE --state S --out outputs.jsonl`` runs the embedded engine on the sample.
2. The index run in this process into an empty index A: an :class:`~streamdedup.index.writer.IndexWriter` with an
   ``OnnxEmbedder`` and a ``LanceDBSink`` whose methods are timed by a thin subclass (and the writer's view's
   RocksDB calls by wrappers), so the writer's time splits exactly into the model, the database (sink writes,
   lookups and searches, the table's ``optimize``) and the rest.
3. The bare embedder: ``OnnxEmbedder.embed`` (batches of at most 32, one thread per core) on the texts the writer
   embedded, in one call.
4. ``streamdedup index --into lancedb://B --from outputs.jsonl``, from launch to exit, into an empty index:
   texts embedded per second.
5. The bare embedder again, on the same texts. Steps 4 and 5 make a round, ``--rounds`` of them (3 by default). A
   round's ratio is the command's embeddings/s over the bare embedder's on either side of it (the mean of their
   seconds), and the figure is the median round's; the writer's in process is compared with the bare embedder's
   right after it. On a shared machine the rates move by a fifth or more from one minute to the next, as other work
   comes and goes.
6. A replay: the same file under a second name (a hard link), which the writer has never read, into the first
   round's index from launch and into index A in process: every record is applied again, and every vector must
   come from the writer's cache (0 texts embedded).
7. The command's start: an empty file into an empty index, from launch to exit, and of that, importing lancedb
   (``python -c "import lancedb"`` less ``python -c pass``). It does not grow with the input, so the ratio from
   launch is lower on a smaller sample.
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

#: Pages (each with both releases' copies) indexed by default: about 5,700 canonical chunks, so that the command's
#: start (2 to 3 s, whatever the input) is a small part of a run from launch, as it is when a real corpus is indexed.
DEFAULT_SOURCES = 100
#: Runs of the command from launch, the median ratio reported.
DEFAULT_ROUNDS = 3
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


def run_into(folder: Path, scratch: Path, outputs: Path) -> float:
    """Run ``streamdedup run`` over ``folder`` (collection ``django``, state in ``scratch``) into ``outputs``."""
    return command(
        "run", str(folder), "--state", str(scratch / "state"), "--out", str(outputs), "--collection", "django"
    )


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
    from streamdedup.cli.indexing import FILE_BATCH_LINES
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
            OutputFile(outputs, Applier(), batch_lines=FILE_BATCH_LINES).catch_up()
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


def bare_seconds_of(embedder: Any, texts: Sequence[str]) -> float:
    """Return the seconds the bare embedder takes to embed ``texts`` in one call."""
    started = time.perf_counter()
    embedder.embed(texts)
    return time.perf_counter() - started


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
    parser.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help="runs of the command from launch, each followed by the bare embedder (default %(default)s)",
    )
    args = parser.parse_args()
    if args.sources < 1:
        parser.error("--sources must be at least 1")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

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
        run_seconds = run_into(source, scratch, outputs)
        engine = read_outputs(outputs)
        print(
            f"engine: {engine['documents']:,} documents, {engine['positions']:,} positions, "
            f"{engine['canonical_chunks']:,} canonical chunks ({run_seconds:.1f} s from launch)",
            flush=True,
        )

        # In this process, timed: the first run into an empty index. It also gives the texts the writer embeds,
        # which the bare embedder then embeds right before and right after the command's run from launch.
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
        bare = OnnxEmbedder(batch_size=32)
        bare_rounds = [bare_seconds_of(bare, texts)]
        print(f"bare embedder: {len(texts) / bare_rounds[0]:.2f} embeddings/s", flush=True)

        # As a user runs it, into an empty index each round, the bare embedder again after each; then a replay of
        # the same file under another name into the first round's index.
        reader = OnnxEmbedder()  # reads the writers' counters; never embeds
        cli_rounds: list[float] = []
        for number in range(args.rounds):
            cli_index = scratch / f"cli-index-{number}"
            seconds = command(
                "index", "--into", f"lancedb://{cli_index}", "--from", str(outputs),
                "--reviews", str(scratch / f"cli-reviews-{number}.jsonl"),
            )  # fmt: skip
            cli_rounds.append(seconds)
            found = totals(cli_index, reader)
            if number == 0:
                cli = found
            elif found.embedded != cli.embedded or found.rows != cli.rows:
                raise SystemExit(
                    f"round {number + 1} embedded {found.embedded} texts, the first {cli.embedded}"
                )
            print(
                f"index: {found.embedded:,} texts embedded in {cli_rounds[-1]:.1f} s from launch", flush=True
            )
            bare_rounds.append(bare_seconds_of(bare, texts))
            print(f"bare embedder: {len(texts) / bare_rounds[-1]:.2f} embeddings/s", flush=True)
        cli_index = scratch / "cli-index-0"
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
        replay_inside = timed_index(
            replay_file, inside_index, embedder, scratch / "timed-replay-reviews.jsonl"
        )
        replay_inside.pop("texts")
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
    total_seconds = time.perf_counter() - began

    # The command from launch against the bare embedder measured on either side of it, the writer in process
    # against the bare embedder measured right after it.
    # Each round's ratio: its embeddings/s from launch over the bare embedder's on either side of it (the mean of
    # their seconds); the figure is the median of the rounds.
    round_ratios = [
        (cli.embedded / seconds) / (len(texts) / ((bare_rounds[n] + bare_rounds[n + 1]) / 2))
        for n, seconds in enumerate(cli_rounds)
    ]
    middle = sorted(range(len(cli_rounds)), key=lambda n: round_ratios[n])[(len(cli_rounds) - 1) // 2]
    cli_seconds = cli_rounds[middle]
    bare_seconds = (bare_rounds[middle] + bare_rounds[middle + 1]) / 2
    bare_rate = len(texts) / bare_seconds
    bare_rate_after_timed = len(texts) / bare_rounds[0]
    cli_rate = cli.embedded / cli_seconds
    after_start_rate = cli.embedded / (cli_seconds - start_seconds)
    inside_rate = inside["embedded"] / inside["seconds"]
    model_rate = inside["embedded"] / inside["parts"]["embed"]
    inside_ratio = inside_rate / bare_rate_after_timed
    split = shares(inside["parts"], inside["seconds"])
    print(
        f"embeddings/s: index from launch {cli_rate:.2f}, writer in process {inside_rate:.2f}, its model calls "
        f"{model_rate:.2f}, bare embedder {bare_rate:.2f}; ratio to the bare embedder {cli_rate / bare_rate:.2f} "
        f"from launch, {inside_ratio:.2f} in process, {after_start_rate / bare_rate:.2f} from launch "
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
            + (" --all" if args.all else f" --sources {args.sources}")
            + f" --rounds {args.rounds}",
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
                "rounds_seconds": cli_rounds,
                "rounds_ratios": round_ratios,
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
                "rounds_seconds": bare_rounds,
                "batch": 32,
                "threads": bare.threads,
            },
            "ratio_to_bare": cli_rate / bare_rate,
            "ratio_to_bare_in_process": inside_ratio,
            "ratio_to_bare_after_start": after_start_rate / bare_rate,
            "ratio_model_calls_to_bare": model_rate / bare_rate_after_timed,
            "benchmark_seconds": total_seconds,
        },
    )


if __name__ == "__main__":
    main()
