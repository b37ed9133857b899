"""The Index writer section: embeddings/s of `streamdedup index` and where the writer's time goes."""

from __future__ import annotations

from typing import Any

from benchmarks.sections.figures import (
    check,
    load_result,
    machine_of,
)


def section(lines: list[str]) -> None:
    result = load_result("index")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.index`.", ""]
        return
    sample, engine, cli, replay = result["sample"], result["engine"], result["cli"], result["replay"]
    timed, bare = result["timed"], result["bare"]
    releases = " and ".join(result["releases"])
    relations = ", ".join(f"{n:,} {relation}" for relation, n in engine["relations"].items())
    pages = sample.get("pages") or []
    listed = (
        ["", "Pages: " + ", ".join(f"`{page}`" for page in pages) + "."]
        if pages and len(pages) <= 40
        else ["", "The pages are listed in `benchmarks/results/index.json`."]
        if pages
        else []
    )
    parts, calls, items = timed["parts"], timed["calls"], timed.get("items", {})
    seconds = timed["seconds"]
    share = timed["shares"]
    labels = {
        "embed": "model: `embed` (tokenizer and onnxruntime)",
        "upsert": "database: `upsert` (rows with vectors, one `merge_insert`)",
        "update_metadata": "database: `update_metadata` (rows without vectors)",
        "delete": "database: `delete`",
        "search": "database: searches (semantic neighbours of the new rows)",
        "rows": "database: `rows` (what the table holds of a batch's chunks)",
        "optimize": "database: `optimize` (compaction, every 100 writes)",
        "view stage": "rest: view, staging records (RocksDB reads)",
        "view commit": "rest: view, committing a batch (RocksDB write batch)",
        "vector cache": "rest: vector cache (RocksDB reads and writes)",
        "other": "rest: other (reading the file, rows from the view, decisions, flag checks)",
    }
    rates = [
        (
            "bare `OnnxEmbedder.embed`, same texts, batches of at most 32, one call (baseline: its runs on either "
            "side of the median round)",
            bare["embeddings_per_second"],
        ),
        ("the writer's own `embed` calls", timed["model_embeddings_per_second"]),
        ("the writer in process (first batch read to last commit)", timed["embeddings_per_second"]),
        ("`streamdedup index` from launch to exit (the median round)", cli["embeddings_per_second"]),
    ]
    threads = bare.get("threads", 1)
    start = result.get("start")
    # Every embedding of each text the benchmark makes, at this run's rate, for the ~35,000 canonical chunks of
    # both releases.
    times = 2 + 2 * len(cli.get("rounds_seconds") or [0])
    whole_minutes = times * 35_000 / bare["embeddings_per_second"] / 60
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"The documentation of Django {releases}, each release dated to its release day, one collection, as in",
        f"[Retrieval](#retrieval). Indexed: {sample['what']}. The ONNX embedder made "
        f"{bare['embeddings_per_second']:.0f} embeddings a second",
        f"in this run ({_threads(threads)}, the machine as busy as it was), and the benchmark embeds every text "
        f"{times} times,",
        f"so both releases whole (about 35,000 canonical chunks, `--all`) would take about {whole_minutes:.0f} "
        "minutes at that rate: by",
        "default it indexes this fixed sample and finishes in minutes (`--sources N` for more pages).",
        *listed,
        "",
        f"`streamdedup run` made {engine['documents']:,} documents into {engine['positions']:,} chunk positions",
        f"(by relation: {relations}) and {engine['canonical_chunks']:,} canonical chunks "
        f"({engine['run_seconds']:.1f} s from launch). Then",
        "`streamdedup index --into lancedb://DIR --from outputs.jsonl` with the default embedder (all-MiniLM-L6-v2",
        f"int8 on onnxruntime, {_threads(threads)}, batches of at most 32), as a user runs it; the same run again in "
        "the benchmark's",
        "process into an empty index, with the LanceDB sink's methods, the model and the view's RocksDB calls timed;",
        "and the bare embedder on the texts the writer embedded, in the same run, before and after each run of the",
        "command.",
        "",
        "| | |",
        "|---|---:|",
        f"| chunk positions | {cli['positions']:,} |",
        f"| canonical chunks (rows in the index) | {cli['rows']:,} |",
        f"| texts embedded | {cli['embedded']:,} |",
        f"| embedding calls saved by dedup | {cli['embedding_calls_saved']:,} |",
        f"| semantic flags | {cli['review_flags']:,} |",
        f"| `streamdedup index`, seconds from launch | {cli['seconds']:.1f} |",
        f"| replay of the same file: texts embedded | {replay['embedded']:,} |",
        f"| replay: seconds from launch | {replay['seconds']:.1f} |",
        *(
            [
                f"| `streamdedup index` of an empty file (the command's start), seconds from launch | "
                f"{start['seconds']:.1f} |",
                f"| of which importing lancedb | {start['lancedb_import_seconds']:.1f} |",
            ]
            if start
            else []
        ),
        "",
        "| | embeddings/s | ratio to the bare embedder |",
        "|---|---:|---:|",
        *(f"| {label} | {rate:.2f} | {rate / bare['embeddings_per_second']:.2f} |" for label, rate in rates),
        "",
        f"Where the writer's time goes, in process: {seconds:.1f} s for {timed['embedded']:,} texts in "
        f"{timed['embed_calls']:,} `embed` calls (loading the model, {timed['model_load_seconds']:.1f} s, and "
        f"opening the index and the writer, {timed['open_seconds']:.1f} s, apart). Items are texts, rows or ids.",
        "",
        "| part | seconds | share | calls | items |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {labels.get(name, name)} | {value:.2f} | {value / seconds:.1%} | {_count(calls.get(name))} | "
            f"{_count(items.get(name))} |"
            for name, value in parts.items()
        ),
        f"| **model / database / rest** | | {share['model']:.0%} / {share['database']:.0%} / "
        f"{share['rest']:.0%} | | |",
        "",
        *_index_replay(replay, cli["seconds"]),
        "The writer keeps the table's vectors in memory and asks LanceDB for the nearest rows only of the new",
        "texts that have some row within 0.001 below the semantic threshold (one matrix product per batch); the",
        "others could not be flagged. LanceDB's exact search scans the table for every text it is asked about, so",
        "over a build its cost grows with the square of the rows: asked about every new text it took 3.8 s of the",
        "writer's 52.3 s on this sample (run of 2026-12-06, the same flags). The writer's batches are searched in",
        "one LanceDB search (`Sink.search_many`), which finds the rows, scores and order a search per row finds.",
        "The embedder cuts a call's texts into batches where their lengths part, so the writer's calls of a few",
        "hundred texts pad no more than one call of all of them, and it runs one thread per core unless",
        "`STREAMDEDUP_EMBEDDER_THREADS` says otherwise. Before these (one search per row, batches of a fixed 32, one",
        "thread; run of 2026-12-01): 0.62 from launch, 0.68 in process, searches 26% of the writer's time.",
        "",
        "The run from launch also pays the command's start (in the first table), which does not grow with the",
        "input; its larger part is importing lancedb, most of that in the REST client of lance-namespace, which",
        "lancedb imports whole. On the 30 pages of earlier runs (1,627 texts, 15 s of embedding) the start alone",
        "held the ratio from launch near 0.8; the default sample is now 100 pages, closer to what a corpus costs.",
        *_rounds(result),
        "",
        f"- `streamdedup index` embeddings/s from launch / the bare embedder's on the same texts: "
        f"{result['ratio_to_bare']:.2f} (in process: {result['ratio_to_bare_in_process']:.2f}"
        + (
            f"; from launch less the command's start: {result['ratio_to_bare_after_start']:.2f}). Target 0.9: "
            f"{check(result['ratio_to_bare'] >= 0.9)}."
            if start
            else ")."
        ),
        f"- Replay embeds nothing: {replay['embedded']:,} texts, {check(replay['embedded'] == 0)}.",
        "",
    ]


