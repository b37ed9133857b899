"""Mounting the dedup worker in a Faust app (``streamdedup.faust.mount``), without a broker: what the app holds
once mounted. tests/integration/test_faust_mount.py runs a mounted app on the broker."""

from __future__ import annotations

import asyncio
import json

import faust
import pytest

from streamdedup.errors import ConfigurationError
from streamdedup.faust import MountedWorker, mount
from streamdedup.settings import Settings


def new_app() -> faust.App:
    return faust.App("team-app", broker="kafka://127.0.0.1:1", autodiscover=False)


def test_the_worker_is_a_dependency_of_the_app_with_its_pages_under_the_prefix():
    app = new_app()
    mounted = mount(app, Settings(topic_prefix="acme."), web_prefix="/dedup/")
    assert isinstance(mounted, MountedWorker)
    assert mounted.beacon.parent is app.beacon  # a dependency: started and stopped with the app
    assert mounted.web_prefix == "/dedup"
    assert {"/dedup/health", "/dedup/metrics"} <= set(app.web.views)
    assert not {"/health", "/metrics"} & set(app.web.views)


def test_settings_come_from_the_environment_unless_given(monkeypatch, tmp_path):
    monkeypatch.setenv("STREAMDEDUP_TOPIC_PREFIX", "from-env.")
    monkeypatch.setenv("STREAMDEDUP_DATA_DIR", str(tmp_path / "dedup"))
    found = mount(new_app())
    assert found.settings.topic_names().group == "from-env.worker"
    assert found.settings.worker_data_dir() == tmp_path / "dedup"
    given = mount(new_app(), Settings(topic_prefix="given."))
    assert given.settings.topic_names().group == "given.worker"


def test_health_says_starting_until_the_checks_have_passed():
    app = new_app()
    mounted = mount(app, Settings())
    assert mounted.worker is None
    response = asyncio.run(app.web.views["/streamdedup/health"].get(None))
    assert response.status == 503
    assert json.loads(response.body)["status"] == "starting"
    metrics = asyncio.run(app.web.views["/streamdedup/metrics"].get(None))
    assert metrics.status == 200 and b"streamdedup_events_in_total 0.0" in metrics.body


@pytest.mark.parametrize("prefix", ["dedup", "streamdedup/"])
def test_a_prefix_must_start_with_a_slash(prefix):
    with pytest.raises(ConfigurationError, match="must start with '/'"):
        mount(new_app(), Settings(), web_prefix=prefix)
