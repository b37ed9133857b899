"""``streamdedup calibrate``: what each threshold would merge and flag, as plots, a page, JSON and a table.

The texts come from an input (a JSONL file of input events or a folder, cut into chunks by the engine's own
stages) or from a state directory written by ``streamdedup run``, opened read-only, so a run may hold it at the
same time. The computation is :mod:`streamdedup.query.calibration`'s; this module reads, draws and writes. The plots
need matplotlib, an optional dependency (the ``calibrate`` extra), imported only when the command runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import msgspec
import rocksdict
from rich.console import Console
from rich.markup import escape
from rich.progress import MofNCompleteColumn, TaskID
from rich.table import Table

from streamdedup.cli.calibration_report import JSON_FILE, PAGE_FILE, page, write_plots
from streamdedup.cli.progress import progress_bar
from streamdedup.cli.run import feed_progress, input_feed
from streamdedup.core.facts import fact_tokens
from streamdedup.core.messages import Output
from streamdedup.core.model import InputEvent
from streamdedup.core.params import EngineParams, candidate_probability, describe_mismatch
from streamdedup.core.policy import CanonicalPolicy
from streamdedup.core.state import ContentRecord
from streamdedup.drivers.feeds import cut_batches
from streamdedup.errors import ConfigurationError, StateError, StateMismatchError
from streamdedup.query.calibration import (
    BIN_WIDTH,
    LOWEST_THRESHOLD,
    RULE,
    Calibration,
    VerifiedPair,
    calibrate,
    candidate_banding,
    pair_outcome,
    word_diff,
)
from streamdedup.query.corpus import Corpus, corpus_from_contents, corpus_from_events
from streamdedup.settings import Settings
from streamdedup.store.base import PARAMS_KEY
from streamdedup.store.rocksdb import read_only

__all__ = ["calibrate_command", "figures", "read_state_corpus", "summary_table"]

_STEPS = {
    "signatures": "signatures",
    "bands": "LSH bands",
    "verification": "verifying pairs",
    "thresholds": "thresholds",
}


def calibrate_command(
    settings: Settings,
    input: Path | None,
    state: Path | None,
    out: Path,
    samples: int,
    console: Console,
    *,
    collection: str | None = None,
) -> None:
    """Calibrate on INPUT or on the texts of ``state``; write the plots, index.html and JSON to ``out``."""
    started = time.monotonic()
    _check_matplotlib()
    params = settings.engine_params()
    if state is not None:
        corpus = read_state_corpus(state, params, console)
        described = {"kind": "state", "path": str(state)}
    elif input is not None:
        corpus = _input_corpus(settings, input, collection, console)
        described = {"kind": "input", "path": str(input)}
    else:
        raise ConfigurationError("give exactly one of INPUT and --state")
    with progress_bar(console, MofNCompleteColumn(), label="calibrate") as progress:
        tasks: dict[str, TaskID] = {}

        def report(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = progress.add_task(_STEPS.get(step, step), total=total)
            progress.update(tasks[step], completed=done, total=total)

        result = calibrate(corpus, params, samples=samples, progress=report)
    out.mkdir(parents=True, exist_ok=True)
    data = {**figures(result), "input": described}
    write_plots(result, out)
    data["seconds"] = round(time.monotonic() - started, 3)
    (out / JSON_FILE).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / PAGE_FILE).write_text(page(data), encoding="utf-8")
    console.print(summary_table(result))
    suggestion = result.suggestion
    console.print(f"[bold]suggested threshold {suggestion.threshold:.2f}[/bold]: {escape(suggestion.reason)}")
    console.print(
        f"wrote {escape(str(out / PAGE_FILE))} with its plots and {escape(JSON_FILE)} in {data['seconds']:.1f} s"
    )


def figures(result: Calibration) -> dict[str, Any]:
    """Return a calibration's figures as plain data: what the JSON file holds and the page shows."""
    params = result.params
    bands, rows = candidate_banding(params)
    by_hash = {t.content_hash: t for t in result.corpus.texts}

    def side(content_hash: str) -> dict[str, Any]:
        text = by_hash[content_hash]
        return {
            "content_hash": content_hash,
            "source_id": text.rank.source_id,
            "readers": list(text.readers),
            "positions": text.positions,
            "facts": fact_tokens(text.norm),
            "text": text.text,
        }

    def sample(pair: VerifiedPair) -> dict[str, Any]:
        diff = word_diff(by_hash[pair.better].text, by_hash[pair.worse].text)
        return {
            "jaccard": pair.jaccard,
            "outcome": pair_outcome(pair, params.threshold),
            "better": side(pair.better),
            "worse": side(pair.worse),
            "diff": [[op.tag, op.a, op.b] for op in diff],
        }

    corpus = result.corpus
    return {
        "schema": "streamdedup.query.calibration/v1",
        "threshold": params.threshold,
        "parameters": {
            "shingle_size": params.shingle_size,
            "num_perm": params.num_perm,
            "seed": params.seed,
            "min_shingles": params.min_shingles,
            "canonical_policy": list(params.canonical_policy),
            "engine_banding": {
                "bands": params.bands,
                "rows": params.rows,
                "recall_at_threshold": params.recall_at_threshold,
            },
            "candidate_banding": {
                "bands": bands,
                "rows": rows,
                "for_threshold": LOWEST_THRESHOLD,
                "recall_at_lowest": candidate_probability(LOWEST_THRESHOLD, bands, rows),
                "recall_at_threshold": candidate_probability(params.threshold, bands, rows),
            },
        },
        "corpus": {
            "positions": corpus.positions,
            "texts": len(corpus.texts),
            "exact_copies": corpus.positions - len(corpus.texts),
            "candidate_pairs": result.candidates,
            "verified_pairs_in_range": sum(1 for p in result.pairs if p.jaccard >= LOWEST_THRESHOLD),
        },
        "histogram": {"bin_width": BIN_WIDTH, "counts": result.histogram},
        "thresholds": [{**asdict(r), "reduction": r.reduction} for r in result.rows],
        "suggestion": {**asdict(result.suggestion), "rule": RULE},
        "samples": {"above": [sample(p) for p in result.above], "below": [sample(p) for p in result.below]},
    }


