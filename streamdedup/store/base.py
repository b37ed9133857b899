"""The store protocol: partition-local state of every stage, committed atomically with driver metadata.

A :class:`Store` holds, per stage and partition, a map from key to bytes, plus a small metadata map (format
version, engine parameters, progress counters). A :class:`Transaction` overlays a store for one batch: handlers
read and write through :meth:`Transaction.partition`, and :meth:`Transaction.commit` writes every change and the
metadata in one atomic step, so a crash leaves either all of a batch or none of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from streamdedup.core.messages import STAGES
from streamdedup.core.params import EngineParams, describe_mismatch
from streamdedup.errors import StateError, StateMismatchError

__all__ = [
    "FAMILIES",
    "PARAMS_KEY",
    "VIEW_FAMILY",
    "Changes",
    "Store",
    "Transaction",
    "check_params",
    "state_error",
]

PARAMS_KEY = "engine-params"
#: Where the embedded driver keeps its per-key view totals, beside the stages' state.
VIEW_FAMILY = "view"
#: Every keyed family a store holds: one per stage, and the view totals.
FAMILIES = (*STAGES, VIEW_FAMILY)

#: (stage, partition) -> key -> new value, or None to delete. Grouped by partition, so that a handler's writes go
#: straight into its partition's map (many at once with ``put_many``) and a store writes each group under one prefix.
Changes = Mapping[tuple[str, int], Mapping[str, "bytes | None"]]


class Store(Protocol):
    """Stage state and metadata behind one atomic commit."""

    def get(self, stage: str, partition: int, key: str) -> bytes | None:
        """Return the value of ``key`` in a stage partition, or None."""
        ...

    def get_many(self, stage: str, partition: int, keys: list[str]) -> list[bytes | None]:
        """Return the values of many keys of a stage partition, in order."""
        ...

    def scan(self, stage: str, partition: int, prefix: str) -> list[tuple[str, bytes]]:
        """Return every (key, value) of a stage partition whose key starts with ``prefix``, in key order."""
        ...

    def get_meta(self, key: str) -> bytes | None:
        """Return a metadata value, or None."""
        ...

    def commit(self, changes: Changes, meta: Mapping[str, bytes]) -> None:
        """Apply every change and metadata value atomically."""
        ...

    def close(self) -> None:
        """Release the store; later calls fail."""
        ...


class _PartitionView:
    """A :class:`~streamdedup.core.tables.PartitionState` over a transaction."""

    __slots__ = ("_changes", "_partition", "_stage", "_txn")

    def __init__(self, txn: Transaction, stage: str, partition: int) -> None:
        self._txn, self._stage, self._partition = txn, stage, partition
        self._changes = txn.changes_of(stage, partition)

    def get(self, key: str) -> bytes | None:
        return self._txn.read(self._stage, self._partition, key)

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        return self._txn.read_many(self._stage, self._partition, keys)

    def scan(self, prefix: str) -> list[tuple[str, bytes]]:
        return self._txn.scan(self._stage, self._partition, prefix)

    def record_cache(self, record_type: type) -> dict[str, Any]:
        return self._txn.records.setdefault((self._stage, self._partition, record_type), {})

    def put(self, key: str, value: bytes) -> None:
        self._changes[key] = value

    def delete(self, key: str) -> None:
        self._changes[key] = None

    def put_many(self, writes: Iterable[tuple[str, bytes | None]]) -> None:
        self._changes.update(writes)


class _Missing:
    """The type of :data:`_MISSING`."""


_MISSING = _Missing()  # a key this transaction has not changed (None is a change: a deletion)


class Transaction:
    """Changes to a store that become visible to its reads at once and durable at :meth:`commit`."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.changes: dict[tuple[str, int], dict[str, bytes | None]] = {}
        self.meta: dict[str, bytes] = {}
        # Records decoded by the handler calls of this transaction, by (stage, partition, record type): every
        # call after the first finds them decoded (see :class:`~streamdedup.core.tables.Table`).
        self.records: dict[tuple[str, int, type], dict[str, Any]] = {}

    def changes_of(self, stage: str, partition: int) -> dict[str, bytes | None]:
        """Return the map of this transaction's changes to one stage partition (key to value, None deletes)."""
        changes = self.changes.get((stage, partition))
        if changes is None:
            changes = self.changes[(stage, partition)] = {}
        return changes

    def read(self, stage: str, partition: int, key: str) -> bytes | None:
        """Return the value of ``key`` as this transaction sees it."""
        changes = self.changes.get((stage, partition))
        if changes and key in changes:
            return changes[key]
        try:
            return self._store.get(stage, partition, key)
        except Exception as exc:
            raise state_error(exc) from exc

    def read_many(self, stage: str, partition: int, keys: list[str]) -> list[bytes | None]:
        """Return the values of many keys as this transaction sees them, with one store read for the rest."""
        changes = self.changes.get((stage, partition))
        if not changes:
            try:
                return self._store.get_many(stage, partition, keys)
            except Exception as exc:
                raise state_error(exc) from exc
        found: list[bytes | _Missing | None] = [changes.get(k, _MISSING) for k in keys]
        missing = [k for k, v in zip(keys, found, strict=True) if v is _MISSING]
        if not missing:
            return found  # type: ignore[return-value]
        try:
            values = self._store.get_many(stage, partition, missing)
        except Exception as exc:
            raise state_error(exc) from exc
        if len(missing) == len(keys):
            return values
        stored = iter(values)
        return [next(stored) if v is _MISSING else v for v in found]  # type: ignore[misc]

    def scan(self, stage: str, partition: int, prefix: str) -> list[tuple[str, bytes]]:
        """Return every (key, value) under ``prefix`` as this transaction sees it, in key order.

        It reads the store's range once and overlays this transaction's changes to it (a scan is for the rare
        reads of a whole group of keys, so looking through the changes is fine).
        """
        try:
            found = dict(self._store.scan(stage, partition, prefix))
        except Exception as exc:
            raise state_error(exc) from exc
        for key, value in self.changes.get((stage, partition), {}).items():
            if key.startswith(prefix):
                if value is None:
                    found.pop(key, None)
                else:
                    found[key] = value
        return sorted(found.items())

    def nested(self) -> Transaction:
        """Return a transaction over this one: it sees this one's changes, and its commit adds to them only."""
        return Transaction(_TransactionStore(self))

    def partition(self, stage: str, partition: int) -> _PartitionView:
        """Return the state one handler call sees."""
        return _PartitionView(self, stage, partition)

    def commit(self) -> None:
        """Write the changes and metadata atomically and start afresh."""
        if self.meta or any(self.changes.values()):
            self._store.commit(self.changes, self.meta)
        self.changes, self.meta, self.records = {}, {}, {}


