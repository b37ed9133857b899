"""The engine's compiled kernels (numba), loaded when the work is large enough to pay for loading them.

Importing numba and loading compiled code from its cache takes the better part of a second, longer than a
restarted worker needs for its first events. Until a signature batch of :data:`LOAD_AT` texts arrives, or the
batches so far add up to :data:`LOAD_AFTER` texts, the engine computes with the NumPy kernel and the pure-Python
partitioner, which give the same results; from then on, with these (a long run loads them with its first batch,
a worker that sees a trickle of events after a while). ``load()`` loads them at once.

>>> from streamdedup.core.partitioning import murmur2
>>> int(load().positive_murmur2(b"21")) == murmur2(b"21") & 0x7FFFFFFF
True
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["LOAD_AFTER", "LOAD_AT", "Kernels", "for_batch", "load", "loaded"]

#: Texts in one signature batch from which the compiled kernels are loaded (below it, NumPy computes them).
LOAD_AT = 64
#: Texts computed by the NumPy kernel after which the compiled kernels are loaded whatever the batch (NumPy takes
#: about 0.2 ms per text, fifteen times the compiled kernel: by then it has spent about what loading costs).
LOAD_AFTER = 2_000


@dataclass(frozen=True)
class Kernels:
    """The compiled functions: the batch signature kernel and Kafka's partitioner hash."""

    signatures: Callable[..., None]
    positive_murmur2: Callable[[bytes], Any]


_loaded: list[Kernels] = []


def loaded() -> Kernels | None:
    """Return the compiled kernels if they are loaded, else None (nothing is loaded by asking)."""
    return _loaded[0] if _loaded else None


_uncompiled = [0]  # texts computed without the compiled kernels so far


def for_batch(texts: int) -> Kernels | None:
    """Return the compiled kernels for a batch of ``texts`` texts, loading them when it pays; None while the
    NumPy kernel should compute it."""
    if _loaded:
        return _loaded[0]
    _uncompiled[0] += texts
    if texts >= LOAD_AT or _uncompiled[0] >= LOAD_AFTER:
        return load()
    return None


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