def summary_table(result: Calibration) -> Table:
    """Return the console's table: the outcome at each threshold, the current and suggested ones marked."""
    current, suggested = result.params.threshold, result.suggestion.threshold
    table = Table(
        title=f"calibration: {len(result.corpus.texts):,} distinct texts, {result.corpus.positions:,} positions",
        caption="◆ current threshold  ★ suggested",
        header_style="bold",
        box=None,
        pad_edge=False,
    )
    for name in ("threshold", "pairs", "merged", "fact flags", "acl flags", "chunks", "reduction"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for row in result.rows:
        marks = "".join(
            mark for mark, value in (("◆", current), ("★", suggested)) if abs(row.threshold - value) < 1e-9
        )
        table.add_row(
            f"{row.threshold:.2f}",
            f"{row.pairs:,}",
            f"{row.merged:,}",
            f"{row.fact_conflict:,}",
            f"{row.acl_boundary:,}",
            f"{row.chunks:,}",
            f"{row.reduction:.2%}",
            marks,
        )
    return table


def _check_matplotlib() -> None:
    """Fail before any long work if the plots cannot be drawn."""
    try:
        import matplotlib  # noqa: PLC0415 - an optional dependency, loaded only by this command
    except ImportError as exc:
        raise ConfigurationError(
            "calibrate draws its plots with matplotlib, which is not installed: "
            "pip install 'streamdedup[calibrate]'"
        ) from exc
    del matplotlib


def _input_corpus(settings: Settings, source: Path, collection: str | None, console: Console) -> Corpus:
    """Cut INPUT into texts with the engine's stages, batch by batch as ``run`` does, with a progress bar."""
    feed = input_feed(settings, source, collection)
    column = feed_progress(feed)
    letters = 0
    with progress_bar(console, column, label="calibrate") as progress:
        total, items = feed.open()
        task = progress.add_task(f"reading {source.name}", total=total or None)

        def batches() -> Iterator[list[InputEvent]]:
            # Batches count dead letters as run's do, so boilerplate learned in one batch applies from the next.
            nonlocal letters
            for batch in cut_batches(items, settings.batch_size, settings.batch_chars):
                events = [i.item for i in batch if not isinstance(i.item, Output)]
                letters += len(batch) - len(events)
                if events:  # a batch of dead letters alone changes nothing
                    yield events
                progress.update(task, completed=batch[-1].done)
            progress.update(task, completed=total)

        corpus = corpus_from_events(batches(), settings.engine_params())
    if letters:
        console.print(
            f"{letters:,} input item(s) were not valid events and are left out (a run dead-letters them)"
        )
    return corpus


def read_state_corpus(state: Path, params: EngineParams, console: Console) -> Corpus:
    """Return the live texts of a state directory written by ``run``, opened read-only.

    The texts are calibrated under ``params``; where the state was built under others, the console says which.
    Nothing of the state is written, and a run may hold it meanwhile (rocksdict rewrites its own small config
    file on every open, with what the store wrote there).
    """
    with read_only(state, ("content", "meta")) as rdict:
        raw = rdict.get_column_family("meta").get(PARAMS_KEY.encode("utf-8"))
        if raw is None:
            raise StateError(
                f"the state at {state} records no engine parameters; it was not written by 'run'"
            )
        _compare(json.loads(raw), params, state, console)
        records = _content_records(rdict.get_column_family("content"))
        corpus = corpus_from_contents(records, CanonicalPolicy(params.canonical_policy))
    return corpus


def _compare(stored: dict[str, Any], params: EngineParams, state: Path, console: Console) -> None:
    """Refuse a state of another format; name the parameters it was built under that differ from ``params``."""
    wanted = params.fingerprint()
    if stored.get("format") != wanted["format"]:
        raise StateMismatchError(
            f"the state at {state} has format {stored.get('format')} (this version reads format "
            f"{wanted['format']}): its texts were normalized differently"
        )
    # What a calibration explores, or never uses, is left out: only what changes the texts or their pairs counts.
    explored = {"threshold", "bands", "rows", "lsh_min_recall", "max_candidates", "max_chunk_sources"}
    differences = describe_mismatch(
        {k: v for k, v in stored.items() if k not in explored},
        {k: v for k, v in wanted.items() if k not in explored},
    )
    if differences is not None:
        console.print(
            escape(
                f"note: the state at {state} was built with {differences}; the calibration uses the settings"
            )
        )


def _content_records(family: rocksdict.Rdict) -> Iterator[tuple[str, ContentRecord]]:
    """Yield every content record of the content stage, in every partition the store holds."""
    decoder = msgspec.msgpack.Decoder(ContentRecord)
    for address, value in family.items():
        if not isinstance(address, bytes) or not isinstance(value, bytes):  # pragma: no cover - raw mode
            continue
        key = address[2:].decode("utf-8")  # keys are the partition (two bytes), then the UTF-8 key
        # A content record's key is its content hash; the stage's other records (refs, ids) have NUL-separated keys.
        if "\x00" not in key:
            yield key, decoder.decode(value)
