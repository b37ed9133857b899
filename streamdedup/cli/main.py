"""The ``streamdedup`` command line.

Global options set engine parameters (also read from ``STREAMDEDUP_*``); each command builds on the one
:class:`~streamdedup.settings.Settings` object made here.
"""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from streamdedup.cli.decide_commands import decide_app
from streamdedup.cli.generation_commands import generations_app
from streamdedup.cli.terminal import err, guard, settings_of
from streamdedup.errors import StreamDedupError

if TYPE_CHECKING:
    from streamdedup.settings import Settings

__all__ = ["app", "main"]

app = typer.Typer(
    name="streamdedup",
    help="Deduplicate document chunks on their way into RAG indexes: exact and near copies, with deletions, "
    "versions and permissions kept right.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            "-s",
            metavar="NAME=VALUE",
            help="Override a setting for this command, e.g. --set threshold=0.9 (repeatable; any setting).",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress details.")] = False,
) -> None:
    """Read settings from the environment (STREAMDEDUP_<NAME>) and --set."""
    # Imported here: pydantic-settings is most of what `streamdedup --help` would otherwise load.
    from pydantic import ValidationError

    from streamdedup.settings import Settings

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    overrides: dict[str, Any] = {}
    for item in set_ or []:
        name, sep, value = item.partition("=")
        name = name.strip().lower().replace("-", "_")
        if not sep or name not in Settings.model_fields:
            known = difflib.get_close_matches(name, Settings.model_fields, n=3)
            hint = f"; did you mean {', '.join(known)}?" if known else " (see 'streamdedup config')"
            err().print(f"[red]invalid --set {item!r}:[/red] not NAME=VALUE for a setting{hint}")
            raise typer.Exit(2)
        overrides[name] = value
    try:
        ctx.obj = Settings(**overrides)
        ctx.obj.engine_params()
    except (ValidationError, StreamDedupError) as exc:
        err().print(f"[red]invalid settings:[/red] {exc}")
        raise typer.Exit(2) from exc
    from streamdedup.core import kernels

    try:
        kernels.use(ctx.obj.kernels)
    except kernels.KernelsUnavailable as exc:
        err().print(f"[red]invalid settings:[/red] {exc}")
        raise typer.Exit(2) from exc


def _warn_on_python_kernels(settings: Settings) -> None:
    """Say once, when the engine is about to run on the Python kernels without being asked to, what that costs."""
    from streamdedup.core import kernels

    if kernels.kind() == "python" and settings.kernels == "auto":
        err().print(
            "[yellow]warning:[/yellow] this installation has no compiled kernels, so the engine runs in Python, "
            f"at less than half the speed (byte-identical results). For the compiled ones, {kernels.HOW_TO_COMPILE}."
        )


def _state_dir(settings: Settings, state: Path | None) -> Path:
    chosen = state or settings.state_dir
    if chosen is None:
        err().print("[red]no state directory:[/red] pass --state DIR or set STREAMDEDUP_STATE_DIR")
        raise typer.Exit(2)
    return chosen


