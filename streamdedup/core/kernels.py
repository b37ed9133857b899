"""numba kernels of the engine: MinHash signatures of a batch of texts, and Kafka's partitioner hash.

Imported only through :mod:`streamdedup.core.compiled`, which decides when loading them pays; each has a NumPy
or pure-Python twin that gives the same results (:func:`streamdedup.core.signatures.numpy_kernel`,
:func:`streamdedup.core.partitioning.murmur2`), and the tests compare them.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

__all__ = ["positive_murmur2", "signatures"]


@numba.njit(cache=True, nogil=True)
def mix64(h: Any) -> Any:  # pragma: no cover - compiled
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@numba.njit(cache=True, nogil=True)
def signatures(
    data: Any, offsets: Any, size: int, a: Any, b: Any, out: Any, distinct: Any
) -> None:  # pragma: no cover - compiled; equal to signatures.numpy_kernel, checked in the tests
    perms = a.shape[0]
    mask32 = np.uint64(0xFFFFFFFF)
    for c in range(offsets.shape[0] - 1):
        start, end = offsets[c], offsets[c + 1]
        words = np.empty((end - start) // 2 + 1, dtype=np.uint64)
        count = 0
        h = np.uint64(0xCBF29CE484222325)
        inside = False
        for i in range(start, end):
            byte = data[i]
            if byte == 32:
                if inside:
                    words[count] = mix64(h)
                    count += 1
                    inside = False
            else:
                if not inside:
                    h = np.uint64(0xCBF29CE484222325)
                    inside = True
                h = (h ^ np.uint64(byte)) * np.uint64(0x100000001B3)
        if inside:
            words[count] = mix64(h)
            count += 1
        for p in range(perms):
            out[c, p] = np.uint32(0xFFFFFFFF)
        if count == 0:
            distinct[c] = 0
            continue
        width = min(size, count)
        shingles = np.empty(count - width + 1, dtype=np.uint32)
        for s in range(count - width + 1):
            acc = np.uint64(0)
            for j in range(width):
                acc = acc * np.uint64(0x9E3779B97F4A7C15) + words[s + j]
            acc = mix64(acc)
            shingles[s] = np.uint32((acc ^ (acc >> np.uint64(32))) & mask32)
        shingles.sort()
        unique = 0
        for s in range(shingles.shape[0]):
            if s > 0 and shingles[s] == shingles[s - 1]:
                continue
            unique += 1
            hv = np.uint64(shingles[s])  # MurmurHash3 fmix32, then the affine permutations mod 2**32
            hv = hv ^ (hv >> np.uint64(16))
            hv = (hv * np.uint64(0x85EBCA6B)) & mask32
            hv = hv ^ (hv >> np.uint64(13))
            hv = (hv * np.uint64(0xC2B2AE35)) & mask32
            hv = hv ^ (hv >> np.uint64(16))
            for p in range(perms):
                value = np.uint32((np.uint64(a[p]) * hv + np.uint64(b[p])) & mask32)
                out[c, p] = min(out[c, p], value)
        distinct[c] = unique


@numba.njit(cache=True, nogil=True)
def positive_murmur2(data: Any) -> Any:  # pragma: no cover - compiled; equal to murmur2(data) & 0x7FFFFFFF
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
