"""MinHash signatures in datasketch's data model, computed for many chunks at once, and their LSH band keys.

A signature is what ``datasketch.MinHash(num_perm, seed, scheme="affine32")`` holds after ``update`` with the
UTF-8 bytes of every shingle: 32-bit SHA-1 shingle hashes, pre-mixed with the MurmurHash3 finalizer, permuted by
``a * h + b mod 2**32``, minimum per permutation. Here the permutation and minimum run as one NumPy operation over
all shingles of a batch. Signatures are stored as bytes in ``LeanMinHash``'s little-endian layout, so
``datasketch.LeanMinHash.deserialize(data, byteorder="<")`` reads them.

>>> scheme = SignatureScheme(num_perm=16, seed=1)
>>> sigs = scheme.signatures([["a b c d e"], ["a b c d e"], []])
>>> bool((sigs[0] == sigs[1]).all()), int(sigs[2][0]) == 2**32 - 1
(True, True)
>>> scheme.from_bytes(scheme.to_bytes(sigs[0])).tolist() == sigs[0].tolist()
True
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["SignatureScheme", "estimate_jaccard"]

_MAX = np.uint32(0xFFFFFFFF)
_SCHEME_CODE_AFFINE32 = 1
_HEADER = struct.Struct("<qiB")
# Upper bound on shingles permuted in one NumPy call, to bound the temporary (rows x num_perm) matrix.
_SHINGLES_PER_STEP = 16384

Signature = npt.NDArray[np.uint32]


def _fmix32(hv: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32]:
    hv = hv ^ (hv >> np.uint32(16))
    hv = hv * np.uint32(0x85EBCA6B)
    hv = hv ^ (hv >> np.uint32(13))
    hv = hv * np.uint32(0xC2B2AE35)
    mixed: npt.NDArray[np.uint32] = hv ^ (hv >> np.uint32(16))
    return mixed


def _sha1_32(shingle: str) -> int:
    return int.from_bytes(hashlib.sha1(shingle.encode("utf-8")).digest()[:4], "little")


def estimate_jaccard(a: Signature, b: Signature) -> float:
    """Return the MinHash estimate of the Jaccard similarity of two signatures."""
    return float(np.count_nonzero(a == b)) / len(a)


class SignatureScheme:
    """Permutations for ``num_perm`` hash functions drawn from ``seed`` exactly as datasketch draws them."""

    def __init__(self, num_perm: int, seed: int) -> None:
        self.num_perm = num_perm
        self.seed = seed
        gen = np.random.RandomState(seed)
        self._a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
        self._b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
        self.byte_size = _HEADER.size + 4 * num_perm

    def signatures(self, shingle_lists: Sequence[Sequence[str]]) -> npt.NDArray[np.uint32]:
        """Return one signature row per list of shingles (all-max for an empty list)."""
        out = np.full((len(shingle_lists), self.num_perm), _MAX, dtype=np.uint32)
        hashes: list[int] = []
        owners: list[int] = []
        for row, shingle_list in enumerate(shingle_lists):
            unique = set(shingle_list)
            hashes.extend(_sha1_32(s) for s in unique)
            owners.extend([row] * len(unique))
        if not hashes:
            return out
        hv = _fmix32(np.asarray(hashes, dtype=np.uint32))
        owner = np.asarray(owners, dtype=np.int64)
        for start in range(0, len(hv), _SHINGLES_PER_STEP):
            part = hv[start : start + _SHINGLES_PER_STEP]
            part_owner = owner[start : start + _SHINGLES_PER_STEP]
            permuted = part[:, None] * self._a[None, :] + self._b[None, :]
            # Rows of one owner are contiguous: reduce each run, then fold into the output.
            bounds = np.flatnonzero(np.diff(part_owner)) + 1
            starts = np.concatenate(([0], bounds))
            mins = np.minimum.reduceat(permuted, starts, axis=0)
            rows = part_owner[starts]
            out[rows] = np.minimum(out[rows], mins)
        return out

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
