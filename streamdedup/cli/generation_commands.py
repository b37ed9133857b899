"""``streamdedup generations``: build a deployment's next generation under other parameters from its retained
record, follow it to lag 0, switch readers to it, and retire the old one (docs/generations.md)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Annotated

import typer

from streamdedup.cli.terminal import err, guard, settings_of

if TYPE_CHECKING:
    from streamdedup.settings import Settings

__all__ = ["generations_app"]

generations_app = typer.Typer(
    help="Rebuild a deployment under other parameters beside the serving one, with no event sent again.",
    no_args_is_help=True,
)


@generations_app.command()
def create(
    ctx: typer.Context,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for the serving generation's workers to reach the cut.")
    ] = 600.0,
) -> None:
    """Create the next generation under the engine settings given (e.g. 'streamdedup --set threshold=0.85
    generations create'), seeded from the serving generation's retained record; then start its workers with
    STREAMDEDUP_GENERATION=N."""
    from streamdedup.drivers.kafka.generations import create_generation

    settings = settings_of(ctx)

    def action() -> None:
        console = err()
        made = asyncio.run(
            create_generation(settings, settings.engine_params(), say=console.print, timeout=timeout)
        )
        console.print(
            f"generation {made.generation} created from generation {made.built_from}'s retained record "
            f"({made.seeded:,} events); start its workers with STREAMDEDUP_GENERATION={made.generation}, "
            "then follow it with 'streamdedup generations status --watch'"
        )

    guard(action)


@generations_app.command()
def status(
    ctx: typer.Context,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="Follow the newest generation with a progress bar until its lag is 0."),
    ] = False,
    timeout: Annotated[float, typer.Option(help="With --watch: give up after this many seconds.")] = 3600.0,
) -> None:
    """Show each generation: its parameters, messages done and still to do (lag), and which one serves."""
    from rich.table import Table

    from streamdedup.drivers.kafka.generations import generation_status

    settings = settings_of(ctx)

    def action() -> None:
        found = asyncio.run(generation_status(settings))
        table = Table(title="generations")
        for column in ("generation", "status", "serving", "differs from generation 1", "done", "lag"):
            table.add_column(column)
        first = found[0].params if found and found[0].generation == 1 else {}
        for row in found:
            differs = ", ".join(
                f"{k}={v}" for k, v in sorted(row.params.items()) if first and first.get(k) != v
            )
            lag = "starting" if row.lag < 0 else f"{row.lag:,}"
            table.add_row(
                str(row.generation), row.status, "yes" if row.serving else "", differs, f"{row.done:,}", lag
            )
        err().print(table)
        if watch and found:
            _watch(settings, found[-1].generation, timeout)

    guard(action)


def _watch(settings: Settings, generation: int, timeout: float) -> None:
    """A progress bar of one generation's messages done, with the time to go, until its lag is 0."""
    from rich.progress import MofNCompleteColumn

    from streamdedup.cli.progress import progress_bar
    from streamdedup.drivers.kafka.generations import generation_status
    from streamdedup.errors import StateError

    deadline = time.monotonic() + timeout
    console = err()
    with progress_bar(console, MofNCompleteColumn(), label=f"generation {generation}") as progress:
        task = progress.add_task("messages", total=None)
        while True:
            rows = {r.generation: r for r in asyncio.run(generation_status(settings))}
            row = rows.get(generation)
            if row is None:
                raise StateError(f"generation {generation} is gone")
            if row.lag >= 0:
                progress.update(task, total=row.done + row.lag, completed=row.done)
                if row.lag == 0:
                    break
            if time.monotonic() > deadline:
                raise StateError(f"generation {generation} did not reach lag 0 within {timeout:.0f} s")
            time.sleep(1.0)
    console.print(f"generation {generation}: lag 0 ({row.done:,} messages done)")


@generations_app.command()
def switch(
    ctx: typer.Context,
    generation: Annotated[int, typer.Argument(help="The generation readers read from now on.")],
    force: Annotated[bool, typer.Option("--force", help="Switch even if its lag is not 0.")] = False,
) -> None:
    """Make a generation the serving one (readers that name no generation read it); only at lag 0."""
    from streamdedup.drivers.kafka.generations import switch_generation

    settings = settings_of(ctx)

    def action() -> None:
        asyncio.run(switch_generation(settings, generation, force=force))
        err().print(f"generation {generation} serves the readers now")

    guard(action)


@generations_app.command()
def retire(
    ctx: typer.Context,
    generation: Annotated[int, typer.Argument(help="The generation to retire (not the serving one).")],
) -> None:
    """Retire a generation whose workers are stopped: delete its topics; its workers refuse to start again."""
    from streamdedup.drivers.kafka.generations import retire_generation

    settings = settings_of(ctx)

    def action() -> None:
        deleted = asyncio.run(retire_generation(settings, generation))
        err().print(f"generation {generation} retired; {len(deleted)} topics deleted")

    guard(action)
