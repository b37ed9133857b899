"""``streamdedup eval``: BM25 top-k over every chunk position against top-k over canonical chunks only.

The engine runs embedded over the input with its state in memory. The view of its outputs gives the live
positions, the canonical chunks and the review flags; each live document is cut into its positions again as the
``source`` stage cut it, with the boilerplate lines its collection stripped at the time. The measuring is
:mod:`streamdedup.query.evaluation`'s; the index of canonical chunks is also searched with ``current_only`` (its
chunks that only outdated versions of a document hold filtered out), and each top-k's outdated share reported.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.progress import MofNCompleteColumn, ProgressColumn
from rich.table import Table

from streamdedup.cli.progress import progress_bar
from streamdedup.cli.run import feed_progress, input_feed
from streamdedup.core.chunking import Chunk
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.model import UpsertEvent
from streamdedup.core.output_view import View
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.collection import CollectionStage, collection_key
from streamdedup.core.state import CollectionRecord
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.feeds import Feed, FeedItem, run_feed
from streamdedup.errors import StreamDedupError
from streamdedup.query.evaluation import (
    MAX_GENERATED_QUERIES,
    Evaluation,
    chunk_passages,
    document_positions,
    evaluate,
    heading_queries,
    position_passages,
)
from streamdedup.settings import Settings
from streamdedup.store.base import Store
from streamdedup.store.memory import MemoryStore

__all__ = ["eval_command", "evaluation_table"]

_PARTITION = 0  # the embedded runner keeps every stage in partition 0


class _RecordingFeed:
    """A feed that keeps every upsert it hands out, with the boilerplate lines stripped from it when applied."""

    def __init__(self, feed: Feed, store: Store, params: EngineParams) -> None:
        self._feed, self._store, self._params = feed, store, params
        self.upserts: dict[str, list[tuple[UpsertEvent, frozenset[str]]]] = {}

    def open(self) -> tuple[int, Iterator[FeedItem]]:
        """Open the feed it records."""
        return self._feed.open()

    def consumed(self, items: Sequence[FeedItem]) -> dict[str, bytes]:
        """Record the batch's upserts; the runner applies them next, so the state still holds their lists."""
        lists: dict[str, frozenset[str]] = {}
        for item in items:
            event = item.item
            if not isinstance(event, UpsertEvent):
                continue
            if event.collection not in lists:
                lists[event.collection] = self._boilerplate(event.collection)
            self.upserts.setdefault(event.source_id, []).append((event, lists[event.collection]))
        return self._feed.consumed(items)

    def _boilerplate(self, collection: str) -> frozenset[str]:
        if self._params.boilerplate_min_docs == 0:
            return frozenset()
        raw = self._store.get(CollectionStage.name, _PARTITION, collection_key(collection))
        if raw is None:
            return frozenset()
        return frozenset(msgspec.msgpack.decode(raw, type=CollectionRecord).boilerplate)

    def live(
        self, mappings: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, tuple[UpsertEvent, frozenset[str]]]:
        """Return, per live source, the upsert its mapping answers for: the newest at or below its version."""
        found = {}
        for source_id, mapping in mappings.items():
            applied = [u for u in self.upserts.get(source_id, ()) if u[0].version <= mapping["version"]]
            if applied:
                # max keeps the first of equal versions, the one the engine applied
                found[source_id] = max(applied, key=lambda u: u[0].version)
        return found


def _feed(settings: Settings, source: Path, collection: str | None) -> tuple[Feed, str, ProgressColumn]:
    feed = input_feed(settings, source, collection)
    return feed, str(source) if source.is_dir() else source.name, feed_progress(feed)


def _run_engine(
    settings: Settings, source: Path, collection: str | None, console: Console
) -> tuple[View, dict[str, tuple[UpsertEvent, frozenset[str]]]]:
    """Run the engine over the input with state in memory; return the view and each live source's upsert.

    The state is dropped on return: what comes next needs only the outputs and the documents.
    """
    engine = Engine(settings.engine_params(), **settings.engine_options())
    store = MemoryStore()
    runner = EmbeddedRunner(engine, store)
    inner, label, column = _feed(settings, source, collection)
    feed = _RecordingFeed(inner, store, engine.params)
    view = View()

    def sink(outputs: list[Output]) -> None:
        view.apply_all(outputs)

    with progress_bar(console, column, label="eval") as progress:
        task = progress.add_task(f"engine {label}", total=None)
        run_feed(
            runner,
            feed,
            sink,
            batch_size=settings.batch_size,
            batch_chars=settings.batch_chars,
            start=lambda total: progress.update(task, total=total),
            progress=lambda done: progress.update(task, completed=done),
        )
    store.close()
    return view, feed.live(view.mappings)


