"""Changelog calls: what one handler call wrote to a partition store, as records of a compacted topic.

Each handler call's key writes go to the stage's changelog partition as one or a few record batches (one send per
batch, never one per key). Every record carries three headers: ``call`` (an id unique to the call), ``count`` (the
records of the call) and ``applied`` (the input offset the call applied up to), so that a reader can tell a whole
call from the start of one that a crash cut short.

Replay (:class:`Replay`) applies the records of a changelog in order, a call at a time:

- a call is applied when its last record arrives, or when a record of another call follows it. A call that is
  followed by another may be short of records for two reasons, and applying what is left is right in both: the
  broker's compaction removed records whose keys a later call wrote again, or a worker crashed in the middle of
  sending it and the next owner of the partition wrote a *repair* call restoring every key of it (below);
- a call still short of records at the end of the log was cut short by a crash and is not applied: the partition's
  new owner leaves it out, and before it handles anything it writes a repair call holding its own value (or a
  tombstone) for each key of the cut call, so that a later replay of the whole log ends in the same state.

>>> replay = Replay()
>>> replay.feed(0, b"k1", b"v1", headers("c1", 2, 10))
>>> replay.feed(1, b"k2", None, headers("c1", 2, 10))
>>> replay.feed(2, b"k1", b"v2", headers("c2", 2, 11))
>>> [(c.applied, c.last_offset, c.writes) for c in replay.take()]
[(10, 1, {'k1': b'v1', 'k2': None})]
>>> replay.trailing_keys()
['k1']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["AppliedCall", "Replay", "headers", "read_headers"]

_CALL, _COUNT, _APPLIED = "call", "count", "applied"


def headers(call_id: str, count: int, applied: int) -> list[tuple[str, bytes]]:
    """Return the headers of every record of a call."""
    return [(_CALL, call_id.encode()), (_COUNT, str(count).encode()), (_APPLIED, str(applied).encode())]


def read_headers(raw: Iterable[tuple[str, bytes]]) -> tuple[str, int, int] | None:
    """Return ``(call id, count, applied)`` from a record's headers, or None if they are not a call's."""
    found = dict(raw)
    try:
        return found[_CALL].decode(), int(found[_COUNT]), int(found[_APPLIED])
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


@dataclass
class AppliedCall:
    """A call to apply to the store: its writes (None deletes), the input offset it applied, its last record."""

    applied: int
    last_offset: int
    writes: dict[str, bytes | None] = field(default_factory=dict)


@dataclass
class _Pending:
    call_id: str
    count: int
    applied: int
    seen: int = 0
    last_offset: int = -1
    writes: dict[str, bytes | None] = field(default_factory=dict)


class Replay:
    """Turn changelog records, fed in offset order, into the calls to apply (see the module docs)."""

    def __init__(self) -> None:
        self._pending: _Pending | None = None
        self._ready: list[AppliedCall] = []
        self.records = 0
        self.foreign = 0  # records without call headers (applied on their own)

    def feed(
        self, offset: int, key: bytes | None, value: bytes | None, raw_headers: Sequence[tuple[str, bytes]]
    ) -> None:
        """Take the next record of the log."""
        self.records += 1
        if key is None:
            return
        text = key.decode("utf-8", "surrogateescape")
        call = read_headers(raw_headers)
        if call is None:
            self._close()
            self.foreign += 1
            self._ready.append(AppliedCall(-1, offset, {text: value}))
            return
        call_id, count, applied = call
        pending = self._pending
        if pending is None or pending.call_id != call_id:
            self._close()
            pending = self._pending = _Pending(call_id, count, applied)
        pending.writes[text] = value
        pending.seen += 1
        pending.last_offset = offset
        if pending.seen >= pending.count:
            self._close()

    def _close(self) -> None:
        pending = self._pending
        if pending is not None:
            self._ready.append(AppliedCall(pending.applied, pending.last_offset, pending.writes))
            self._pending = None

    def take(self) -> list[AppliedCall]:
        """Return the calls that are ready to apply, in order, and forget them."""
        ready, self._ready = self._ready, []
        return ready

    def trailing_keys(self) -> list[str]:
        """Return the keys of a call cut short at the end of the log so far (none when the last call is whole)."""
        return sorted(self._pending.writes) if self._pending is not None else []
