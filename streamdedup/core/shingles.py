"""Word shingles and the exact Jaccard similarity that verifies every near-duplicate candidate.

>>> shingles("a b c d e f", 5)
['a b c d e', 'b c d e f']
>>> jaccard("a b c d e f", "a b c d e g", 5)
0.3333333333333333
"""

from __future__ import annotations

__all__ = ["jaccard", "jaccard_of_sets", "shingle_set", "shingles"]


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
