"""``streamdedup config``: the effective settings and the LSH banding they imply."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from streamdedup.core import kernels
from streamdedup.core.params import candidate_probability
from streamdedup.settings import Settings

__all__ = ["config_command"]


def config_command(settings: Settings, console: Console | None = None) -> None:
    """Print every setting with its environment variable, then the LSH parameters."""
    console = console or Console()
    table = Table(title="settings", header_style="bold")
    table.add_column("setting")
    table.add_column("value")
    table.add_column("environment")
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        shown = ",".join(value) if isinstance(value, tuple) else str(value)
        table.add_row(name, shown, f"STREAMDEDUP_{name.upper()}")
    console.print(table)
    console.print(
        f"kernels in use: {kernels.kind()}" + ("" if kernels.available() else " (none compiled here)")
    )
    params = settings.engine_params()
    lsh = Table(title="LSH banding", header_style="bold")
    lsh.add_column("")
    lsh.add_column("value", justify="right")
    lsh.add_row("bands (b)", str(params.bands))
    lsh.add_row("rows per band (r)", str(params.rows))
    lsh.add_row(f"candidate probability at J = t = {params.threshold}", f"{params.recall_at_threshold:.4f}")
    for jaccard in (0.5, 0.6, 0.7, 0.9):
        lsh.add_row(
            f"candidate probability at J = {jaccard}",
            f"{candidate_probability(jaccard, params.bands, params.rows):.4f}",
        )
    console.print(lsh)