@app.command()
def run(
    ctx: typer.Context,
    input: Annotated[
        Path | None,
        typer.Argument(
            help="JSONL file of input events (design §4), or a folder of documents (optional with --rebuild-from).",
            exists=True,
        ),
    ] = None,
    state: Annotated[Path | None, typer.Option(help="State directory (RocksDB); kept between runs.")] = None,
    out: Annotated[str, typer.Option(help="Output JSONL file, appended to; '-' for standard output.")] = "-",
    batch_size: Annotated[int | None, typer.Option(help="Input events per atomic batch.")] = None,
    workers: Annotated[
        int | None,
        typer.Option(help="Worker processes for the engine's partitions (a state keeps its number)."),
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", help="Keep following the folder's changes.")] = False,
    collection: Annotated[
        str | None, typer.Option(help="Collection of a folder's files (default: its name).")
    ] = None,
    index: Annotated[
        str | None,
        typer.Option(
            help="Then bring this vector database (lancedb://DIR) up to date with --out, as 'index' does."
        ),
    ] = None,
    feed: Annotated[
        str | None,
        typer.Option(
            help="INPUT holds this feed's change events (Debezium), one record value per line, mapped by the feeds "
            "file (STREAMDEDUP_FEEDS, or --set feeds=FILE)."
        ),
    ] = None,
    rebuild_from: Annotated[
        Path | None,
        typer.Option(
            "--rebuild-from",
            metavar="OLD_STATE",
            help="First build the new --state from this state directory's retained record, under this run's "
            "settings (e.g. --set threshold=0.85); no input is needed again. Cut short, it goes on where it was.",
        ),
    ] = None,
) -> None:
    """Run the engine embedded (no broker) over INPUT and append the outputs to --out."""
    from streamdedup.cli.run import run_command

    settings = settings_of(ctx)
    if batch_size is not None:
        settings = settings.model_copy(update={"batch_size": batch_size})
    if workers is not None:
        settings = settings.model_copy(update={"workers": workers})
    if index is not None and (out == "-" or watch):
        err().print(
            "[red]--index needs --out FILE and no --watch[/red] (to index while watching, run "
            "'streamdedup index --from FILE --follow' beside it)"
        )
        raise typer.Exit(2)

    def both() -> None:
        _warn_on_python_kernels(settings)
        run_command(
            settings,
            input,
            _state_dir(settings, state),
            out,
            err(),
            watch=watch,
            collection=collection,
            feed_name=feed,
            rebuild_from=rebuild_from,
        )
        if index is not None:
            from streamdedup.cli.indexing import index_command

            index_command(settings, index, None, Path(out), False, None, err())

    guard(both)


@app.command()
def inspect(
    ctx: typer.Context,
    state: Annotated[Path | None, typer.Option(help="State directory written by 'run'.")] = None,
    source: Annotated[
        str | None, typer.Option(help="Show one source: its version, ACL and chunk mapping.")
    ] = None,
    chunk: Annotated[
        str | None, typer.Option(help="Show one chunk: canonical, members, sources, Jaccards.")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Show what the state holds for a source or a chunk."""
    from streamdedup.cli.inspect import inspect_command

    if (source is None) == (chunk is None):
        err().print("[red]give exactly one of --source and --chunk[/red]")
        raise typer.Exit(2)
    settings = settings_of(ctx)
    guard(lambda: inspect_command(settings, _state_dir(settings, state), source, chunk, json_output))


@app.command()
def boilerplate(
    ctx: typer.Context,
    state: Annotated[Path | None, typer.Option(help="State directory written by 'run'.")] = None,
    collection: Annotated[str | None, typer.Option(help="Show only this collection.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """List the learned boilerplate lines per collection, with how many documents contain them."""
    from streamdedup.cli.inspect import boilerplate_command

    settings = settings_of(ctx)
    guard(lambda: boilerplate_command(settings, _state_dir(settings, state), collection, json_output))


@app.command()
def worker(
    ctx: typer.Context,
    data_dir: Annotated[Path | None, typer.Option(help="Directory for the RocksDB table state.")] = None,
    loglevel: Annotated[str, typer.Option(help="Worker log level.")] = "info",
) -> None:
    """Run the streaming service: Faust agents over the Kafka topics (STREAMDEDUP_BROKER)."""
    from streamdedup.cli.service import worker_command

    settings = settings_of(ctx)
    if data_dir is not None:
        settings = settings.model_copy(update={"data_dir": data_dir})
    _warn_on_python_kernels(settings)
    guard(lambda: worker_command(settings, loglevel))


@app.command()
def produce(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="JSONL file of input events.", exists=True, dir_okay=False)],
    skip_invalid: Annotated[
        bool,
        typer.Option(
            "--skip-invalid",
            help="Do not send lines that are not valid events (by default they are sent as they are, and the "
            "worker dead-letters them).",
        ),
    ] = False,
) -> None:
    """Send input events to the documents topic, keyed by source_id; never stops on a bad line."""
    from streamdedup.cli.topic_io import produce_command

    guard(lambda: produce_command(settings_of(ctx), file, err(), skip_invalid=skip_invalid))


@app.command()
def tail(
    ctx: typer.Context,
    topic: Annotated[
        str, typer.Argument(help="canonical-chunks, source-mappings, review, audit, dlq or documents.")
    ],
    follow: Annotated[
        bool, typer.Option("--follow/--no-follow", help="Keep waiting for new records.")
    ] = True,
    limit: Annotated[int | None, typer.Option(help="Stop after this many records.")] = None,
) -> None:
    """Print a topic's records as JSON lines, from the beginning."""
    from streamdedup.cli.topic_io import tail_command

    guard(lambda: tail_command(settings_of(ctx), topic, follow, limit))


@app.command()
def materialize(
    ctx: typer.Context,
    out: Annotated[
        str, typer.Option(help="Where to write the view as JSONL; '-' for standard output.")
    ] = "-",
    into: Annotated[
        Path | None,
        typer.Option(help="Keep a local view (RocksDB) in this directory instead, for lookups and adapters."),
    ] = None,
    from_: Annotated[
        Path | None,
        typer.Option("--from", help="With --into: read an embedded run's output file instead of the topics."),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", help="With --into: keep applying new records until interrupted.")
    ] = False,
) -> None:
    """Write the downstream view: last value per key of the compacted outputs, tombstones applied.

    With --into, the view is a directory that later runs bring up to date from where they stopped.
    """
    if into is None:
        if from_ is not None or follow:
            err().print("[red]--from and --follow need --into DIR[/red]")
            raise typer.Exit(2)
        from streamdedup.cli.topic_io import materialize_command

        guard(lambda: materialize_command(settings_of(ctx), out, err()))
        return
    from streamdedup.cli.materialize import materialize_into_command

    guard(lambda: materialize_into_command(settings_of(ctx), into, from_, follow, err()))


@app.command()
def index(
    ctx: typer.Context,
    into: Annotated[str, typer.Option(help="The vector database: lancedb://DIR.")],
    from_: Annotated[
        Path | None,
        typer.Option("--from", help="Read an embedded run's output file instead of the topics.", exists=True),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", help="Keep indexing new records until interrupted.")
    ] = False,
    state: Annotated[
        Path | None,
        typer.Option(help="The writer's own directory (view, vectors, position); default DIR/_writer."),
    ] = None,
    reviews: Annotated[
        Path | None,
        typer.Option(help="With --from: append semantic flags here (default: to the output file itself)."),
    ] = None,
) -> None:
    """Keep a vector database in step with the outputs: each distinct text embedded once, semantic flags raised."""
    from streamdedup.cli.indexing import index_command

    if reviews is not None and from_ is None:
        err().print("[red]--reviews needs --from FILE (from the topics, flags go to the review topic)[/red]")
        raise typer.Exit(2)
    settings = settings_of(ctx)
    guard(lambda: index_command(settings, into, state, from_, follow, reviews, err()))


@app.command(name="eval")
def eval_(
    ctx: typer.Context,
    input: Annotated[
        Path,
        typer.Argument(help="JSONL file of input events (design §4), or a folder of documents.", exists=True),
    ],
    queries: Annotated[
        Path | None,
        typer.Option(help="Queries, one per line; default: generated from the corpus's headings."),
    ] = None,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="Results per query.")] = 5,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the figures as JSON here.")
    ] = None,
    collection: Annotated[
        str | None, typer.Option(help="Collection of a folder's files (default: its name).")
    ] = None,
) -> None:
    """Compare BM25 top-k over every chunk position with top-k over canonical chunks only."""
    from streamdedup.cli.evaluate import eval_command

    settings = settings_of(ctx)
    guard(lambda: eval_command(settings, input, queries, k, json_out, err(), collection=collection))


