"""What a handler reaches its state through: a driver's :class:`PartitionState`, and typed :class:`Table` access.

A handler sees only :class:`PartitionState` (bytes by key) for the one partition of its own stage; the records
(:mod:`streamdedup.core.state`) are encoded as MessagePack by msgspec (never pickle). :class:`Table` gives typed
access; over a driver's transaction it keeps the records decoded for the rest of the batch, so a batch decodes each
key once (it encodes a record at the end of each handler call that changed it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from streamdedup.core.state import (
    BoilerplateSnapshot,
    CollectionMember,
    CollectionRecord,
    ContentIds,
    ContentRecord,
    DecisionRecord,
    LineageRecord,
    LineRecord,
    RefEntry,
    Retained,
    SourceRecord,
)

__all__ = ["BulkPartitionState", "PartitionState", "Table", "reader", "write_all"]


class PartitionState(Protocol):
    """Key-value access to one partition of one stage's state, provided by a driver."""

    def get(self, key: str) -> bytes | None:
        """Return the stored value of ``key``, or None."""
        ...

    def put(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key`` (visible to later gets in the same batch)."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key``."""
        ...

    def scan(self, prefix: str) -> list[tuple[str, bytes]]:
        """Return every (key, value) whose key starts with ``prefix``, in key order (for rare whole-group reads)."""
        ...


class BulkPartitionState(PartitionState, Protocol):
    """A partition state that can also read and write many keys in one call."""

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        """Return the stored values of ``keys``, in order (None where absent)."""
        ...

    def put_many(self, writes: Iterable[tuple[str, bytes | None]]) -> None:
        """Store each (key, value) of ``writes`` in order; a value of None removes its key."""
        ...


def reader(state: PartitionState) -> Callable[[list[str]], Sequence[bytes | None]]:
    """Return how to read many keys of ``state`` at once: its multi-get where it has one, else key by key."""
    get_many = getattr(state, "get_many", None)
    return get_many if get_many is not None else lambda keys: [state.get(k) for k in keys]


def write_all(state: PartitionState, writes: Sequence[tuple[str, bytes | None]]) -> None:
    """Apply a handler's (key, value or None to remove) writes, in one call where the state takes many at once."""
    put_many = getattr(state, "put_many", None)
    if put_many is not None:
        put_many(writes)
        return
    for key, value in writes:
        if value is None:
            state.delete(key)
        else:
            state.put(key, value)


R = TypeVar(
    "R",
    SourceRecord,
    ContentRecord,
    RefEntry,
    BoilerplateSnapshot,
    CollectionRecord,
    LineRecord,
    CollectionMember,
    ContentIds,
    DecisionRecord,
    Retained,
    LineageRecord,
)


class Table(Generic[R]):
    """Typed, batch-cached access to one stage's records over a :class:`PartitionState`.

    Where the state offers a ``record_cache`` (a driver's transaction does), decoded records outlive the handler
    call: the later calls of one transaction find them decoded. Every change to a record must then be marked
    (:meth:`mark`, :meth:`put`, :meth:`delete`), as it must anyway to be written.
    """

    def __init__(self, state: PartitionState, record_type: type[R]) -> None:
        self._state: PartitionState = state
        self._type: type[R] = record_type
        self._decoder: msgspec.msgpack.Decoder[R] = _decoder(record_type)
        self._encoder = _ENCODER
        shared = getattr(state, "record_cache", None)
        self._cache: dict[str, R | None] = {} if shared is None else shared(record_type)
        self._dirty: set[str] = set()
        self._created: set[str] = set()  # new records not (yet) marked: absent again after the call

    def prefetch(self, keys: list[str]) -> None:
        """Decode the records of ``keys`` ahead of use, with one bulk read where the state supports it."""
        wanted = [k for k in keys if k not in self._cache]
        if not wanted:
            return
        raws = reader(self._state)(wanted)
        for key, raw in zip(wanted, raws, strict=True):
            self._cache[key] = None if raw is None else self._decoder.decode(raw)

    def get(self, key: str) -> R | None:
        """Return the record for ``key``, or None."""
        if key not in self._cache:
            raw = self._state.get(key)
            self._cache[key] = None if raw is None else self._decoder.decode(raw)
        return self._cache[key]

    def get_or_new(self, key: str) -> R:
        """Return the record for ``key``, creating an empty one."""
        record = self.get(key)
        if record is None:
            record = self._type()
            self._cache[key] = record
            self._created.add(key)
        return record

    def put(self, key: str, record: R) -> None:
        """Replace the record for ``key``."""
        self._cache[key] = record
        self._dirty.add(key)

    def mark(self, key: str) -> None:
        """Note that the record for ``key`` changed and must be written back."""
        self._dirty.add(key)

    def delete(self, key: str) -> None:
        """Drop the record for ``key``."""
        self._cache[key] = None
        self._dirty.add(key)

    def cached(self, key: str) -> R | None:
        """Return the record of ``key`` if this table has read it (no store read)."""
        return self._cache.get(key)

    def flush(self) -> None:
        """Write every changed record to the partition state."""
        encode, cache = self._encoder.encode, self._cache
        write_all(
            self._state,
            [
                (key, None if (record := cache[key]) is None else encode(record))
                for key in sorted(self._dirty)
            ],
        )
        for key in self._created - self._dirty:
            self._cache.pop(key, None)
        self._dirty.clear()
        self._created.clear()


_ENCODER = msgspec.msgpack.Encoder()
_DECODERS: dict[type, msgspec.msgpack.Decoder[Any]] = {}


def _decoder(record_type: type[R]) -> msgspec.msgpack.Decoder[R]:
    found = _DECODERS.get(record_type)
    if found is None:
        found = _DECODERS[record_type] = msgspec.msgpack.Decoder(record_type)
    return found
