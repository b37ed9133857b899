"""Kafka's default partitioner: ``murmur2(key) & 0x7fffffff % partitions``.

Every driver maps keys to partitions with it, so a batch the Kafka driver sends to a partition explicitly lands
exactly where Kafka would have put each of its keys.

>>> murmur2(b"21")
-973932308
>>> partition_for("21", 4)
0
"""

from __future__ import annotations

from streamdedup.core import kernels

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


def positive_murmur2(data: bytes) -> int:
    """Return ``murmur2(data) & 0x7FFFFFFF`` (what Kafka's default partitioner takes modulo): every message needs
    one, so it is compiled where the kernels are (:func:`murmur2` is the Python implementation)."""
    compiled = kernels.native()
    if compiled is None:
        return murmur2(data) & 0x7FFFFFFF
    return compiled.positive_murmur2(data)  # type: ignore[no-any-return]


def partition_for(key: str, partitions: int) -> int:
    """Return the partition Kafka's default partitioner assigns to ``key``."""
    if partitions == 1:
        return 0
    return positive_murmur2(key.encode("utf-8")) % partitions