@app.command()
def calibrate(
    ctx: typer.Context,
    input: Annotated[
        Path | None,
        typer.Argument(help="JSONL file of input events, or a folder of documents.", exists=True),
    ] = None,
    state: Annotated[
        Path | None, typer.Option(help="Calibrate on the texts of this state directory instead.")
    ] = None,
    out: Annotated[Path, typer.Option(help="Directory for the plots and index.html.")] = Path("calibration"),
    samples: Annotated[
        int, typer.Option(min=0, help="Sample pairs shown just above and just below the threshold.")
    ] = 10,
    collection: Annotated[
        str | None, typer.Option(help="Collection of a folder's files (default: its name).")
    ] = None,
) -> None:
    """Show what each threshold from 0.5 to 0.95 would merge and flag, with sample pairs, plots and a page."""
    from streamdedup.cli.calibrate import calibrate_command

    if (input is None) == (state is None):
        err().print("[red]give exactly one of INPUT and --state[/red]")
        raise typer.Exit(2)
    settings = settings_of(ctx)
    guard(lambda: calibrate_command(settings, input, state, out, samples, err(), collection=collection))


@app.command()
def review(
    ctx: typer.Context,
    state: Annotated[
        Path | None,
        typer.Option(
            help="State directory of 'run' (with --broker: read for the calibration and boilerplate tabs)."
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="The output file of 'run' (embedded).")] = None,
    broker: Annotated[
        str | None,
        typer.Option(help="Read this deployment's output topics and send decisions to its documents topic."),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on; 0 picks a free one. The URL is printed.")
    ] = 8765,
    by: Annotated[
        str | None, typer.Option(help="The reviewer named in decisions (default: $USER, else 'reviewer').")
    ] = None,
    sample: Annotated[int, typer.Option(min=1, help="Pairs in the calibration sample.")] = 50,
    verdicts: Annotated[
        Path | None,
        typer.Option(
            help="JSON file of the calibration verdicts (default: review-verdicts.json beside the state)."
        ),
    ] = None,
) -> None:
    """Serve the review console: flags to decide, a calibration sample to judge, boilerplate lines."""
    from streamdedup.cli.reviewing import review_command

    settings = settings_of(ctx)
    guard(lambda: review_command(settings, state, out, broker, host, port, by, sample, verdicts, err()))


app.add_typer(decide_app, name="decide")
app.add_typer(generations_app, name="generations")


@app.command()
def config(ctx: typer.Context) -> None:
    """Print the effective settings and the LSH banding they imply."""
    from streamdedup.cli.config import config_command

    config_command(settings_of(ctx))


def main() -> None:
    """Entry point of the ``streamdedup`` script."""
    app()
