"""The progress display that every long command shows."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn

__all__ = ["progress_bar"]


def progress_bar(console: Console, done: ProgressColumn, *, label: str = "dedup") -> Progress:
    """Return the progress display of long commands: what, a bar, how much is done, and the time left."""
    return Progress(
        TextColumn(f"[bold]{label}[/bold] {{task.description}}"),
        BarColumn(),
        done,
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
