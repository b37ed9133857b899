"""What a worker does before it consumes, whether ``streamdedup worker`` runs it or a Faust app mounts it.

In this order: :func:`generation_params` takes the engine parameters of the generation the settings name (a
generation after the first runs under those it was created with); :func:`open_stores` starts opening the partition
stores the data directory holds; :func:`prepare_deployment` creates the missing topics, checks the internal ones,
refuses a retired generation and records the engine parameters or refuses other ones. :func:`prepare_worker` does
the first and the last, for a caller already in an event loop.

The ``worker`` command opens the stores before it loads Kafka's modules (a restart is mostly loading modules, and
RocksDB opens without holding the interpreter), so this module imports them only where a function needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamdedup.drivers.kafka.partitions import PartitionStores

if TYPE_CHECKING:
    from streamdedup.settings import Settings

__all__ = ["generation_params", "open_stores", "prepare_deployment", "prepare_worker"]


async def generation_params(settings: Settings) -> Settings:
    """Return ``settings`` with the engine parameters of the generation they name.

    A generation after the first must exist, be seeded and not be retired; generation 1 is checked by
    :func:`prepare_deployment`, once its topics exist."""
    if (settings.generation or 1) == 1:
        return settings
    from streamdedup.drivers.kafka.generations import generation_settings  # noqa: PLC0415 - module docs

    return await generation_settings(settings)


def open_stores(settings: Settings) -> PartitionStores:
    """Create the worker's data directory and start opening the partition stores it holds, in a thread."""
    data_dir = settings.worker_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    stores = PartitionStores.of_worker(
        data_dir, settings.engine_params(), state_cache_mb=settings.state_cache_mb
    )
    stores.open_found()
    return stores


async def prepare_deployment(settings: Settings) -> None:
    """Create the deployment's missing topics and check the internal ones' partitions; for generation 1, refuse it
    if it was retired, and record the engine parameters or refuse to run under other ones."""
    from streamdedup.drivers.kafka.admin import check_engine_params, ensure_topics  # noqa: PLC0415
    from streamdedup.drivers.kafka.generations import generation_settings  # noqa: PLC0415

    await ensure_topics(settings)
    if (settings.generation or 1) == 1:
        await generation_settings(settings)  # refuses a retired generation 1
        await check_engine_params(settings)


async def prepare_worker(settings: Settings) -> Settings:
    """Check everything a worker checks before it consumes; return the settings it runs under."""
    settings = await generation_params(settings)
    await prepare_deployment(settings)
    return settings
