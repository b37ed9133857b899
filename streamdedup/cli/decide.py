"""``streamdedup decide``: reviewers' decisions from scripts, the same events the review console writes.

Embedded (``--state DIR --out FILE``, those of ``streamdedup run``): the decision is applied to the state at once
and what it causes is appended to the output file. With ``--broker``: it is sent to the documents topic, and the
worker applies it. With ``--print``: the event is printed as one JSONL line (to append to an input file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from streamdedup.core.records import review_key
from streamdedup.drivers.kafka.admin import run as run_async
from streamdedup.errors import ConfigurationError
from streamdedup.review.decisions import EmbeddedDecisions, KafkaDecisions, check_decision, decision_event
from streamdedup.settings import Settings

__all__ = ["decide_command", "open_flag", "pair_of"]


def pair_of(first: str, second: str | None) -> tuple[str, str]:
    """Return the pair named by two content hashes, or by one review key ``<hash_a>:<hash_b>``."""
    if second is None:
        if ":" not in first:
            raise ConfigurationError(
                "name the pair by two content hashes, or by its review key HASH_A:HASH_B"
            )
        first, second = first.split(":", 1)
    return first.strip().lower(), second.strip().lower()


def open_flag(out: Path, pair: tuple[str, str]) -> dict[str, Any] | None:
    """Return the pair's open flag in an output file (its last ``review`` record, None if resolved or absent)."""
    key = review_key(*pair)
    needle = key.encode()
    flag: dict[str, Any] | None = None
    with out.open("rb") as handle:
        for line in handle:
            if needle not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written
            if isinstance(record, dict) and record.get("topic") == "review" and record.get("key") == key:
                flag = record.get("value")
    return flag


def decide_command(
    settings: Settings,
    kind: str,
    subject: dict[str, Any],
    *,
    state: Path | None,
    out: Path | None,
    broker: str | None,
    print_only: bool,
    by: str,
    note: str | None,
    version: int | None,
    console: Console,
    reason: str | None = None,
) -> None:
    """Build the decision, refuse it if it may not be made, and hand it to the engine (or print it).

    ``reason`` is the flag's reason; with an output file (``out``) the open flag there says it.
    """
    targets = sum((print_only, broker is not None, state is not None or out is not None))
    if targets != 1:
        raise ConfigurationError("give one of: --state DIR --out FILE (embedded), --broker, or --print")
    flag = None
    if "pair" in subject and out is not None and out.exists():
        flag = open_flag(out, subject["pair"])
        if flag is not None:
            reason = flag.get("reason")
    event = decision_event(kind, by=by, note=note, version=version, reason=reason, **subject)
    check_decision(event, flag)
    if print_only:
        print(json.dumps(event, ensure_ascii=False))
        return
    if broker is not None:
        settings = settings.model_copy(update={"broker": broker})
        run_async(KafkaDecisions(settings).submit(event))
        console.print(f"sent {kind} to the documents topic at {escape(settings.broker)}")
        return
    if state is None or out is None:
        raise ConfigurationError(
            "an embedded decision needs both --state DIR and --out FILE (those of 'run')"
        )
    outputs = EmbeddedDecisions(settings, state, out).submit(event)
    topics = sorted({o.topic for o in outputs})
    console.print(f"applied {kind}: {len(outputs)} output records ({', '.join(topics) or 'none'}) in {out}")
