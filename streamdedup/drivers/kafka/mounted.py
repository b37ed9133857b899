"""The dedup stage worker as a service of someone else's Faust app (the documented face: :mod:`streamdedup.faust`).

:func:`mount` makes a :class:`MountedWorker`, a dependency of the app: the app starts it with its own services and
stops it when it stops. Starting, it checks what ``streamdedup worker`` checks (:mod:`.startup`: the generation,
the topics, the engine parameters) and then starts a :class:`~streamdedup.drivers.kafka.worker.StageWorker` with
its own consumer group, producer and data directory, from the settings; a failed check fails the app's start. A
worker that fails later crashes the app, as it stops ``streamdedup worker``. Its ``/metrics`` and ``/health`` pages
are served by the app's web server under a prefix; ``STREAMDEDUP_WEB_HOST`` and ``STREAMDEDUP_WEB_PORT`` are
not used.
"""

from __future__ import annotations

import logging
from typing import Any

import faust
import mode

from streamdedup.drivers.kafka.app import add_pages
from streamdedup.drivers.kafka.metrics import Metrics
from streamdedup.drivers.kafka.startup import generation_params, open_stores, prepare_deployment
from streamdedup.drivers.kafka.worker import StageWorker
from streamdedup.errors import ConfigurationError
from streamdedup.settings import Settings

__all__ = ["MountedWorker", "mount"]

logger = logging.getLogger(__name__)


class MountedWorker(mode.Service):
    """The dedup stage worker inside a Faust app: checks, then a :class:`StageWorker` as a runtime dependency."""

    def __init__(self, app: faust.App, settings: Settings, *, web_prefix: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app
        #: The settings given; the worker runs under :attr:`settings` once it has started.
        self.given = settings
        self.settings = settings
        self.web_prefix = web_prefix
        self.metrics = Metrics()
        #: The stage worker, once the checks have passed.
        self.worker: StageWorker | None = None

    async def on_start(self) -> None:
        """Check the deployment as ``streamdedup worker`` does, then start the stage worker."""
        if self.worker is not None:
            return
        settings = await generation_params(self.given)
        stores = open_stores(settings)
        try:
            await prepare_deployment(settings)
        except BaseException:
            stores.close()
            raise
        self.settings = settings
        self.worker = StageWorker(settings, self.metrics, on_crash=self.app.crash, stores=stores)
        logger.info(
            "dedup worker of topic prefix %r starting in group %s, pages at %s/health and %s/metrics",
            settings.topic_prefix,
            settings.topic_names().group,
            self.web_prefix,
            self.web_prefix,
        )
        await self.add_runtime_dependency(self.worker)


def mount(
    app: faust.App, settings: Settings | None = None, *, web_prefix: str = "/streamdedup"
) -> MountedWorker:
    """Mount the dedup stage worker in ``app``, started and stopped with it, its pages under ``web_prefix``.

    ``settings`` default to the environment's (``STREAMDEDUP_*``), as the ``worker`` command reads them: the
    worker's consumer group, topics and data directory are the deployment's, not the app's.

    >>> app = faust.App("docs-example", autodiscover=False)
    >>> mounted = mount(app, Settings(topic_prefix="acme."))
    >>> mounted.settings.topic_names().group
    'acme.worker'
    >>> sorted(path for path in app.web.views if path.startswith("/streamdedup/"))
    ['/streamdedup/health', '/streamdedup/metrics']
    """
    prefix = web_prefix.rstrip("/")
    if web_prefix and not web_prefix.startswith("/"):
        raise ConfigurationError(f"web_prefix {web_prefix!r} must start with '/' (or be '' for the root)")
    if settings is None:
        settings = Settings(**{})  # from the environment, as the CLI reads them
    mounted = MountedWorker(app, settings, web_prefix=prefix)
    app.add_dependency(mounted)
    add_pages(app, mounted.metrics, lambda: mounted.worker, prefix)
    return mounted
