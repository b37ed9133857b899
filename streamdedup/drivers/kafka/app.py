"""The worker's Faust application: life cycle, web server, metrics and health around the :class:`StageWorker`.

Faust runs the process (signals, logging, the web server, timers); it neither consumes nor produces. The
:class:`~streamdedup.drivers.kafka.worker.StageWorker` does: it is a service the app starts and stops, with its
own consumer, producer and partition stores. :func:`build_app` makes the application from the settings (there
is no module-level app).
"""

from __future__ import annotations

from typing import Any

import faust
from faust.app.base import BootStrategy
from faust.web import View

from streamdedup.drivers.kafka.metrics import Metrics
from streamdedup.drivers.kafka.topics import TopicNames
from streamdedup.drivers.kafka.worker import StageWorker
from streamdedup.settings import Settings

__all__ = ["build_app"]


class _NoKafka(BootStrategy):
    """Start Faust's web server and sensors, not its Kafka consumer and producer (the stage worker has its own)."""

    enable_kafka = False


class _App(faust.App):
    BootStrategy = _NoKafka


def build_app(settings: Settings) -> tuple[faust.App, StageWorker]:
    """Build the worker's Faust application and its stage worker from the settings."""
    names = TopicNames(settings.topic_prefix)
    app = _App(
        f"{names.group}-app",
        broker=settings.broker,
        datadir=str(settings.data_dir),
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        autodiscover=False,
    )
    metrics = Metrics()
    worker = StageWorker(settings, metrics, on_crash=app.crash)
    app.add_dependency(worker)

    async def metrics_page(web: Any, request: Any) -> Any:
        worker.update_lag()
        return web.bytes(metrics.render(), content_type="text/plain; version=0.0.4")

    async def health_page(web: Any, request: Any) -> Any:
        body = {
            "status": "recovering" if worker.recovering else "ok",
            "assigned": len(worker.stores.partitions),
        }
        return web.json(body, status=503 if worker.recovering else 200)

    for path, handler in (("/metrics", metrics_page), ("/health", health_page)):
        _add_page(app, path, handler)
    return app, worker


def _add_page(app: faust.App, path: str, handler: Any) -> None:
    """Serve ``handler`` at ``path``, as ``@app.page(path)`` does without registering it for venusian's scan
    (which walks every loaded module to find the caller's source: a tenth of a second at each start)."""
    view = View.from_handler(handler)
    view.view_name = handler.__name__
    view.view_path = path
    app.web.add_view(view)
