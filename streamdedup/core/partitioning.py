"""Kafka's default partitioner: ``murmur2(key) & 0x7fffffff % partitions``.

Every driver maps keys to partitions with it, so a batch the Kafka driver sends to a partition explicitly lands
exactly where Kafka would have put each of its keys.

>>> murmur2(b"21")
-973932308
>>> partition_for("21", 4)
0
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["murmur2", "partition_for", "positive_murmur2"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Return the signed 32-bit MurmurHash2 of ``data`` with Kafka's seed, as the Java client computes it."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length - length % 4
    for i in range(0, end, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length % 4
    if extra == 3:
        h ^= data[end + 2] << 16
    if extra >= 2:
        h ^= data[end + 1] << 8
    if extra >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@functools.cache
def _compiled() -> Callable[[bytes], Any]:
    """Compile (or load from numba's cache) the partitioner on first use: importing numba takes a while."""
    import numba
    import numpy as np

    def _positive_murmur2(
        data: Any,
    ) -> Any:  # pragma: no cover - compiled; equal to murmur2(data) & 0x7FFFFFFF
        mask = np.uint64(0xFFFFFFFF)
        m = np.uint64(0x5BD1E995)
        length = len(data)
        h = (np.uint64(0x9747B28C) ^ np.uint64(length)) & mask
        end = length - length % 4
        for i in range(0, end, 4):
            k = (
                np.uint64(data[i])
                | (np.uint64(data[i + 1]) << np.uint64(8))
                | (np.uint64(data[i + 2]) << np.uint64(16))
                | (np.uint64(data[i + 3]) << np.uint64(24))
            )
            k = (k * m) & mask
            k ^= k >> np.uint64(24)
            k = (k * m) & mask
            h = ((h * m) & mask) ^ k
        extra = length % 4
        if extra == 3:
            h ^= np.uint64(data[end + 2]) << np.uint64(16)
        if extra >= 2:
            h ^= np.uint64(data[end + 1]) << np.uint64(8)
        if extra >= 1:
            h ^= np.uint64(data[end])
            h = (h * m) & mask
        h ^= h >> np.uint64(13)
        h = (h * m) & mask
        h ^= h >> np.uint64(15)
        return np.int64(h & np.uint64(0x7FFFFFFF))

    return numba.njit(cache=True, nogil=True)(_positive_murmur2)


def positive_murmur2(data: bytes) -> int:
    """Return ``murmur2(data) & 0x7FFFFFFF``, compiled (what Kafka's default partitioner takes modulo)."""
    return int(_compiled()(data))


def partition_for(key: str, partitions: int) -> int:
    """Return the partition Kafka's default partitioner assigns to ``key`` (compiled: every message needs one)."""
    if partitions == 1:
        return 0
    return int(_compiled()(key.encode("utf-8"))) % partitions
