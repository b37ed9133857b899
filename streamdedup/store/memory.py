"""A store in process memory, for tests and short runs."""

from __future__ import annotations

from collections.abc import Mapping

from streamdedup.errors import StateError
from streamdedup.store.base import Changes

__all__ = ["MemoryStore"]


class MemoryStore:
    """Stage state in dictionaries; :meth:`commit` applies a batch at once."""

    def __init__(self) -> None:
        self._data: dict[tuple[str, int, str], bytes] = {}
        self._meta: dict[str, bytes] = {}
        self._closed = False

    def get(self, stage: str, partition: int, key: str) -> bytes | None:
        """Return the value of ``key`` in a stage partition, or None."""
        self._check()
        return self._data.get((stage, partition, key))

    def get_many(self, stage: str, partition: int, keys: list[str]) -> list[bytes | None]:
        """Return the values of many keys of a stage partition, in order."""
        self._check()
        return [self._data.get((stage, partition, key)) for key in keys]

    def scan(self, stage: str, partition: int, prefix: str) -> list[tuple[str, bytes]]:
        """Return every (key, value) of a stage partition whose key starts with ``prefix``, in key order."""
        self._check()
        return sorted(
            (k, v)
            for (s, p, k), v in self._data.items()
            if s == stage and p == partition and k.startswith(prefix)
        )

    def get_meta(self, key: str) -> bytes | None:
        """Return a metadata value, or None."""
        self._check()
        return self._meta.get(key)

    def commit(self, changes: Changes, meta: Mapping[str, bytes]) -> None:
        """Apply every change and metadata value."""
        self._check()
        for (stage, partition), writes in changes.items():
            for key, value in writes.items():
                if value is None:
                    self._data.pop((stage, partition, key), None)
                else:
                    self._data[(stage, partition, key)] = value
        self._meta.update(meta)

    def keys(self, stage: str) -> list[tuple[int, str]]:
        """Return the (partition, key) pairs of a stage, sorted."""
        return sorted((p, k) for s, p, k in self._data if s == stage)

    def close(self) -> None:
        """Drop nothing, but refuse later use, like a closed database."""
        self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise StateError("the memory store is closed")
