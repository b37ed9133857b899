"""Reviewers' decisions on a real broker: produced to the documents topic, applied by a running worker."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from streamdedup.contract.codec import decode_event
from streamdedup.core.model import DecisionEvent
from streamdedup.testing.invariants import check_invariants
from streamdedup.testing.reference import Reference, decisions_in_force, live_sources
from tests.helpers import stop
from tests.integration.harness import until
from tests.integration.test_commands import cli
from tests.integration.test_service import example_events

pytestmark = pytest.mark.integration


def review_values(deployment) -> dict[str, dict | None]:
    """The last value per key on the review topic (None: the flag was resolved)."""
    return {key: json.loads(v) if v is not None else None for key, v in deployment.records("review")}


def open_flag(flags: dict[str, dict | None], predicate) -> str:
    """The key of the open flag that ``predicate`` picks out."""
    return next(k for k, v in flags.items() if v is not None and predicate(v))


def example_flags(deployment) -> dict[str, dict | None]:
    """Run the bundled example through a worker; return the review topic's flags."""
    deployment.start_worker()
    deployment.produce(example_events())
    deployment.wait_until_idle()
    return review_values(deployment)


def test_a_decision_sent_to_the_topic_changes_a_running_workers_view(deployment, engine):
    flags = example_flags(deployment)
    refund = open_flag(flags, lambda flag: "refund" in json.dumps(flag))
    float_pair = open_flag(flags, lambda flag: "float16" in json.dumps(flag))
    mapped = deployment.view().mappings["zendesk:macros/refund-reply"]["chunks"][0]
    assert mapped["relation"] == "canonical"

    # As a script would: `streamdedup decide ... --broker`, which sends the event and returns.
    for kind, key in (("merge", refund), ("keep-separate", float_pair)):
        sent = cli(deployment, "decide", kind, key, "--broker", deployment.settings.broker, "--by", "ana")
        assert sent.returncode == 0, sent.stderr
    deployment.wait_until_idle()

    view = deployment.view()
    mapped = view.mappings["zendesk:macros/refund-reply"]["chunks"][0]
    assert mapped["relation"] == "near"
    assert mapped["chunk_id"] == view.mappings["web:help/refunds"]["chunks"][0]["chunk_id"]
    flags = review_values(deployment)
    assert flags[refund] is None and flags[float_pair] is None  # both flags resolved
    audits = [json.loads(v) for _, v in deployment.records("audit") if v is not None]
    audits = [a for a in audits if a["action"] == "decision"]
    assert sorted((a["reason"], a["by"]) for a in audits) == [("keep_separate", "ana"), ("merge", "ana")]

    # The decisions are input events like the others: the view is the reference model's with them.
    events = [decode_event(value) for _, value in deployment.records("documents") if value is not None]
    assert sum(1 for e in events if isinstance(e, DecisionEvent)) == 2
    live, in_force = live_sources(events), decisions_in_force(events)
    assert check_invariants(view, live, threshold=0.8, shingle_size=5, decisions=in_force) == []
    assert view.compacted(with_revision=False) == Reference(engine, live, in_force).compacted()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _sections(page: str) -> tuple[str, str]:
    """The queue page's open and decided sections."""
    opened = page.split('<section id="open">', 1)[1]
    return opened.split('<section id="decided">', 1)[0], opened.split('<section id="decided">', 1)[1]


def test_the_console_on_a_deployments_topics_sends_decisions_to_the_worker(deployment, tmp_path):
    flags = example_flags(deployment)
    key = open_flag(flags, lambda flag: "float16" in json.dumps(flag))
    acl_key = open_flag(flags, lambda flag: flag["reason"] == "acl_boundary")

    env = {**os.environ, **deployment.env}
    command = [sys.executable, "-m", "streamdedup.cli", "review", "--broker", deployment.settings.broker]
    with (tmp_path / "console.log").open("w") as log:
        process = subprocess.Popen(
            [*command, "--port", "0", "--by", "ana"], env=env, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert process.stdout is not None
        printed: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lambda: [printed.put(x) for x in process.stdout], daemon=True)
        reader.start()
        try:

            def served() -> str | None:
                while not printed.empty():
                    line = printed.get()
                    if "serving http" in line:
                        return line.split()[-1]
                assert process.poll() is None, (tmp_path / "console.log").read_text()
                return None

            url = until(served, "the console printed no URL")
            # It reads the output topics from their start: the float pair appears among the open flags.
            until(lambda: key in _sections(_get(url + "queue"))[0], "the float pair was not shown open")

            status, answer = _post(
                url + "api/decision", {"decision": "keep_separate", "pair": key.split(":")}
            )
            assert status == 200 and answer["ok"], answer
            status, refused = _post(url + "api/decision", {"decision": "merge", "pair": acl_key.split(":")})
            assert status == 409 and "acl_boundary" in refused["error"], refused

            deployment.wait_until_idle()  # the worker applied it
            assert review_values(deployment)[key] is None
            audits = [json.loads(v) for _, v in deployment.records("audit") if v is not None]
            assert [(a["reason"], a["by"]) for a in audits if a["action"] == "decision"] == [
                ("keep_separate", "ana")
            ]
            # And the console, following the topics, lists the pair as decided.
            until(lambda: key in _sections(_get(url + "queue"))[1], "the pair was not shown decided")
            assert key not in _sections(_get(url + "queue"))[0]
        finally:
            stop(process)
            reader.join(timeout=30)
            process.stdout.close()
