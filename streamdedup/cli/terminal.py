"""What the commands of the ``streamdedup`` command line share: the error console, the settings, the error guard."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import typer

from streamdedup.errors import StreamDedupError

if TYPE_CHECKING:
    from rich.console import Console

    from streamdedup.settings import Settings

__all__ = ["err", "guard", "settings_of"]


@functools.cache
def err() -> Console:
    """Return the console for errors, made on first use (the worker never needs one)."""
    from rich.console import Console

    return Console(stderr=True)


def settings_of(ctx: typer.Context) -> Settings:
    """Return the settings the command line's root callback made for this command."""
    settings: Settings = ctx.obj
    return settings


def guard(action: Any) -> None:
    """Run ``action``; report a :class:`~streamdedup.errors.StreamDedupError` on the error console and exit 1."""
    try:
        action()
    except StreamDedupError as exc:
        from rich.markup import escape

        err().print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from exc
