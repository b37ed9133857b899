"""The engine's compiled kernels (numba), loaded when the work is large enough to pay for loading them.

Importing numba and loading compiled code from its cache takes about a second, longer than a restarted worker
needs for its first events and than a short run spends on signatures. Until then the engine computes with the
NumPy kernel and the pure-Python partitioner, which give the same results, and it loads the compiled kernels once
the NumPy kernel has taken :data:`LOAD_BUDGET_SECONDS` in all, or a batch is large enough to take that alone: no
run spends much more than the loading itself on waiting for it, and a run too short to recover it never loads it.
A worker also loads them while it is idle. ``load()`` loads them at once.

>>> from streamdedup.core.partitioning import murmur2
>>> int(load().positive_murmur2(b"21")) == murmur2(b"21") & 0x7FFFFFFF
True
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["LOAD_BUDGET_SECONDS", "Kernels", "computed_without", "for_batch", "load", "loaded"]

#: Seconds of NumPy kernel time after which the compiled kernels are loaded (about what loading them costs).
LOAD_BUDGET_SECONDS = 0.75
#: Seconds the NumPy kernel takes per text at the least (about 30 microseconds for texts of up to a few hundred
#: bytes, more for longer ones): a batch whose texts would take the budget alone loads the compiled kernels first.
_NUMPY_SECONDS_PER_TEXT = 20e-6


@dataclass(frozen=True)
class Kernels:
    """The compiled functions: the batch signature kernel and Kafka's partitioner hash."""

    signatures: Callable[..., None]
    positive_murmur2: Callable[[bytes], Any]


_loaded: list[Kernels] = []


def loaded() -> Kernels | None:
    """Return the compiled kernels if they are loaded, else None (nothing is loaded by asking)."""
    return _loaded[0] if _loaded else None


_spent = [0.0]  # seconds the NumPy kernel has taken so far


def for_batch(texts: int) -> Kernels | None:
    """Return the compiled kernels for a batch of ``texts`` texts, loading them when it pays; None while the
    NumPy kernel should compute it (report its time with :func:`computed_without`)."""
    if _loaded:
        return _loaded[0]
    if _spent[0] + texts * _NUMPY_SECONDS_PER_TEXT >= LOAD_BUDGET_SECONDS:
        return load()
    return None


def computed_without(seconds: float) -> None:
    """Count ``seconds`` the NumPy kernel took for a batch :func:`for_batch` left to it."""
    _spent[0] += seconds


_loading = threading.Lock()


def load() -> Kernels:
    """Import numba and the kernels and run each once, so that their compiled code is loaded too (from numba's
    on-disk cache after the first time); only then are they used, so that a thread loading them holds up nobody
    else (numba compiles under a lock of its own). A worker calls it in a thread when it is idle, so that its
    first large batch does not wait for it."""
    with _loading:
        if not _loaded:
            import numpy as np  # noqa: PLC0415 - the kernels need it anyway

            from streamdedup.core import kernels  # noqa: PLC0415 - importing numba takes a while; see the module

            a = b = np.ones(1, dtype=np.uint32)  # the argument types of SignatureScheme.signatures's calls
            data, offsets = np.frombuffer(b"a b", dtype=np.uint8), np.array([0, 3], dtype=np.int64)
            kernels.signatures(data, offsets, 5, a, b, np.empty((1, 1), np.uint32), np.empty(1, np.int64))
            kernels.positive_murmur2(b"")
            _loaded.append(Kernels(signatures=kernels.signatures, positive_murmur2=kernels.positive_murmur2))
    return _loaded[0]