class _TransactionStore:
    """A :class:`Store` whose state is a transaction: what a nested transaction reads and commits into."""

    __slots__ = ("_txn",)

    def __init__(self, txn: Transaction) -> None:
        self._txn = txn

    def get(self, stage: str, partition: int, key: str) -> bytes | None:
        return self._txn.read(stage, partition, key)

    def get_many(self, stage: str, partition: int, keys: list[str]) -> list[bytes | None]:
        return self._txn.read_many(stage, partition, keys)

    def scan(self, stage: str, partition: int, prefix: str) -> list[tuple[str, bytes]]:
        return self._txn.scan(stage, partition, prefix)

    def get_meta(self, key: str) -> bytes | None:
        meta = self._txn.meta
        return meta[key] if key in meta else self._txn._store.get_meta(key)

    def commit(self, changes: Changes, meta: Mapping[str, bytes]) -> None:
        for (stage, partition), writes in changes.items():
            self._txn.changes_of(stage, partition).update(writes)
        self._txn.meta.update(meta)
        self._txn.records.clear()  # its decoded records may predate these changes

    def close(self) -> None:
        pass


def state_error(exc: Exception) -> StateError:
    """Return a store's failure as :class:`StateError`, so that a driver never blames it on the input.

    Callers catch around the store call itself (``raise state_error(exc) from exc``): a ``try`` costs nothing on
    the read path, where a context manager per read would.
    """
    if isinstance(exc, StateError):
        return exc
    return StateError(f"reading the state failed: {exc!r}")


def check_params(store: Store, params: EngineParams, *, where: str) -> None:
    """Record ``params`` in a new store, or refuse a store built under different parameters."""
    wanted = params.fingerprint()
    raw = store.get_meta(PARAMS_KEY)
    if raw is None:
        store.commit({}, {PARAMS_KEY: json.dumps(wanted, sort_keys=True).encode()})
        return
    diffs = describe_mismatch(json.loads(raw), wanted)
    if diffs is not None:
        raise StateMismatchError(
            f"the state at {where} was built with {diffs}; use those settings, or build a new state under the new "
            "ones from this one's retained record (docs/generations.md): 'streamdedup run --state NEW "
            f"--rebuild-from {where} --set NAME=VALUE'"
        )
