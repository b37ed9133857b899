"""Two-bit sketches of MinHash signatures, to dismiss band candidates that are far below the threshold cheaply.

A band candidate is a text that shares at least one LSH band with a new text. Most share a band by chance and are
far below the threshold; verifying one costs a read of the candidate's record, its shingles and a settle. A
sketch keeps two bits of each signature value (b-bit minwise hashing, Li and König), hashed so that two values
that differ give independent bits. Two texts agree on a field with probability ``q = J + (1 - J) / 4``, so the
number of agreeing fields is binomial, and a pair at the threshold agrees on fewer than :func:`dismiss_below`
fields with a probability under ``DISMISS_ERROR``. A candidate below that count is answered "no edge" without
reading its record; any other is verified exactly, so no pair is ever merged on an estimate.

>>> import numpy as np
>>> a = sketches(np.arange(128, dtype=np.uint32)[None, :])[0]
>>> len(a), agreements(a, a, 128)
(32, 128)
>>> dismiss_below(0.8, 128) > 64  # a pair near J = 1/3 agrees on about 64 fields
True
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["DISMISS_ERROR", "agreements", "dismiss_below", "estimate", "sketches"]

FIELD_BITS = 2
FIELDS_PER_BYTE = 8 // FIELD_BITS
# The chance that a pair exactly at the threshold is dismissed (it would then not be verified).
DISMISS_ERROR = 1e-12
_MULTIPLIER = 0x9E3779B1  # Fibonacci hashing: the top bits of the product depend on every bit
_LOW_BITS = int("01" * 4096, 2)  # the low bit of every field, for sketches of up to 16,384 bytes


def sketches(signatures: npt.NDArray[np.uint32]) -> list[bytes]:
    """Return the sketch of each signature row: two bits per value, four values per byte (the engine's come from
    :meth:`~streamdedup.core.signatures.SignatureScheme.features`, compiled; the tests compare the two)."""
    import numpy as np  # noqa: PLC0415 - the engine's sketches are compiled and need no NumPy

    rows, width = signatures.shape
    fields = (signatures.astype(np.uint32) * np.uint32(_MULTIPLIER)) >> np.uint32(32 - FIELD_BITS)
    padded = np.zeros((rows, -(-width // FIELDS_PER_BYTE) * FIELDS_PER_BYTE), dtype=np.uint8)
    padded[:, :width] = fields
    packed = padded[:, 0::4] | (padded[:, 1::4] << 2) | (padded[:, 2::4] << 4) | (padded[:, 3::4] << 6)
    return [row.tobytes() for row in packed]


def agreements(a: bytes, b: bytes, fields: int) -> int:
    """Return on how many of ``fields`` two sketches agree (padding fields are equal in both)."""
    x = int.from_bytes(a, "little") ^ int.from_bytes(b, "little")
    return fields - ((x | (x >> 1)) & _LOW_BITS).bit_count()


def estimate(agreed: int, fields: int) -> float:
    """Return the Jaccard estimate of a pair whose sketches agree on ``agreed`` of ``fields``."""
    chance = 1 / (1 << FIELD_BITS)
    return max(0.0, (agreed / fields - chance) / (1 - chance))


@functools.cache
def dismiss_below(threshold: float, fields: int, error: float = DISMISS_ERROR) -> int:
    """Return the fewest agreeing fields that a pair needs to be verified (0 when no count is safe to dismiss).

    The largest ``c`` such that a pair at ``J = threshold`` agrees on fewer than ``c`` fields with probability at
    most ``error``; a pair above the threshold is dismissed even less often.
    """
    q = threshold + (1 - threshold) / (1 << FIELD_BITS)
    if q >= 1.0:
        return 0  # identical texts only: the sketch cannot tell more than the exact check
    cumulative = 0.0
    for k in range(fields + 1):
        cumulative += math.comb(fields, k) * q**k * (1 - q) ** (fields - k)
        if cumulative > error:
            return k
    return 0  # pragma: no cover - the probabilities sum to 1
