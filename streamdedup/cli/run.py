"""``streamdedup run``: the embedded runner over a JSONL file, with progress and a summary table."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from streamdedup.core.engine import Engine
from streamdedup.drivers.embedded import EmbeddedRunner, RunCounters
from streamdedup.drivers.jsonl import FileSink, RunReport, run_file
from streamdedup.errors import ConfigurationError
from streamdedup.settings import Settings
from streamdedup.store.rocksdb import RocksDBStore

__all__ = ["run_command", "summary_table"]


def run_command(settings: Settings, source: Path, state: Path, out: str, console: Console) -> None:
    """Run the engine over ``source`` with state in ``state``, appending outputs to ``out``."""
    if source.is_dir():
        console.print(f"[red]error:[/red] {source} is a directory; give a JSONL file of input events")
        raise SystemExit(2)
    engine = Engine(settings.engine_params())
    store = RocksDBStore(state)
    sink: FileSink | None = None
    started = time.monotonic()
    try:
        runner = EmbeddedRunner(engine, store, where=str(state))
        if runner.counters.events == 0 and out != "-" and Path(out).exists() and Path(out).stat().st_size:
            raise ConfigurationError(
                f"{out} already holds outputs, but the state at {state} is new: appending would mix two "
                "histories in one file; remove it or choose another --out"
            )
        sink = FileSink(out)
        with Progress(
            TextColumn("[bold]dedup[/bold] {task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task(source.name, total=source.stat().st_size)
            report = run_file(
                runner,
                source,
                sink,
                batch_size=settings.batch_size,
                max_event_bytes=settings.max_event_bytes,
                progress=lambda done: progress.update(task, completed=done),
            )
        counters = runner.counters
    finally:
        if sink is not None:
            sink.close()
        store.close()
    console.print(summary_table(report, counters, time.monotonic() - started))
    if out != "-":
        console.print(f"outputs appended to {out}; state in {state}")


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