def _rounds(result: dict[str, Any]) -> list[str]:
    """The rounds of the command from launch, each beside the bare embedder's runs on either side of it."""
    cli, bare = result["cli"], result["bare"]
    ratios, seconds, around = cli.get("rounds_ratios"), cli.get("rounds_seconds"), bare.get("rounds_seconds")
    if not ratios or not seconds or not around:
        return []
    texts = bare["texts"]
    rows = [
        f"| {n + 1} | {seconds[n]:.1f} | {texts / around[n]:.1f} | {texts / around[n + 1]:.1f} | {ratio:.2f} |"
        for n, ratio in enumerate(ratios)
    ]
    return [
        "",
        "The command from launch, round by round, between runs of the bare embedder on the same texts (the median",
        "round is the figure):",
        "",
        "| round | seconds from launch | bare embedder before, embeddings/s | after | ratio |",
        "|---:|---:|---:|---:|---:|",
        *rows,
    ]


def _threads(threads: int) -> str:
    return "one thread" if threads == 1 else f"{threads} threads, one per core"


def _count(value: int | None) -> str:
    return f"{value:,}" if value else ""


def _index_replay(replay: dict[str, Any], cli_seconds: float) -> list[str]:
    timed = replay.get("timed")
    if not timed:
        return []
    parts, calls, items = timed["parts"], timed.get("calls", {}), timed.get("items", {})
    database = sum(parts.get(name, 0.0) for name in ("upsert", "update_metadata", "delete", "search", "rows",
                                                      "optimize"))  # fmt: skip
    view = sum(parts.get(name, 0.0) for name in ("view stage", "view commit", "vector cache"))
    writes = ", ".join(
        f"{name} {calls[name]:,} ({items.get(name, 0):,} {unit})"
        for name, unit in (
            ("upsert", "rows"),
            ("update_metadata", "rows"),
            ("delete", "ids"),
            ("search", "rows"),
        )
        if calls.get(name)
    )
    return [
        "The replay reads the same file under a name the writer has not read, into the same index: every record "
        "is applied again and every vector comes from the writer's cache. Its time from launch is mostly the "
        f"command's start (interpreter, imports, the model): {replay['seconds']:.1f} s of the first run's "
        f"{cli_seconds:.1f} s. In process it took {timed['seconds']:.1f} s ({timed['embedded']:,} texts embedded): "
        f"database {database:.2f} s, view and cache {view:.2f} s, other {parts.get('other', 0.0):.2f} s"
        + (
            f". The sink calls it made ({writes}) come from the superseded records the file also holds: applied "
            "again over the final view, a batch brings back for a while chunks that later records removed (written "
            "again from the cache, searched for semantic neighbours, deleted again) and earlier metadata of rows "
            "that later records set right again."
            if writes
            else "; it wrote nothing to the sink."
        ),
        "",
    ]
