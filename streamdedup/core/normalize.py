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

import regex

__all__ = ["content_hash", "normalize", "words"]

# A run of Unicode punctuation at the start or the end of a word, in text whose words are separated by one space.
_EDGE_PUNCTUATION = regex.compile(r"(?:(?<=^| )\p{P}+)|(?:\p{P}+(?= |$))")


def _fold(text: str) -> str:
    if text.isascii():
        return text.lower()  # NFKC leaves ASCII alone, and casefold is lower() there
    # casefold can leave strings that NFKC changes again (and the reverse), so fold until stable.
    text = unicodedata.normalize("NFKC", text).casefold()
    while not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text).casefold()
    return text


def words(text: str) -> list[str]:
    """Return the normalized words of ``text``: folded, edge punctuation removed, split on whitespace."""
    spaced = " ".join(_fold(text).split())  # str.split's notion of whitespace, wider than the regex's \s
    stripped: str = _EDGE_PUNCTUATION.sub("", spaced)
    return stripped.split()


def normalize(text: str) -> str:
    """Return the normalized form of ``text`` that hashing and shingling see."""
    return " ".join(words(text))


def content_hash(text: str) -> str:
    """Return the SHA-256 hex digest of the normalized ``text``."""
    return hashlib.sha256(normalize(text).encode("utf-8")).hexdigest()
