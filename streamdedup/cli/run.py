"""``streamdedup run``: the embedded runner over a JSONL file or a folder, with progress and a summary table."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import ExitStack, closing
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.progress import DownloadColumn, MofNCompleteColumn, ProgressColumn
from rich.table import Table

from streamdedup.cli.progress import progress_bar
from streamdedup.contract.cdc import load_feeds
from streamdedup.convert.pool import Converter
from streamdedup.drivers.embedded import RunCounters, Runner
from streamdedup.drivers.feeds import RunReport, run_feed
from streamdedup.drivers.folder import FolderFeed
from streamdedup.drivers.jsonl import FileSink, JsonlFeed, opened_state
from streamdedup.drivers.rebuild import REBUILD_META, RetainedFeed, rebuild_position
from streamdedup.errors import ConfigurationError
from streamdedup.settings import Settings

__all__ = ["run_command", "summary_table"]


def input_feed(settings: Settings, source: Path, collection: str | None) -> JsonlFeed | FolderFeed:
    """Return the feed of INPUT as every command reads it: a JSONL file of events, or a folder of documents;
    either converts documents' bytes to text with the settings' bounds."""
    converter = Converter(settings.convert_limits())
    if source.is_dir():
        return FolderFeed(
            source,
            collection or source.resolve().name,
            default_acl=settings.folder_acl,
            limits=settings.event_limits(),
            converter=converter,
        )
    return JsonlFeed(source, settings.event_limits(), converter=converter)


def feed_progress(feed: JsonlFeed | FolderFeed) -> ProgressColumn:
    """Return how a feed's progress is counted: files of a folder, bytes of a file."""
    return MofNCompleteColumn() if isinstance(feed, FolderFeed) else DownloadColumn()


def run_command(
    settings: Settings,
    source: Path | None,
    state: Path,
    out: str,
    console: Console,
    *,
    watch: bool = False,
    collection: str | None = None,
    feed_name: str | None = None,
    rebuild_from: Path | None = None,
) -> None:
    """Run the engine over a JSONL file (of a feed's change events, with ``feed_name``) or a folder, with state in
    ``state``, appending outputs to ``out``; with ``rebuild_from``, first build the state from that state's
    retained record (:mod:`streamdedup.drivers.rebuild`)."""
    started = time.monotonic()
    if rebuild_from is not None:
        report = RunReport()
        with opened_state(settings, state, out) as (runner, sink):
            _rebuild(rebuild_from, state, runner, sink, settings, report, console)
            counters = runner.counters
        if source is None:
            _summary(console, report, counters, time.monotonic() - started, out, state)
            return
    if source is None:
        raise ConfigurationError("give INPUT, a JSONL file or a folder (or --rebuild-from OLD_STATE)")
    if feed_name is not None and (source.is_dir() or settings.feeds is None):
        raise ConfigurationError(
            "--feed reads a file of change events, mapped by the feeds file (STREAMDEDUP_FEEDS or --set feeds=FILE)"
        )
    if not source.is_dir():
        if watch:
            raise ConfigurationError("--watch needs a folder to watch, not a file")
        limits = settings.event_limits()
        decode = None
        if feed_name is not None:
            assert settings.feeds is not None
            decode = load_feeds(settings.feeds, limits).named(feed_name).decode
        report = RunReport()
        feed = JsonlFeed(source, limits, decode, Converter(settings.convert_limits()))
        with opened_state(settings, state, out) as (runner, sink), closing(feed.converter):
            _run_feed(feed, runner, sink, settings, report, console)
            counters = runner.counters
    else:
        folder = input_feed(settings, source, collection)
        assert isinstance(folder, FolderFeed)
        report = RunReport()
        with opened_state(settings, state, out) as (runner, sink), closing(folder.converter):
            folder.load(runner.store.get_meta(folder.meta_key))
            _run_feed(folder, runner, sink, settings, report, console)
            if watch:
                console.print(f"watching {source} (Ctrl-C to stop); outputs go to {out}")
                _watch(folder, runner, sink, settings, report, console)
            counters = runner.counters
    _summary(console, report, counters, time.monotonic() - started, out, state)


def _summary(
    console: Console, report: RunReport, counters: RunCounters, seconds: float, out: str, state: Path
) -> None:
    console.print(summary_table(report, counters, seconds))
    if out != "-":
        console.print(f"outputs appended to {out}; state in {state}")


