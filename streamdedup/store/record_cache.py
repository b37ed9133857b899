"""The state's record cache in Python, and a store commit's inner loop: the compiled kernels' twins for the store.

A record cache holds the values of recently read and written keys, bounded in bytes, in front of RocksDB's own
reads (``native/src/cache.rs`` says why RocksDB's block cache does not keep them). It is written through: a store
writes a commit to RocksDB first, then hands the same changes here, so that the cache never holds a value the store
does not. :func:`new_record_cache` makes the compiled one where the kernels are compiled
(:mod:`streamdedup.core.kernels`), else :class:`RecordCacheInPython`; both have the methods of
:class:`RecordCache`.

>>> cache = RecordCacheInPython(1_000)
>>> cache.update(b"ns", {"a": b"1"})
>>> cache.get_many(b"ns", 2, ["a", "b"], lambda addresses: [None for _ in addresses], 64)
[b'1', None]
>>> cache.counts
(1, 1)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from streamdedup.core import kernels

__all__ = ["RecordCache", "RecordCacheInPython", "fill_write_batch", "new_record_cache"]

#: Bytes an entry costs beside its key and value (as the compiled cache counts them).
ENTRY_OVERHEAD = 128


class RecordCache(Protocol):
    """What a store asks of a record cache, compiled or not."""

    def get_many(
        self, ns: bytes, skip: int, keys: list[str], fetch: Callable[..., Any], chunk: int
    ) -> list[bytes | None]:
        """Return the values of ``keys`` under the namespace ``ns``, reading those it lacks with ``fetch``."""
        ...

    def update(self, ns: bytes, writes: Mapping[str, bytes | None] | Mapping[bytes, bytes | None]) -> None:
        """Apply a commit's ``writes`` under the namespace ``ns``."""
        ...

    @property
    def used(self) -> int:
        """The bytes the entries are counted at."""
        ...

    @property
    def capacity(self) -> int:
        """The bound on :attr:`used`."""
        ...

    @property
    def counts(self) -> tuple[int, int]:
        """Keys found here and keys read from the store, since it was made."""
        ...

    def __len__(self) -> int: ...


def new_record_cache(capacity: int) -> RecordCache:
    """Return a record cache of ``capacity`` bytes: compiled where the kernels are, else in Python."""
    compiled = kernels.native()
    if compiled is None:
        return RecordCacheInPython(capacity)
    return compiled.RecordCache(capacity)  # type: ignore[no-any-return]


class RecordCacheInPython:
    """A bounded map from a key to the bytes last stored under it, dropping the least recently used first.

    A read lets go of the lock around ``fetch`` (a worker opens its partition stores in a thread), and keeps what it
    read only if no :meth:`update` came meanwhile, since one may have written a newer value of the same key.
    """

    def __init__(self, capacity: int) -> None:
        self._entries: OrderedDict[bytes, tuple[bytes, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._used = 0
        self._capacity = capacity
        self._hits = 0
        self._misses = 0
        self._updates = 0

    def get_many(
        self, ns: bytes, skip: int, keys: list[str], fetch: Callable[..., Any], chunk: int
    ) -> list[bytes | None]:
        """Return the values of ``keys`` (str) under the namespace ``ns``, in order, None where absent.

        Keys the cache lacks are read with ``fetch(addresses)`` (a multi-get), at most ``chunk`` at a time; an
        address is a key's full name without the first ``skip`` bytes of ``ns``. What ``fetch`` finds is cached;
        what it does not find is not.
        """
        out: list[bytes | None] = []
        wanted: list[tuple[int, bytes]] = []
        with self._lock:
            entries = self._entries
            for i, key in enumerate(keys):
                name = ns + key.encode("utf-8")
                found = entries.get(name)
                if found is None:
                    out.append(None)
                    wanted.append((i, name))
                else:
                    entries.move_to_end(name)
                    out.append(found[0])
            self._hits += len(keys) - len(wanted)
            self._misses += len(wanted)
            updates = self._updates
        step = max(chunk, 1)
        for start in range(0, len(wanted), step):
            part = wanted[start : start + step]
            values = list(fetch([name[skip:] for _, name in part]))
            if len(values) != len(part):
                raise ValueError(f"a multi-get of {len(part)} keys answered {len(values)} values")
            with self._lock:
                keep = self._updates == updates
                for (i, name), value in zip(part, values, strict=True):
                    if keep and isinstance(value, bytes):
                        self._insert(name, value)
                    out[i] = value
        return out

    def update(self, ns: bytes, writes: Mapping[str, bytes | None] | Mapping[bytes, bytes | None]) -> None:
        """Apply a commit's ``writes`` (key, str or bytes, to bytes or None to remove) under the namespace ``ns``."""
        with self._lock:
            self._updates += 1
            for key, value in writes.items():
                name = ns + (key.encode("utf-8") if isinstance(key, str) else key)
                if value is None:
                    self._remove(name)
                else:
                    self._insert(name, value)

    def _insert(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value) + ENTRY_OVERHEAD
        if size > self._capacity:
            self._remove(name)
            return
        old = self._entries.pop(name, None)
        if old is not None:
            self._used -= old[1]
        self._entries[name] = (value, size)
        self._used += size
        while self._used > self._capacity and self._entries:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._used -= dropped

    def _remove(self, name: bytes) -> None:
        old = self._entries.pop(name, None)
        if old is not None:
            self._used -= old[1]

    @property
    def used(self) -> int:
        """The bytes the entries are counted at."""
        return self._used

    @property
    def capacity(self) -> int:
        """The bound on :attr:`used`."""
        return self._capacity

    @property
    def counts(self) -> tuple[int, int]:
        """Keys found here and keys read from the store, since it was made."""
        return self._hits, self._misses

    def __len__(self) -> int:
        return len(self._entries)


def fill_write_batch(
    put: Callable[..., None],
    delete: Callable[..., None],
    family: object,
    prefix: bytes,
    writes: Mapping[str, bytes | None],
) -> None:
    """Call ``put(prefix + key, value, family)`` for every key of ``writes`` with a value and ``delete(prefix + key,
    family)`` for every key whose value is None, in the order of the prefixed keys' bytes (compiled where the
    kernels are: the loop was a third of a commit in Python).

    Sorted, the keys reach the memtable's skiplist in order, and each insert starts its search where the last one
    ended.
    """
    compiled = kernels.native()
    if compiled is not None:
        compiled.fill_write_batch(put, delete, family, prefix, writes)
        return
    entries: Sequence[tuple[bytes, bytes | None]] = sorted(
        (prefix + key.encode("utf-8"), value) for key, value in writes.items()
    )
    for address, value in entries:
        if value is None:
            delete(address, family)
        else:
            put(address, value, family)
