"""The ``worker`` command: the streaming service.

A restarted worker should be back at work soon after its launch, and most of its start is loading modules. So it
starts opening the partition stores its data directory holds, in a thread, before it loads the rest (RocksDB
opens without holding the interpreter), and loads modules with the cyclic garbage collector paused: module
loading makes a great many objects and no garbage, and each pass of the collector would walk them all.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from streamdedup.drivers.collector import collector_paused
from streamdedup.drivers.kafka.partitions import PartitionStores

if TYPE_CHECKING:
    from streamdedup.settings import Settings

__all__ = ["worker_command"]


def worker_command(settings: Settings, loglevel: str) -> None:
    """Create the topics, check the engine parameters, and run the Faust worker until it is stopped.

    A worker of a generation after the first (``STREAMDEDUP_GENERATION``) takes its engine parameters from the
    deployment's registry (docs/generations.md) before it opens anything."""
    if (settings.generation or 1) > 1:
        from streamdedup.drivers.kafka.generations import generation_settings

        settings = asyncio.run(generation_settings(settings))
    data_dir = settings.worker_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    stores = PartitionStores.of_worker(
        data_dir, settings.engine_params(), state_cache_mb=settings.state_cache_mb
    )
    stores.open_found()
    try:
        with collector_paused(freeze=True):
            from streamdedup.drivers.kafka.admin import check_engine_params, ensure_topics
            from streamdedup.drivers.kafka.app import build_app, make_worker

            async def prepare() -> None:
                await ensure_topics(settings)
                if (settings.generation or 1) == 1:
                    from streamdedup.drivers.kafka.generations import generation_settings

                    await generation_settings(settings)  # refuses a retired generation 1
                    await check_engine_params(settings)

            asyncio.run(prepare())
            app, _ = build_app(settings, stores)
        make_worker(app, loglevel).execute_from_commandline()
    finally:
        stores.close()
