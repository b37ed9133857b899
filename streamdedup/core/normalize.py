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

import functools
import hashlib
import unicodedata
from typing import TYPE_CHECKING

from streamdedup.core import kernels

if TYPE_CHECKING:
    import regex

__all__ = ["content_hash", "normalize", "words"]


@functools.cache
def _edge_punctuation() -> regex.Pattern[str]:
    """A run of Unicode punctuation at the start or the end of a word, in text whose words are separated by one space.

    Compiled on the first text that is not ASCII: the ``regex`` module (for its Unicode property classes) takes some
    15 ms to import, a launch's share that ASCII text never needs.
    """
    import regex  # noqa: PLC0415

    return regex.compile(r"(?:(?<=^| )\p{P}+)|(?:\p{P}+(?= |$))")


# Every code point reaches the fixed point after one more fold; the bound only guarantees termination.
_MAX_FOLDS = 8


def _fold(text: str) -> str:
    if text.isascii():
        return text.lower()  # NFKC leaves ASCII alone, and casefold is lower() there
    # casefold can undo what NFKC composed ("ǰ" folds to "j" and a combining caron, which NFKC composes again), and
    # NFKC can produce letters that casefold changes, so apply both until the text stops changing. The result is
    # not always in NFKC form, but it is a fixed point, which is what makes normalization idempotent.
    folded = unicodedata.normalize("NFKC", text).casefold()
    if unicodedata.is_normalized("NFKC", folded):
        return folded  # NFKC leaves it alone and casefold is idempotent: already the fixed point (the usual case)
    for _ in range(_MAX_FOLDS):
        again = unicodedata.normalize("NFKC", folded).casefold()
        if again == folded:
            break
        folded = again
    return folded


# The ASCII characters of Unicode's punctuation categories (P*): what \p{P} matches in ASCII text.
_ASCII_PUNCTUATION = "".join(c for c in map(chr, range(128)) if unicodedata.category(c).startswith("P"))


def words(text: str) -> list[str]:
    """Return the normalized words of ``text``: folded, edge punctuation removed, split on whitespace."""
    if text.isascii():
        # Most text is ASCII: folding is lower(), and stripping each word's edges is what the pattern does.
        return [word for raw in text.lower().split() if (word := raw.strip(_ASCII_PUNCTUATION))]
    return _words_by_pattern(text)


def _words_by_pattern(text: str) -> list[str]:
    """:func:`words` for any text: Unicode folding, and the edge-punctuation pattern."""
    spaced = " ".join(_fold(text).split())  # str.split's notion of whitespace, wider than the regex's \s
    stripped: str = _edge_punctuation().sub("", spaced)
    return stripped.split()


def normalize(text: str) -> str:
    """Return the normalized form of ``text`` that hashing and shingling see: its :func:`words`, joined by spaces."""
    if text.isascii():
        compiled = kernels.native()
        if compiled is not None:
            # native/src/text.rs: the words as the ASCII path of ``words`` finds them, joined in one pass.
            return compiled.normalize_ascii(text)  # type: ignore[no-any-return]  # None only for text not ASCII
    return " ".join(words(text))


def content_hash(text: str) -> str:
    """Return the SHA-256 hex digest of the normalized ``text``."""
    return hashlib.sha256(normalize(text).encode("utf-8")).hexdigest()