def _rebuild(
    old: Path,
    state: Path,
    runner: Runner,
    sink: FileSink,
    settings: Settings,
    report: RunReport,
    console: Console,
) -> None:
    """Build a new state from ``old``'s retained record, or go on with a rebuild cut short; a finished one is kept."""
    if old.resolve() == state.resolve():
        raise ConfigurationError("--rebuild-from names the state itself: rebuild into a new state directory")
    position = rebuild_position(runner.store.get_meta(REBUILD_META))
    if position is None and runner.counters.events:
        raise ConfigurationError(
            f"the state at {state} already holds a run: a rebuild goes into a new state directory"
        )
    if position is not None and position["from"] != str(old.resolve()):
        raise ConfigurationError(f"the state at {state} was built from {position['from']}, not from {old}")
    if position is not None and position["done"] == position["total"]:
        console.print(f"{state} was already built from {old}; taking new input only")
        return
    done = 0 if position is None else int(str(position["done"]))
    if position is not None:
        console.print(f"going on with the rebuild from {old} after {done:,} of {position['total']} events")
    else:
        console.print(f"building {state} from the retained record of {old}")
    _run_feed(RetainedFeed(old, done), runner, sink, settings, report, console)


def _run_feed(
    feed: JsonlFeed | FolderFeed | RetainedFeed,
    runner: Runner,
    sink: FileSink,
    settings: Settings,
    report: RunReport,
    console: Console,
) -> int:
    """Run a feed with a progress bar (bytes of a file, files of a folder); return the events it held."""
    column = DownloadColumn() if isinstance(feed, JsonlFeed) else MofNCompleteColumn()
    if isinstance(feed, RetainedFeed):
        label = f"rebuild from {feed.old}"
    else:
        label = feed.path.name if isinstance(feed, JsonlFeed) else str(feed.root)
    before = report.events + report.dead_letters
    with ExitStack() as stack:
        progress = progress_bar(console, column)
        task = progress.add_task(label, total=None)

        def start(total: int) -> None:
            if total:  # a folder with nothing new shows nothing
                stack.enter_context(progress)
                progress.update(task, total=total)

        run_feed(
            runner,
            feed,
            sink,
            batch_size=settings.batch_size,
            batch_chars=settings.batch_chars,
            report=report,
            start=start,
            progress=lambda done: progress.update(task, completed=done),
        )
    return report.events + report.dead_letters - before


def _watch(
    feed: FolderFeed,
    runner: Runner,
    sink: FileSink,
    settings: Settings,
    report: RunReport,
    console: Console,
) -> None:
    import watchfiles  # noqa: PLC0415 - only --watch needs it: a run without it does not load it

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        # Empty change sets arrive every few seconds when nothing happens: each pass rescans the folder, which
        # also catches anything that changed before the watcher was ready.
        for _changes in watchfiles.watch(
            feed.root,
            stop_event=stop,
            debounce=100,
            step=20,
            rust_timeout=3000,
            yield_on_timeout=True,
            raise_interrupt=False,
        ):
            applied = _run_feed(feed, runner, sink, settings, report, console)
            if applied:
                console.print(f"{applied} change(s) applied; {runner.counters.chunks:,} canonical chunks")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def summary_table(report: RunReport, counters: RunCounters, seconds: float) -> Table:
    """Return the summary of a run: this run's input, and what the state now holds."""
    table = Table(title="streamdedup run", show_header=True, header_style="bold")
    table.add_column("")
    table.add_column("this run", justify="right")
    table.add_column("state total", justify="right")
    rate = f" ({report.events / seconds:,.0f}/s)" if seconds > 0 and report.events else ""
    table.add_row("events", f"{report.events:,}{rate}", f"{counters.events:,}")
    table.add_row("dead letters", f"{report.dead_letters:,}", f"{counters.dead_letters:,}")
    table.add_row("chunks (live positions)", "", f"{counters.positions:,}")
    table.add_row("exact copies", "", f"{counters.exact:,}")
    table.add_row("near copies", "", f"{counters.near:,}")
    table.add_row("canonical chunks", "", f"{counters.chunks:,}")
    flags = ", ".join(f"{reason} {count}" for reason, count in sorted(counters.flags.items())) or "0"
    table.add_row("review flags", "", flags)
    table.add_row("embedding calls saved", "", f"{counters.embedding_calls_saved:,}")
    return table
