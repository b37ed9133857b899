"""MinHash signatures in datasketch's data model, computed for many chunks at once, and their LSH band keys.

A signature is what ``datasketch.MinHash(num_perm, seed, scheme="affine32", hashfunc=shingle_hash32)`` holds
after ``update`` with every word shingle of a normalized text: 32-bit shingle hashes, pre-mixed with the
MurmurHash3 finalizer, permuted by ``a * h + b mod 2**32`` with datasketch's ``a`` and ``b`` for the seed, the
minimum per permutation. Signatures are stored in ``LeanMinHash``'s little-endian layout, so
``datasketch.LeanMinHash.deserialize(data, byteorder="<")`` reads them.

The shingle hash is built from word hashes (FNV-1a 64 over the word's UTF-8 bytes, then a 64-bit finalizer),
combined polynomially over the shingle's words and folded to 32 bits. That lets one compiled pass read the
UTF-8 bytes of a whole batch of texts and produce every signature, with no Python work per word or shingle:
:mod:`streamdedup.core.numpy_kernels` does it with NumPy array operations, and the package's Rust extension
(``native/`` in the repository), where it was built, in one compiled pass that needs no NumPy
(:mod:`streamdedup.core.kernels`). Both draw the permutations as datasketch does (NumPy's legacy Mersenne
Twister), and the tests compare them.

>>> scheme = SignatureScheme(num_perm=16, seed=1, shingle_size=5)
>>> sigs, distinct = scheme.signatures(["a b c d e", "a b c d e", ""])
>>> bool((sigs[0] == sigs[1]).all()), int(sigs[2][0]) == 2**32 - 1, distinct.tolist()
(True, True, [1, 1, 0])
>>> scheme.from_bytes(scheme.to_bytes(sigs[0])).tolist() == sigs[0].tolist()
True
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamdedup.core import kernels
from streamdedup.core.shingles import shingle_hash32

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Signature = npt.NDArray[np.uint32]

__all__ = ["SignatureScheme", "estimate_jaccard", "shingle_hash32"]

_SCHEME_CODE_AFFINE32 = 1
_HEADER = struct.Struct("<qiB")


def estimate_jaccard(a: Signature, b: Signature) -> float:
    """Return the MinHash estimate of the Jaccard similarity of two signatures."""
    import numpy as np  # noqa: PLC0415 - the engine computes with the compiled kernels and no NumPy

    return float(np.count_nonzero(a == b)) / len(a)


class SignatureScheme:
    """Permutations for ``num_perm`` hash functions drawn from ``seed`` exactly as datasketch draws them."""

    def __init__(self, num_perm: int, seed: int, shingle_size: int = 5) -> None:
        if not 0 <= seed <= 0xFFFFFFFF:
            raise ValueError("seed must be between 0 and 2**32 - 1")  # as numpy.random.RandomState says
        if num_perm < 1 or shingle_size < 1:
            raise ValueError("num_perm and shingle_size must be positive")
        self.num_perm = num_perm
        self.seed = seed
        self.shingle_size = shingle_size
        # The kernels in use when the scheme was made: every method of the scheme computes with them.
        self._kernels = kernels.native()
        #: The compiled scheme that :meth:`features` calls (the compiled content stage calls it directly), or None
        #: where the kernels are Python's.
        self.compiled = None if self._kernels is None else self._kernels.Scheme(num_perm, seed, shingle_size)
        self.byte_size = _HEADER.size + 4 * num_perm

    def features(
        self, normalized: Sequence[str], bands: int, rows: int, min_shingles: int
    ) -> list[tuple[int, list[str] | None, bytes]]:
        """Return, for each normalized text, its number of distinct shingles, its LSH band keys (as
        :meth:`band_keys`; None for a text of fewer than ``min_shingles`` distinct shingles, which only matches
        exactly) and the sketch of its signature (:func:`streamdedup.core.sketches.sketches`): what the engine needs
        of a new text. Compiled, it is one pass without NumPy."""
        if self.compiled is not None:
            return self.compiled.features(list(normalized), bands, rows, min_shingles)  # type: ignore[no-any-return]
        if bands * rows > self.num_perm:
            raise ValueError("bands x rows must not exceed num_perm")
        from streamdedup.core.sketches import sketches  # noqa: PLC0415 - imports NumPy

        signatures, distinct = self.signatures(normalized)
        keys = self.band_keys_many(signatures, bands, rows)
        return [
            (int(count), band_keys if count >= min_shingles else None, sketch)
            for count, band_keys, sketch in zip(distinct, keys, sketches(signatures), strict=True)
        ]

    @functools.cached_property
    def permutations(self) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
        """The ``(a, b)`` of the affine permutations, as datasketch's ``MinHash.permutations`` holds them."""
        import numpy as np  # noqa: PLC0415 - see estimate_jaccard

        if self.compiled is None:
            from streamdedup.core.numpy_kernels import permutations_numpy  # noqa: PLC0415 - imports NumPy

            return permutations_numpy(self.seed, self.num_perm)
        a, b = self.compiled.permutations()
        return np.array(a, dtype=np.uint32), np.array(b, dtype=np.uint32)

    def signatures(self, normalized: Sequence[str]) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]:
        """Return one signature row per normalized text, and the number of distinct shingles of each."""
        import numpy as np  # noqa: PLC0415 - see estimate_jaccard

        encoded = [text.encode("utf-8") for text in normalized]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        # Read-only either way (frombuffer), so that the compiled kernel has one variant to load.
        data = np.frombuffer(b"".join(encoded) if offsets[-1] else b"\0", dtype=np.uint8)
        out = np.empty((len(encoded), self.num_perm), dtype=np.uint32)
        distinct = np.zeros(len(encoded), dtype=np.int64)
        compiled = self._kernels
        if compiled is None:
            from streamdedup.core.numpy_kernels import numpy_kernel  # noqa: PLC0415 - imports NumPy

            numpy_kernel(data, offsets, self.shingle_size, *self.permutations, out, distinct)
        else:
            compiled.signatures(data, offsets, self.shingle_size, *self.permutations, out, distinct)
        return out, distinct

    def to_bytes(self, signature: Signature) -> bytes:
        """Serialize a signature in datasketch's ``LeanMinHash`` affine32 layout, little-endian."""
        import numpy as np  # noqa: PLC0415 - see estimate_jaccard

        head = _HEADER.pack(self.seed, -self.num_perm, _SCHEME_CODE_AFFINE32)
        return head + np.asarray(signature, dtype="<u4").tobytes()

    def from_bytes(self, data: bytes) -> Signature:
        """Read a signature written by :meth:`to_bytes`, checking it belongs to this scheme."""
        seed, neg_perm, code = _HEADER.unpack_from(data, 0)
        if seed != self.seed or -neg_perm != self.num_perm or code != _SCHEME_CODE_AFFINE32:
            raise ValueError("signature bytes do not match this scheme's seed and permutation count")
        import numpy as np  # noqa: PLC0415 - see estimate_jaccard

        return np.frombuffer(data, dtype="<u4", offset=_HEADER.size, count=self.num_perm).astype(np.uint32)

    def band_keys(self, signature: Signature, bands: int, rows: int) -> list[str]:
        """Return the LSH bucket key of each band of ``signature``."""
        import numpy as np  # noqa: PLC0415 - see estimate_jaccard

        return self.band_keys_many(np.asarray(signature).reshape(1, -1), bands, rows)[0]

    def band_keys_many(self, signatures: npt.NDArray[np.uint32], bands: int, rows: int) -> list[list[str]]:
        """Return the LSH bucket keys of every signature row, all computed at once.

        A key is the band's number (three digits) and a 64-bit hash of the band's ``rows`` values (16 hex digits):
        each value is folded into a per-band seed with the 64-bit finalizer, so two signatures share a band's key
        exactly when they agree on its rows (but for 64-bit collisions, which cost a verified candidate, never a
        merge).
        """
        count = len(signatures)
        digits = self.band_hashes(signatures, bands, rows).astype(">u8").tobytes().hex()
        numbers = _band_numbers(bands) * count
        starts = range(0, 16 * bands * count, 16)
        keys = [number + digits[at : at + 16] for number, at in zip(numbers, starts, strict=True)]
        return [keys[at : at + bands] for at in range(0, bands * count, bands)]

    def band_hashes(
        self, signatures: npt.NDArray[np.uint32], bands: int, rows: int
    ) -> npt.NDArray[np.uint64]:
        """Return the 64-bit hash of each band of every signature row (texts x bands): what band keys spell."""
        import numpy as np  # noqa: PLC0415 - see estimate_jaccard

        values = np.asarray(signatures)
        compiled = self._kernels
        if compiled is None or values.ndim != 2 or values.dtype != np.uint32 or not values.shape[1]:
            from streamdedup.core.numpy_kernels import band_hashes_numpy  # noqa: PLC0415 - imports NumPy

            return band_hashes_numpy(values, bands, rows)
        hashes = np.empty((len(values), bands), dtype=np.uint64)
        compiled.band_hashes(values, values.shape[1], bands, rows, hashes)
        return hashes


def _band_numbers(bands: int) -> list[str]:
    return [f"{band:03d}" for band in range(bands)]
