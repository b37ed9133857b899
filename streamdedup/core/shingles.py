"""Word shingles, their 32-bit hash (what MinHash signatures permute), and the exact Jaccard similarity that
verifies every near-duplicate candidate.

>>> shingles("a b c d e f", 5)
['a b c d e', 'b c d e f']
>>> jaccard("a b c d e f", "a b c d e g", 5)
0.3333333333333333
"""

from __future__ import annotations

__all__ = ["jaccard", "jaccard_of_sets", "shingle_hash32", "shingle_set", "shingles"]

_MASK64 = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_COMBINE = 0x9E3779B97F4A7C15


def _mix64(h: int) -> int:
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
    return h ^ (h >> 31)


def _fnv1a(word: bytes) -> int:
    h = _FNV_OFFSET
    for byte in word:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    return h


def _word_hash(word: bytes) -> int:
    return _mix64(_fnv1a(word))


def shingle_hash32(shingle: bytes) -> int:
    """Return the 32-bit hash of one shingle (its words joined by single spaces), as the kernel computes it."""
    acc = 0
    for word in shingle.split(b" "):
        acc = (acc * _COMBINE + _word_hash(word)) & _MASK64
    acc = _mix64(acc)
    return (acc ^ (acc >> 32)) & 0xFFFFFFFF


def shingles(normalized: str, size: int) -> list[str]:
    """Return the word ``size``-grams of already normalized text (one shingle if it is shorter)."""
    tokens = normalized.split()
    if not tokens:
        return []
    if len(tokens) <= size:
        return [" ".join(tokens)]
    return [" ".join(tokens[i : i + size]) for i in range(len(tokens) - size + 1)]


def shingle_set(normalized: str, size: int) -> frozenset[str]:
    """Return the set of word ``size``-grams of already normalized text."""
    return frozenset(shingles(normalized, size))


def jaccard_of_sets(a: frozenset[str], b: frozenset[str]) -> float:
    """Return the size of the intersection over the size of the union (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def jaccard(a: str, b: str, size: int) -> float:
    """Return the exact Jaccard similarity of the shingle sets of two normalized texts."""
    return jaccard_of_sets(shingle_set(a, size), shingle_set(b, size))
