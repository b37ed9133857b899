"""The ``worker`` command: the streaming service.

A restarted worker should be back at work soon after its launch, and most of its start is loading modules. So it
starts opening the partition stores its data directory holds, in a thread, before it loads the rest (RocksDB
opens without holding the interpreter), and loads modules with the cyclic garbage collector paused: module
loading makes a great many objects and no garbage, and each pass of the collector would walk them all. What it
checks before it consumes is :mod:`streamdedup.drivers.kafka.startup`'s, as for a worker mounted in a Faust app.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from streamdedup.drivers.collector import collector_paused
from streamdedup.drivers.kafka.startup import generation_params, open_stores, prepare_deployment

if TYPE_CHECKING:
    from streamdedup.settings import Settings

__all__ = ["worker_command"]


def worker_command(settings: Settings, loglevel: str) -> None:
    """Create the topics, check the engine parameters, and run the Faust worker until it is stopped.

    A worker of a generation after the first (``STREAMDEDUP_GENERATION``) takes its engine parameters from the
    deployment's registry (docs/generations.md) before it opens anything."""
    settings = asyncio.run(generation_params(settings))
    stores = open_stores(settings)
    try:
        with collector_paused(freeze=True):
            from streamdedup.drivers.kafka.app import build_app, make_worker

            asyncio.run(prepare_deployment(settings))
            app, _ = build_app(settings, stores)
        make_worker(app, loglevel).execute_from_commandline()
    finally:
        stores.close()
