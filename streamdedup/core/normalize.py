"""Text normalization and content hashing (design §3).

Normalization is conservative: Unicode NFKC, casefold, whitespace collapsed, and punctuation stripped only at the
edges of words, so digits and in-word punctuation survive (``v2`` and ``v3``, ``float16`` and ``float32``,
``30-day`` and ``14-day`` stay different).

>>> normalize("  The  Quick\\u00a0brown FOX. ")
'the quick brown fox'
>>> content_hash("A  b") == content_hash("a b")
True
"""

from __future__ import annotations

import hashlib
import unicodedata

__all__ = ["content_hash", "normalize", "words"]


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char)[0] == "P"


def _strip_edges(token: str) -> str:
    start, end = 0, len(token)
    while start < end and _is_punctuation(token[start]):
        start += 1
    while end > start and _is_punctuation(token[end - 1]):
        end -= 1
    return token[start:end]


def _fold(text: str) -> str:
    # casefold can leave strings that NFKC changes again (and the reverse), so fold until stable.
    previous = None
    while previous != text:
        previous = text
        text = unicodedata.normalize("NFKC", text).casefold()
    return text


def words(text: str) -> list[str]:
    """Return the normalized words of ``text``: folded, split on whitespace, edge punctuation removed."""
    out = []
    for raw in _fold(text).split():
        token = _strip_edges(raw)
        if token:
            out.append(token)
    return out


def normalize(text: str) -> str:
    """Return the normalized form of ``text`` that hashing and shingling see."""
    return " ".join(words(text))


def content_hash(text: str) -> str:
    """Return the SHA-256 hex digest of the normalized ``text``."""
    return hashlib.sha256(normalize(text).encode("utf-8")).hexdigest()
