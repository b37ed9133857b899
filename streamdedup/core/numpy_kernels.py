"""The signature kernels in Python: what the compiled ones (``streamdedup.core._native``) compute, with NumPy.

They compute what the Rust code computes, with NumPy array operations and no Python work per word or shingle. The
engine runs them where the package has no compiled kernels (:mod:`streamdedup.core.kernels`), and the tests
compare the two on random and hostile texts, so that a change to either shows up as a difference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.core.shingles import _COMBINE, _FNV_OFFSET, _FNV_PRIME, _fnv1a

__all__ = ["band_hashes_numpy", "numpy_kernel", "permutations_numpy"]


def permutations_numpy(seed: int, num_perm: int) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    """Return datasketch's ``(a, b)`` for ``seed``, drawn as ``datasketch.MinHash`` draws them."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


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


def _word_spans(
    raw: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], total: int
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Return where the words of the texts in ``raw`` start and end (runs of bytes other than a space)."""
    word = raw != 32
    before = np.zeros(total, dtype=bool)
    before[1:] = word[:-1]
    after = np.zeros(total, dtype=bool)
    after[:-1] = word[1:]
    bounds = offsets[(offsets > 0) & (offsets < total)]
    before[bounds] = False  # a text's first byte starts a word, its last ends one
    after[bounds - 1] = False
    return np.flatnonzero(word & ~before), np.flatnonzero(word & ~after) + 1


def _shingle_keys(
    hashes: npt.NDArray[np.uint64], text_of: npt.NDArray[np.intp], texts: int, size: int
) -> npt.NDArray[np.uint64]:
    """Return the distinct (text, 32-bit shingle hash) keys of the texts, sorted: the text in the high 32 bits.

    Shingles of ``size`` words that stay inside one text, then one shingle of every text with fewer words.
    """
    counts = np.bincount(text_of, minlength=texts)
    first_word = np.zeros(texts, dtype=np.int64)
    np.cumsum(counts[:-1], out=first_word[1:])
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
    return keys


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
    starts, ends = _word_spans(raw, offsets, total)
    if not len(starts):
        return
    hashes = _word_hashes(raw, starts, ends)
    text_of = np.searchsorted(offsets, starts, side="right") - 1
    keys = _shingle_keys(hashes, text_of, texts, size)
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
