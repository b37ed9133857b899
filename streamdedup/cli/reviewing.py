"""``streamdedup review``: the local web console where reviewers act on flags (:mod:`streamdedup.review.console`).

Embedded (``--state DIR --out FILE``, the state and output file of ``streamdedup run``): the console reads the
output file on each page load and applies decisions to the state, which it opens for one decision at a time, so
``run`` and ``inspect`` can use the state while the console runs. With ``--broker``: the console reads the output
topics from their start and sends decisions to the documents topic; the calibration and boilerplate tabs then
need ``--state`` (a state directory to read texts and lines from) and say so without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from aiohttp import web
from rich.console import Console
from rich.markup import escape

from streamdedup.errors import ConfigurationError, StateError
from streamdedup.review.console.output_feeds import OutputFileFeed, TopicFeed
from streamdedup.review.console.web import (
    ConsoleConfig,
    Feed,
    Submit,
    create_app,
    embedded_submitter,
    kafka_submitter,
)
from streamdedup.review.decisions import EmbeddedDecisions, KafkaDecisions
from streamdedup.settings import Settings

__all__ = ["DEFAULT_PORT", "VERDICTS_FILE", "review_command", "serve"]

#: The port the console listens on unless told otherwise.
DEFAULT_PORT = 8765
#: The verdicts file's name, beside the state directory unless ``--verdicts`` says otherwise.
VERDICTS_FILE = "review-verdicts.json"


def review_command(
    settings: Settings,
    state: Path | None,
    out: Path | None,
    broker: str | None,
    host: str,
    port: int,
    by: str | None,
    sample: int,
    verdicts: Path | None,
    console: Console,
) -> None:
    """Serve the review console until interrupted; print the URL it serves first.

    ``state`` (default: the ``state_dir`` setting) and ``out`` are those of ``streamdedup run`` (embedded);
    ``broker`` reads and writes a deployment's topics instead (``state`` is then optional). ``by`` names the
    reviewer in decisions (default: ``$USER``).
    """
    if sample < 1:
        raise ConfigurationError(f"--sample must be at least 1, not {sample}")
    state = state or settings.state_dir
    if state is not None and not (state / "db").is_dir():
        raise StateError(f"no state at {state}; write one with 'streamdedup run INPUT --state {state}'")
    feed: Feed
    submit: Submit
    background = None
    if broker is not None:
        settings = settings.model_copy(update={"broker": broker})
        topics = TopicFeed(settings)
        feed, background = topics, topics.follow
        submit = kafka_submitter(KafkaDecisions(settings))
    else:
        if state is None or out is None:
            raise ConfigurationError(
                "give --state DIR and --out FILE (those of 'streamdedup run'), or --broker for a deployment"
            )
        feed = OutputFileFeed(out)
        submit = embedded_submitter(EmbeddedDecisions(settings, state, out))
    if verdicts is None and state is not None:
        verdicts = state.resolve().parent / VERDICTS_FILE
    config = ConsoleConfig(
        by=by or os.environ.get("USER") or "reviewer",
        params=settings.engine_params(),
        state=state,
        verdicts=verdicts,
        sample=sample,
        applies_at_once=broker is None,
        lineages=settings.lineages(),
    )
    app = create_app(config, feed, submit, background=background)
    asyncio.run(serve(app, host, port, console))


async def serve(app: web.Application, host: str, port: int, console: Console) -> None:
    """Serve ``app`` on ``host``:``port`` (0: any free port) until SIGINT or SIGTERM; print the URL first."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigurationError(f"cannot listen on {host}:{port}: {exc}") from exc
        bound = runner.addresses[0]
        shown = f"[{bound[0]}]" if ":" in str(bound[0]) else str(bound[0])
        url = f"http://{shown}:{bound[1]}/"
        # The URL goes to standard output alone on its line, so that scripts and tests can wait for it.
        sys.stdout.write(f"streamdedup review: serving {url}\n")
        sys.stdout.flush()
        console.print(f"review console at {escape(url)} (Ctrl-C to stop)")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
