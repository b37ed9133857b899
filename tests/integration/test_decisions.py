"""Reviewers' decisions on a real broker: produced to the documents topic, applied by a running worker."""

from __future__ import annotations

import json

import pytest

from streamdedup.codec import decode_event
from streamdedup.core.model import DecisionEvent
from streamdedup.testing.invariants import check_invariants
from streamdedup.testing.reference import Reference, decisions_in_force, live_sources
from tests.integration.test_commands import cli
from tests.integration.test_service import example_events

pytestmark = pytest.mark.integration


def review_values(deployment) -> dict[str, dict | None]:
    """The last value per key on the review topic (None: the flag was resolved)."""
    return {key: json.loads(v) if v is not None else None for key, v in deployment.records("review")}


def test_a_decision_sent_to_the_topic_changes_a_running_workers_view(deployment, engine):
    deployment.start_worker()
    deployment.produce(example_events())
    deployment.wait_until_idle()
    flags = review_values(deployment)
    refund = next(k for k, v in flags.items() if v is not None and "refund" in json.dumps(v))
    float_pair = next(k for k, v in flags.items() if v is not None and "float16" in json.dumps(v))
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
