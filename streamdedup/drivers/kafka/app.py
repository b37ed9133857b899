"""The worker's Faust application: life cycle, web server, metrics and health around the :class:`StageWorker`.

Faust runs the process (signals, logging, the web server, timers); it neither consumes nor produces. The
:class:`~streamdedup.drivers.kafka.worker.StageWorker` does: it is a service the app starts and stops, with its
own consumer, producer and partition stores. :func:`build_app` makes the application from the settings (there
is no module-level app).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import faust
from faust.app.base import BootStrategy
from faust.web import View

from streamdedup.core import kernels
from streamdedup.drivers.kafka.metrics import Metrics
from streamdedup.drivers.kafka.partitions import PartitionStores
from streamdedup.drivers.kafka.worker import StageWorker
from streamdedup.settings import Settings

__all__ = ["add_pages", "build_app", "make_worker"]


class _NoKafka(BootStrategy):
    """Start Faust's web server and sensors, not its Kafka consumer and producer (the stage worker has its own)."""

    enable_kafka = False


class _App(faust.App):
    BootStrategy = _NoKafka


def build_app(settings: Settings, stores: PartitionStores | None = None) -> tuple[faust.App, StageWorker]:
    """Build the worker's Faust application and its stage worker from the settings (with ``stores``, the
    worker's partition stores, when they are already being opened)."""
    names = settings.topic_names()
    app = _App(
        f"{names.group}-app",
        broker=settings.broker,
        datadir=str(settings.worker_data_dir()),
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        autodiscover=False,
    )
    metrics = Metrics()
    worker = StageWorker(settings, metrics, on_crash=app.crash, stores=stores)
    app.add_dependency(worker)
    add_pages(app, metrics, lambda: worker)
    return app, worker


def add_pages(
    app: faust.App, metrics: Metrics, worker_of: Callable[[], StageWorker | None], prefix: str = ""
) -> None:
    """Serve the worker's ``/metrics`` and ``/health`` pages under ``prefix`` on the app's web server
    (``worker_of()``: the stage worker, or None while it is not made yet)."""

    async def metrics_page(web: Any, request: Any) -> Any:
        worker = worker_of()
        if worker is not None:
            worker.update_lag()
        return web.bytes(metrics.render(), content_type="text/plain; version=0.0.4")

    async def health_page(web: Any, request: Any) -> Any:
        worker = worker_of()
        status = "starting" if worker is None else "recovering" if worker.recovering else "ok"
        body = {
            "status": status,
            "assigned": 0 if worker is None else len(worker.stores.partitions),
            "kernels": kernels.kind(),
        }
        return web.json(body, status=200 if status == "ok" else 503)

    for path, handler in (("/metrics", metrics_page), ("/health", health_page)):
        _add_page(app, prefix + path, handler)


def _add_page(app: faust.App, path: str, handler: Any) -> None:
    """Serve ``handler`` at ``path``, as ``@app.page(path)`` does without registering it for venusian's scan
    (which walks every loaded module to find the caller's source: a tenth of a second at each start)."""
    view = View.from_handler(handler)
    view.view_name = f"streamdedup_{handler.__name__}"  # its name in the app's web server, for url_for
    view.view_path = path
    app.web.add_view(view)


class _Worker(faust.Worker):
    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        """Leave the root logger at ``level``.

        Faust's terminal spinner would turn it to DEBUG so that every record moves the spinner: every Kafka send
        would then build a debug record that is thrown away.
        """


def make_worker(app: faust.App, loglevel: str) -> faust.Worker:
    """Return the Faust worker of ``app``, logging at ``loglevel`` (and no lower)."""
    return _Worker(app, loglevel=loglevel, redirect_stdouts=False, quiet=not sys.stdout.isatty())
