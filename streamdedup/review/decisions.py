"""Reviewers' decisions (``streamdedup.decision/v1``): building them, checking them, handing them to the engine.

A decision is an input event like a document's: the engine applies it in every driver, idempotently, and records it
in ``audit``. The review console and ``streamdedup decide`` build decisions here and submit them either to an
embedded state (:class:`EmbeddedDecisions`: applied at once, outputs appended to the run's output file) or to the
documents topic of a Kafka deployment (:class:`KafkaDecisions`: the worker applies it).

>>> event = decision_event("keep_separate", by="ana", pair=("b" * 64, "a" * 64), version=1)
>>> event["decision"], event["pair"] == ["a" * 64, "b" * 64]
('keep_separate', True)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from streamdedup.contract.codec import event_from_data
from streamdedup.core.messages import Output
from streamdedup.core.model import (
    LINE_DECISIONS,
    PAIR_DECISIONS,
    SOURCE_DECISIONS,
    DecisionEvent,
    format_timestamp,
)
from streamdedup.core.records import DECISION_SCHEMA, decision_value
from streamdedup.drivers.jsonl import opened_state
from streamdedup.drivers.kafka.admin import produce_events
from streamdedup.errors import InvalidEventError, StreamDedupError
from streamdedup.settings import Settings

__all__ = [
    "DECISION_SCHEMA",
    "LINE_DECISIONS",
    "PAIR_DECISIONS",
    "SOURCE_DECISIONS",
    "DecisionRefused",
    "EmbeddedDecisions",
    "KafkaDecisions",
    "check_decision",
    "decision_event",
    "parse_decision",
]

_ACL_REFUSAL = (
    "a merge across an acl_boundary is never made: the chunk would serve its text to readers of the other copy "
    "who cannot read it (invariant I2)"
)


class DecisionRefused(StreamDedupError, ValueError):
    """A decision that may not be made, or that is not a valid decision; the message is for the user."""


def decision_event(
    kind: str,
    *,
    by: str,
    pair: tuple[str, str] | None = None,
    source_id: str | None = None,
    collection: str | None = None,
    line: str | None = None,
    note: str | None = None,
    reason: str | None = None,
    version: int | None = None,
) -> dict[str, Any]:
    """Return the contract JSON of a decision, validated (:class:`DecisionRefused` if it is not valid).

    ``version`` defaults to the current time in microseconds, so a later decision about the same subject wins.
    ``reason`` is the reason of the flag a pair decision answers.
    """
    data: dict[str, Any] = {
        "schema": DECISION_SCHEMA,
        "decision": kind,
        "version": time.time_ns() // 1000 if version is None else version,
        "by": by,
        "at": format_timestamp(time.time_ns() // 1000),
    }
    if pair is not None:
        data["pair"] = sorted(pair)
    if source_id is not None:
        data["source_id"] = source_id
    if collection is not None or line is not None:
        data.update(collection=collection, line=line)
    if note:
        data["note"] = note
    if reason is not None:
        data["reason"] = reason
    check_decision(data, None)
    return decision_value(parse_decision(data))


def parse_decision(data: dict[str, Any]) -> DecisionEvent:
    """Validate contract JSON as a decision; :class:`DecisionRefused` names what is wrong."""
    try:
        event = event_from_data(data)
    except InvalidEventError as exc:
        raise DecisionRefused(f"not a valid decision: {exc}") from exc
    if not isinstance(event, DecisionEvent):
        raise DecisionRefused(f"not a decision: the schema must be {DECISION_SCHEMA!r}")
    return event


def check_decision(event: dict[str, Any], flag: dict[str, Any] | None) -> None:
    """Refuse a decision that may not be made about the flag it answers (None: no open flag).

    A ``merge`` of an ``acl_boundary`` pair is refused: I2 has no exceptions.
    """
    if event.get("decision") != "merge":
        return
    if event.get("reason") == "acl_boundary" or (flag is not None and flag.get("reason") == "acl_boundary"):
        raise DecisionRefused(_ACL_REFUSAL)


class EmbeddedDecisions:
    """Apply decisions to the state of ``streamdedup run`` and append what they cause to its output file.

    The state is opened for each decision and closed at once, so other commands (``run``, ``inspect``) can use it
    between decisions; while another process holds it, :meth:`submit` raises a ``StateError`` that says so.
    """

    def __init__(self, settings: Settings, state: Path, out: Path) -> None:
        self.settings, self.state, self.out = settings, state, out

    def submit(self, event: dict[str, Any]) -> list[Output]:
        """Apply one decision and return the outputs it caused (already appended to the output file)."""
        decision = parse_decision(event)
        with opened_state(self.settings, self.state, str(self.out)) as (runner, sink):
            return runner.process([decision], sink)


class KafkaDecisions:
    """Produce decisions to the documents topic, keyed by their subject; the worker applies them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def submit(self, event: dict[str, Any]) -> None:
        """Produce one decision and wait until the broker has it."""
        decision = parse_decision(event)
        await produce_events(self.settings, [decision])
