"""MinHash signatures in datasketch's data model, computed for many chunks at once, and their LSH band keys.

A signature is what ``datasketch.MinHash(num_perm, seed, scheme="affine32", hashfunc=shingle_hash32)`` holds
after ``update`` with every word shingle of a normalized text: 32-bit shingle hashes, pre-mixed with the
MurmurHash3 finalizer, permuted by ``a * h + b mod 2**32`` with datasketch's ``a`` and ``b`` for the seed, the
minimum per permutation. Signatures are stored in ``LeanMinHash``'s little-endian layout, so
``datasketch.LeanMinHash.deserialize(data, byteorder="<")`` reads them.

The shingle hash is built from word hashes (FNV-1a 64 over the word's UTF-8 bytes, then a 64-bit finalizer),
combined polynomially over the shingle's words and folded to 32 bits. That lets one compiled pass read the
UTF-8 bytes of a whole batch of texts and produce every signature, with no Python work per word or shingle: the
package's Rust extension, ``streamdedup.core._native`` (``native/`` in the repository). :func:`numpy_kernel` and
:func:`band_hashes_numpy` compute the same with NumPy array operations; they are the reference the tests compare
the compiled kernels with.

>>> scheme = SignatureScheme(num_perm=16, seed=1, shingle_size=5)
>>> sigs, distinct = scheme.signatures(["a b c d e", "a b c d e", ""])
>>> bool((sigs[0] == sigs[1]).all()), int(sigs[2][0]) == 2**32 - 1, distinct.tolist()
(True, True, [1, 1, 0])
>>> scheme.from_bytes(scheme.to_bytes(sigs[0])).tolist() == sigs[0].tolist()
True
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.core import _native

__all__ = ["SignatureScheme", "band_hashes_numpy", "estimate_jaccard", "numpy_kernel", "shingle_hash32"]

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


_U64 = np.uint64
_LONG_WORD = 64  # words up to this many bytes are hashed together, byte position by byte position
_BLOCK = 4096  # distinct shingles permuted at once (a block of num_perm values each)


def _mix64_array(h: Any) -> Any:
    h = (h ^ (h >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> _U64(27))) * _U64(0x94D049BB133111EB)
    return h ^ (h >> _U64(31))


def _word_hashes(
    data: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> Any:
    """FNV-1a 64 of each word ``data[start:end]``, then the 64-bit finalizer; short words all at once."""
    lengths = ends - starts
    order = np.argsort(-lengths, kind="stable")  # longest first: the words still going at byte k are a prefix
    by_length, first = lengths[order], starts[order]
    hashes = np.full(len(order), _FNV_OFFSET, dtype=np.uint64)
    long_words = int(np.count_nonzero(by_length > _LONG_WORD))
    for i in range(long_words):  # rare (a URL, a hash): byte by byte in Python
        start = int(first[i])
        hashes[i] = _fnv1a(data[start : start + int(by_length[i])].tobytes())
    going = -by_length[long_words:]
    for k in range(int(by_length[long_words]) if len(going) else 0):
        n = long_words + int(np.searchsorted(going, -k, side="left"))
        hashes[long_words:n] = (
            hashes[long_words:n] ^ data[first[long_words:n] + k].astype(np.uint64)
        ) * _U64(_FNV_PRIME)
    out = np.empty_like(hashes)
    out[order] = _mix64_array(hashes)
    return out


def numpy_kernel(
    data: npt.NDArray[np.uint8],
    offsets: npt.NDArray[np.int64],
    size: int,
    a: npt.NDArray[np.uint32],
    b: npt.NDArray[np.uint32],
    out: npt.NDArray[np.uint32],
    distinct: npt.NDArray[np.int64],
) -> None:
    """Fill ``out`` and ``distinct`` as the compiled kernel does, with NumPy array operations.

    Words are runs of bytes other than a space inside each text ``data[offsets[i]:offsets[i + 1]]``.
    """
    texts = len(offsets) - 1
    out[:] = 0xFFFFFFFF
    distinct[:] = 0
    total = int(offsets[-1])
    if total == 0 or texts == 0:
        return
    raw = data[:total]
    word = raw != 32
    before = np.zeros(total, dtype=bool)
    before[1:] = word[:-1]
    after = np.zeros(total, dtype=bool)
    after[:-1] = word[1:]
    bounds = offsets[(offsets > 0) & (offsets < total)]
    before[bounds] = False  # a text's first byte starts a word, its last ends one
    after[bounds - 1] = False
    starts = np.flatnonzero(word & ~before)
    if not len(starts):
        return
    ends = np.flatnonzero(word & ~after) + 1
    hashes = _word_hashes(raw, starts, ends)
    text_of = np.searchsorted(offsets, starts, side="right") - 1
    counts = np.bincount(text_of, minlength=texts)
    first_word = np.zeros(texts, dtype=np.int64)
    np.cumsum(counts[:-1], out=first_word[1:])

    # Shingles of ``size`` words that stay inside one text, then one shingle of every text with fewer words.
    shingle_text = []
    shingle_acc = []
    words = len(hashes)
    if words >= size:
        span = words - size + 1
        acc = np.zeros(span, dtype=np.uint64)
        for j in range(size):
            acc = acc * _U64(_COMBINE) + hashes[j : j + span]
        inside = text_of[:span] == text_of[size - 1 :]
        shingle_text.append(text_of[:span][inside])
        shingle_acc.append(acc[inside])
    short = np.flatnonzero((counts > 0) & (counts < size))
    if len(short):
        acc = np.zeros(len(short), dtype=np.uint64)
        for j in range(size - 1):
            going = counts[short] > j
            position = np.minimum(first_word[short] + j, words - 1)
            acc = np.where(going, acc * _U64(_COMBINE) + hashes[position], acc)
        shingle_text.append(short)
        shingle_acc.append(acc)
    acc = _mix64_array(np.concatenate(shingle_acc))
    folded = (acc ^ (acc >> _U64(32))) & _U64(0xFFFFFFFF)
    keys = np.unique((np.concatenate(shingle_text).astype(np.uint64) << _U64(32)) | folded)
    owner = (keys >> _U64(32)).astype(np.int64)
    distinct[:] = np.bincount(owner, minlength=texts)

    hv = keys & _U64(0xFFFFFFFF)  # MurmurHash3 fmix32, then the affine permutations mod 2**32
    hv ^= hv >> _U64(16)
    hv = (hv * _U64(0x85EBCA6B)) & _U64(0xFFFFFFFF)
    hv ^= hv >> _U64(13)
    hv = (hv * _U64(0xC2B2AE35)) & _U64(0xFFFFFFFF)
    hv ^= hv >> _U64(16)
    a64, b64 = a.astype(np.uint64)[None, :], b.astype(np.uint64)[None, :]
    for block in range(0, len(hv), _BLOCK):
        values = (a64 * hv[block : block + _BLOCK, None] + b64) & _U64(0xFFFFFFFF)
        owners = owner[block : block + _BLOCK]
        starts_of = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]])
        mins = np.minimum.reduceat(values, starts_of, axis=0).astype(np.uint32)
        rows = owners[starts_of]
        out[rows] = np.minimum(out[rows], mins)


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
        # Read-only either way (frombuffer), so that the compiled kernel has one variant to load.
        data = np.frombuffer(b"".join(encoded) if offsets[-1] else b"\0", dtype=np.uint8)
        out = np.empty((len(encoded), self.num_perm), dtype=np.uint32)
        distinct = np.zeros(len(encoded), dtype=np.int64)
        _native.signatures(data, offsets, self.shingle_size, self._a, self._b, out, distinct)
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
        values = np.ascontiguousarray(signatures, dtype=np.uint32)
        hashes = np.empty((len(values), bands), dtype=np.uint64)
        _native.band_hashes(values, values.shape[1], bands, rows, hashes)
        return hashes


def band_hashes_numpy(signatures: npt.NDArray[np.uint32], bands: int, rows: int) -> npt.NDArray[np.uint64]:
    """Return what :meth:`SignatureScheme.band_hashes` returns, with NumPy array operations."""
    count = len(signatures)
    values = np.asarray(signatures, dtype=np.uint64)[:, : bands * rows].reshape(count, bands, rows)
    hashes: npt.NDArray[np.uint64] = np.broadcast_to(_band_seeds(bands), (count, bands))
    for row in range(rows):
        hashes = _mix64_array(hashes ^ values[:, :, row])
    return hashes


def _band_seeds(bands: int) -> npt.NDArray[np.uint64]:
    seeds: npt.NDArray[np.uint64] = _mix64_array(
        (np.arange(bands, dtype=np.uint64) + _U64(1)) * _U64(_COMBINE)
    )
    return seeds


def _band_numbers(bands: int) -> list[str]:
    return [f"{band:03d}" for band in range(bands)]
