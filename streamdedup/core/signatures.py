"""MinHash signatures in datasketch's data model, computed for many chunks at once, and their LSH band keys.

A signature is what ``datasketch.MinHash(num_perm, seed, scheme="affine32", hashfunc=shingle_hash32)`` holds
after ``update`` with every word shingle of a normalized text: 32-bit shingle hashes, pre-mixed with the
MurmurHash3 finalizer, permuted by ``a * h + b mod 2**32`` with datasketch's ``a`` and ``b`` for the seed, the
minimum per permutation. Signatures are stored in ``LeanMinHash``'s little-endian layout, so
``datasketch.LeanMinHash.deserialize(data, byteorder="<")`` reads them.

The shingle hash is built from word hashes (FNV-1a 64 over the word's UTF-8 bytes, then a 64-bit finalizer),
combined polynomially over the shingle's words and folded to 32 bits. That lets one compiled pass (numba) read
the UTF-8 bytes of a whole batch of texts and produce every signature, with no Python work per word or shingle.

>>> scheme = SignatureScheme(num_perm=16, seed=1, shingle_size=5)
>>> sigs, distinct = scheme.signatures(["a b c d e", "a b c d e", ""])
>>> bool((sigs[0] == sigs[1]).all()), int(sigs[2][0]) == 2**32 - 1, distinct.tolist()
(True, True, [1, 1, 0])
>>> scheme.from_bytes(scheme.to_bytes(sigs[0])).tolist() == sigs[0].tolist()
True
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["SignatureScheme", "estimate_jaccard", "shingle_hash32"]

_SCHEME_CODE_AFFINE32 = 1
_HEADER = struct.Struct("<qiB")
_MASK64 = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_COMBINE = 0x9E3779B97F4A7C15

Signature = npt.NDArray[np.uint32]


def _mix64(h: int) -> int:
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
    return h ^ (h >> 31)


def _word_hash(word: bytes) -> int:
    h = _FNV_OFFSET
    for byte in word:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    return _mix64(h)


def shingle_hash32(shingle: bytes) -> int:
    """Return the 32-bit hash of one shingle (its words joined by single spaces), as the kernel computes it."""
    acc = 0
    for word in shingle.split(b" "):
        acc = (acc * _COMBINE + _word_hash(word)) & _MASK64
    acc = _mix64(acc)
    return (acc ^ (acc >> 32)) & 0xFFFFFFFF


@numba.njit(cache=True, nogil=True)
def _mix64_nb(h: Any) -> Any:
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@numba.njit(cache=True, nogil=True)
def _kernel(
    data: npt.NDArray[np.uint8],
    offsets: npt.NDArray[np.int64],
    size: int,
    a: npt.NDArray[np.uint32],
    b: npt.NDArray[np.uint32],
    out: npt.NDArray[np.uint32],
    distinct: npt.NDArray[np.int64],
) -> None:  # pragma: no cover - compiled; its results are checked against datasketch in the tests
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
                    words[count] = _mix64_nb(h)
                    count += 1
                    inside = False
            else:
                if not inside:
                    h = np.uint64(0xCBF29CE484222325)
                    inside = True
                h = (h ^ np.uint64(byte)) * np.uint64(0x100000001B3)
        if inside:
            words[count] = _mix64_nb(h)
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
            acc = _mix64_nb(acc)
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


def estimate_jaccard(a: Signature, b: Signature) -> float:
    """Return the MinHash estimate of the Jaccard similarity of two signatures."""
    return float(np.count_nonzero(a == b)) / len(a)


class SignatureScheme:
    """Permutations for ``num_perm`` hash functions drawn from ``seed`` exactly as datasketch draws them."""

    def __init__(self, num_perm: int, seed: int, shingle_size: int = 5) -> None:
        self.num_perm = num_perm
        self.seed = seed
        self.shingle_size = shingle_size
        gen = np.random.RandomState(seed)
        self._a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
        self._b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
        self.byte_size = _HEADER.size + 4 * num_perm

    @property
    def permutations(self) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
        """The ``(a, b)`` of the affine permutations, as datasketch's ``MinHash.permutations`` holds them."""
        return self._a, self._b

    def signatures(self, normalized: Sequence[str]) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]:
        """Return one signature row per normalized text, and the number of distinct shingles of each."""
        encoded = [text.encode("utf-8") for text in normalized]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        data = (
            np.frombuffer(b"".join(encoded), dtype=np.uint8) if offsets[-1] else np.zeros(1, dtype=np.uint8)
        )
        out = np.empty((len(encoded), self.num_perm), dtype=np.uint32)
        distinct = np.zeros(len(encoded), dtype=np.int64)
        _kernel(data, offsets, self.shingle_size, self._a, self._b, out, distinct)
        return out, distinct

    def to_bytes(self, signature: Signature) -> bytes:
        """Serialize a signature in datasketch's ``LeanMinHash`` affine32 layout, little-endian."""
        head = _HEADER.pack(self.seed, -self.num_perm, _SCHEME_CODE_AFFINE32)
        return head + np.asarray(signature, dtype="<u4").tobytes()

    def from_bytes(self, data: bytes) -> Signature:
        """Read a signature written by :meth:`to_bytes`, checking it belongs to this scheme."""
        seed, neg_perm, code = _HEADER.unpack_from(data, 0)
        if seed != self.seed or -neg_perm != self.num_perm or code != _SCHEME_CODE_AFFINE32:
            raise ValueError("signature bytes do not match this scheme's seed and permutation count")
        return np.frombuffer(data, dtype="<u4", offset=_HEADER.size, count=self.num_perm).astype(np.uint32)

    def band_keys(self, signature: Signature, bands: int, rows: int) -> list[str]:
        """Return the LSH bucket key of each band of ``signature``."""
        raw = np.asarray(signature, dtype="<u4").tobytes()
        width = 4 * rows
        return [
            f"{i:03d}{hashlib.blake2b(raw[i * width : (i + 1) * width], digest_size=8).hexdigest()}"
            for i in range(bands)
        ]
