"""The dedup worker mounted in a team's own Faust app (``streamdedup.faust.mount``), run as a user runs it:
``faust -A tests.integration.faust_user_app worker``. The app's own agent and the dedup worker both work, each in
its consumer group; the worker's pages answer under the prefix on the app's web port; the view equals an embedded
run's; and a mounted worker checks the deployment as ``streamdedup worker`` does."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streamdedup.core import kernels
from streamdedup.core.messages import STAGES
from streamdedup.drivers.kafka.admin import check_engine_params, read_to_end
from tests.helpers import run_embedded
from tests.integration.harness import Deployment, Worker, until
from tests.integration.test_service import example_events

pytestmark = pytest.mark.integration

APP_MODULE = "tests.integration.faust_user_app"
#: The agent's messages: the app's own work beside the dedup worker's.
REQUESTS = [(f"k{n % 3}".encode(), f"hello {n}".encode()) for n in range(30)]


class MountingApp(Worker):
    """A process of the user's Faust app, the dedup worker mounted in it with its pages under ``/streamdedup``."""

    web_prefix = "/streamdedup"

    def __init__(
        self, deployment: Deployment, data_dir: Path, name: str, env: dict[str, str] | None = None
    ) -> None:
        prefix = deployment.prefix
        own = {
            "ECHO_APP_ID": f"{prefix}echo-app",
            "ECHO_IN": f"{prefix}echo-in",
            "ECHO_OUT": f"{prefix}echo-out",
            "STREAMDEDUP_DATA_DIR": str(data_dir),
        }
        #: The app's own data directory (Faust's ``datadir``); the dedup worker's is ``data_dir``.
        self.app_data_dir = deployment.root / f"{name}-app-data"
        super().__init__(deployment, data_dir, name, {**own, **(env or {})})

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "faust",
            "--datadir",
            str(self.app_data_dir),
            "-A",
            APP_MODULE,
            "worker",
            "--loglevel",
            "info",
            "--web-bind",
            "127.0.0.1",
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(self.web_port),
        ]


def create_app_topics(deployment: Deployment) -> tuple[str, str]:
    """Create the app's own topics, as its team would (the test broker creates none by itself)."""
    names = (f"{deployment.prefix}echo-in", f"{deployment.prefix}echo-out")

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=deployment.settings.bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(name, num_partitions=2, replication_factor=1) for name in names]
            )
        finally:
            await admin.close()

    asyncio.run(create())
    return names


def send(deployment: Deployment, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=deployment.settings.bootstrap_servers, acks="all")
        await producer.start()
        try:
            for key, value in records:
                await producer.send_and_wait(topic, value, key=key)
        finally:
            await producer.stop()

    asyncio.run(go())


def read(deployment: Deployment, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    async def go() -> list[tuple[bytes | None, bytes | None]]:
        return [(key, value) async for _, _, _, key, value, _ in read_to_end(deployment.settings, [topic])]

    return asyncio.run(go())


def consumer_groups(deployment: Deployment) -> set[str]:
    async def go() -> set[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=deployment.settings.bootstrap_servers)
        await admin.start()
        try:
            return {group[0] for group in await admin.list_consumer_groups()}
        finally:
            await admin.close()

    return asyncio.run(go())


def page(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.timeout(900)
def test_a_faust_app_with_its_own_agent_and_the_dedup_worker_mounted(deployment, engine):
    requests, replies = create_app_topics(deployment)
    app = deployment.start_worker(name="user-app", kind=MountingApp)
    events = example_events()
    deployment.produce(events)
    send(deployment, requests, REQUESTS)

    # The app's agent: every request answered, upper-cased, under its key, in order per key.
    answered = until(
        lambda: (found := read(deployment, replies)) and len(found) >= len(REQUESTS) and found,
        "the app's agent did not answer every request",
        360,
        app.tail,
    )
    for key in {k for k, _ in REQUESTS}:
        assert [v for k, v in answered if k == key] == [v.upper() for k, v in REQUESTS if k == key]

    # The dedup worker: its view is the embedded run's.
    deployment.wait_until_idle(timeout=360)
    view = deployment.view()
    embedded = run_embedded(engine, events)
    assert view.compacted(with_revision=False) == embedded.compacted(with_revision=False)
    assert len(view.chunks) == 12

    # Its pages, under the prefix on the app's web server; nothing of it at the server's root.
    status, body = page(app.url("/health"))
    assert status == 200
    assert json.loads(body) == {"status": "ok", "assigned": 4 * len(STAGES), "kernels": kernels.kind()}
    samples = app.metrics()
    assert samples["streamdedup_events_in_total"] == len(events)
    assert page(f"http://127.0.0.1:{app.web_port}/health")[0] == 404

    # Two consumer groups: the app's (its id) for its agent, the deployment's for the dedup worker; and the
    # worker's partition stores in its own data directory, none in the app's.
    groups = consumer_groups(deployment)
    assert {f"{deployment.prefix}echo-app", deployment.names.group} <= groups
    assert len(list((app.data_dir / "partitions").glob("*-*"))) == 4 * len(STAGES)
    assert app.app_data_dir.is_dir() and not list(app.app_data_dir.rglob("partitions"))

    # Stopped with the app (SIGTERM), which exits cleanly.
    app.stop(timeout=120)
    assert app.process.returncode == 0, app.tail()


def test_a_mounted_worker_refuses_other_engine_parameters_and_the_app_does_not_start(deployment):
    create_app_topics(deployment)
    asyncio.run(check_engine_params(deployment.settings))  # the deployment's parameters: the defaults
    app = deployment.start_worker(name="user-app", kind=MountingApp, env={"STREAMDEDUP_THRESHOLD": "0.9"})
    code = app.wait_for_exit(timeout=240)
    assert code != 0
    log = app.log.read_text(errors="replace")
    assert f"the deployment with topic prefix {deployment.prefix!r} was built with" in log
    assert deployment.names.group not in consumer_groups(deployment)


def delete_topic(deployment: Deployment, topic: str) -> None:
    async def go() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=deployment.settings.bootstrap_servers)
        await admin.start()
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()

    asyncio.run(go())


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", [Worker, MountingApp], ids=["worker", "mounted"])
def test_a_failing_worker_crashes_its_app_mounted_or_not(deployment, kind):
    # Its source stage cannot write its changelog any more: a failure of Kafka, not of the input. The app the
    # worker runs in (the worker's own, or the user's with its agent) crashes, and the process exits.
    if kind is MountingApp:
        create_app_topics(deployment)
    worker = deployment.start_worker(kind=kind)
    deployment.produce(example_events()[:2])
    deployment.wait_until_idle(timeout=360)
    delete_topic(deployment, deployment.names.changelog("source"))
    deployment.produce(example_events()[2:4])
    code = worker.wait_for_exit(timeout=600)
    assert code != 0
    log = worker.log.read_text(errors="replace")
    assert "stopping the worker:" in log
    assert re.search(r"\[\^-_?App\]: Crashed reason=", log), worker.tail()
