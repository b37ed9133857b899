"""The retained record: what the source stage keeps so that the whole state can be built again, under other
parameters, from nothing but itself (a new *generation*, ``docs/generations.md``).

The source stage keeps, beside each source's state, the one event that recreates it: the source's latest upsert,
with the ACL and version of the latest ``acl`` event applied since, or its delete (a version tombstone, so that a
replayed older upsert cannot bring the source back in the new generation either); and the decision in force about
each pair, line and source. Applied to an empty engine in any order, these events give the view that every event
so far gives: each is the newest of its subject, and the engine's view does not depend on the order in which
sources arrive (design §5, I5).

The record is part of the source stage's state, so it lives where the state lives: in the embedded state
directory, and on the stage's compacted changelog topic on Kafka, written in the same calls as the rest of the
state (:mod:`streamdedup.drivers.kafka.changelog`): the state and the record cannot disagree after a crash. It holds
one entry per live source (about its text's size), one small entry per deleted source_id and one per decision.

>>> from streamdedup.core.model import DeleteEvent
>>> key = source_key("doc-1")
>>> is_retained(key), is_retained("doc-1")
(True, False)
>>> [e.source_id for e in retained_events([(key, encode_retained(DeleteEvent(source_id="doc-1", version=3)))])]
['doc-1']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec

from streamdedup.core.model import DecisionEvent, DeleteEvent, InputEvent, UpsertEvent
from streamdedup.core.state import Retained

__all__ = [
    "RETAINED_PREFIX",
    "decision_key",
    "encode_retained",
    "is_retained",
    "retained_events",
    "source_key",
]

#: Every retained key starts with this (no source_id can: a source_id never starts with a NUL character).
RETAINED_PREFIX = "\x00keep\x00"
_SOURCE = RETAINED_PREFIX + "source\x00"
_DECISION = RETAINED_PREFIX + "decision\x00"
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Retained)


def source_key(source_id: str) -> str:
    """The key of a source's retained upsert or delete."""
    return _SOURCE + source_id


def decision_key(event: DecisionEvent) -> str:
    """The key of the decision in force about ``event``'s subject (a pair, a line, or a source's preference)."""
    return _DECISION + event.subject


def is_retained(key: str) -> bool:
    """Whether a source stage key holds a retained event."""
    return key.startswith(RETAINED_PREFIX)


def encode_retained(event: UpsertEvent | DeleteEvent | DecisionEvent) -> bytes:
    """The stored bytes of a retained event."""
    return _ENCODER.encode(Retained(event))


def retained_events(entries: Iterable[tuple[str, bytes]]) -> Iterator[InputEvent]:
    """The events of retained ``(key, value)`` entries (other keys are skipped): applied to an empty engine, they
    rebuild the state they were kept from."""
    for key, value in entries:
        if is_retained(key):
            event = _DECODER.decode(value).event
            if event is not None:
                yield event
