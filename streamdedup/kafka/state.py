"""Partition state over a Faust table, written back only after the outputs it caused were delivered.

The Kafka driver runs a handler against :class:`TableState`: reads go to the Faust table (the partition of the
event being processed), writes stay here. After the outputs are delivered, :meth:`TableState.write_back` writes
every key the handler touched to the table, which also sends it to the table's changelog. Writing back keys that
only were read is deliberate: after a hard crash a worker may restart with a local state that is ahead of its
changelog; the redelivered messages touch the same keys again, and writing them back heals the changelog.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from streamdedup.store.base import state_error

__all__ = ["TableState"]


class TableState:
    """A :class:`~streamdedup.core.state.PartitionState` buffering writes to a Faust table."""

    def __init__(self, table: MutableMapping[bytes, bytes]) -> None:
        self._table = table
        self._values: dict[str, bytes | None] = {}

    def get(self, key: str) -> bytes | None:
        """Return the value of ``key``, reading the table once per batch."""
        if key not in self._values:
            try:
                self._values[key] = self._table.get(key.encode("utf-8"))
            except Exception as exc:
                raise state_error(exc) from exc
        return self._values[key]

    def put(self, key: str, value: bytes) -> None:
        """Set ``key`` (written to the table by :meth:`write_back`)."""
        self._values[key] = value

    def delete(self, key: str) -> None:
        """Remove ``key`` (removed from the table by :meth:`write_back`)."""
        self._values[key] = None

    def write_back(self) -> int:
        """Write every touched key to the table; return how many were written."""
        for key, value in self._values.items():
            raw_key = key.encode("utf-8")
            if value is None:
                if raw_key in self._table:
                    del self._table[raw_key]
            else:
                self._table[raw_key] = value
        written = len(self._values)
        self._values = {}
        return written