def _read_queries(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StreamDedupError(f"cannot read queries from {path}: {exc}") from exc
    return [line.strip() for line in text.splitlines() if line.strip()]


def eval_command(
    settings: Settings,
    source: Path,
    queries: Path | None,
    k: int,
    json_out: Path | None,
    console: Console,
    *,
    collection: str | None = None,
) -> None:
    """Run the engine over a JSONL file or a folder, search both indexes, print the figures (and write JSON)."""
    started = time.monotonic()
    view, live = _run_engine(settings, source, collection, console)
    params = settings.engine_params()
    chunked: dict[str, list[Chunk]] = {}
    with progress_bar(console, MofNCompleteColumn(), label="eval") as progress:
        task = progress.add_task("positions", total=len(live))
        for source_id, (event, boilerplate) in live.items():
            chunked[source_id] = document_positions(event, params, boilerplate)
            progress.advance(task)
    positions = position_passages(chunked, view.mappings)
    chunks = chunk_passages(positions, view.chunks, view.mappings)

    if queries is not None:
        query_list, origin = _read_queries(queries), str(queries)
    else:
        documents = [live[source_id][0] for source_id in sorted(live)]
        query_list = heading_queries(documents, MAX_GENERATED_QUERIES)
        origin = f"headings (at most {MAX_GENERATED_QUERIES})"
    if not query_list:
        raise StreamDedupError(
            f"no queries in {queries}"
            if queries is not None
            else "no queries: the corpus has no headings to make them from; pass --queries FILE"
        )

    with progress_bar(console, MofNCompleteColumn(), label="eval") as progress:
        task = progress.add_task("queries", total=len(query_list))
        result = evaluate(
            positions,
            chunks,
            query_list,
            k=k,
            reviews=view.reviews,
            progress=lambda done: progress.update(task, completed=done),
        )
    seconds = time.monotonic() - started

    console.print(evaluation_table(result, f"{len(query_list):,} queries from {origin}"))
    if view.dead_letters:
        console.print(f"{view.dead_letters:,} input(s) dead-lettered: not indexed")
    if json_out is not None:
        data = {
            "input": str(source),
            "queries_from": origin,
            "seconds": round(seconds, 3),
            **result.as_dict(),
        }
        json_out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        console.print(f"figures written to {json_out}")
    console.print(f"evaluated in {seconds:.1f} s")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _change(without: float | None, with_: float | None, *, percent: bool = False) -> str:
    if without is None or with_ is None:
        return ""
    return f"{(with_ - without) * 100:+.1f} pt" if percent else f"{with_ - without:+.2f}"


def evaluation_table(result: Evaluation, queries: str) -> Table:
    """Return both indexes' figures side by side, with the difference dedup makes, and the current-only search."""
    table = Table(
        title=f"streamdedup eval: BM25 top-{result.k}, {queries}",
        caption="without dedup: an entry per live chunk position; with dedup: an entry per canonical chunk; "
        "current only: with dedup, the chunks only outdated versions of a document hold filtered out",
        header_style="bold",
    )
    table.add_column("", no_wrap=True)
    table.add_column("without dedup", justify="right")
    table.add_column("with dedup", justify="right")
    table.add_column("difference", justify="right")
    table.add_column("current only", justify="right")
    w, d, c = result.without_dedup, result.with_dedup, result.current_only
    n = len(result.queries)
    saved = result.embedding_calls_saved
    table.add_row(
        "entries (embedding calls)", f"{w.entries:,}", f"{d.entries:,}", f"{-saved:+,}", f"{c.entries:,}"
    )
    share = f" ({saved / w.entries:.1%})" if w.entries else ""
    table.add_row("embedding calls saved", "", f"{saved:,}{share}", "", "")
    table.add_row(
        "queries with results",
        f"{w.queries_with_results:,} of {n:,}",
        f"{d.queries_with_results:,} of {n:,}",
        "",
        f"{c.queries_with_results:,} of {n:,}",
    )
    table.add_row(
        "results", f"{w.results:,}", f"{d.results:,}", f"{d.results - w.results:+,}", f"{c.results:,}"
    )
    rows = [
        ("redundant results", "redundant_results", "count"),
        ("redundant share (mean)", "redundant_share", "share"),
        ("queries with redundancy", "queries_with_redundancy", "count"),
        ("outdated results", "outdated_results", "count"),
        ("outdated share (mean)", "outdated_share", "share"),
        ("queries with outdated results", "queries_with_outdated", "count"),
        ("distinct chunks (mean)", "distinct_chunks", "mean"),
        ("unique sources (mean)", "unique_sources", "mean"),
    ]
    for label, name, kind in rows:
        x, y, z = (getattr(f, name) for f in (w, d, c))
        if kind == "count":
            table.add_row(label, f"{x:,}", f"{y:,}", f"{y - x:+,}", f"{z:,}")
        else:
            shown = _share if kind == "share" else _mean
            table.add_row(label, shown(x), shown(y), _change(x, y, percent=kind == "share"), shown(z))
    for reason, count in result.review_flags.items():
        table.add_row(f"review flags: {reason}", "", f"{count:,}", "", "")
    return table
