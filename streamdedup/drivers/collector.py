"""The cyclic garbage collector, paused while a batch runs.

A batch allocates hundreds of thousands of small objects (messages, decoded records, output values), nearly all
freed by reference counting when the batch ends. Left on, the collector runs thousands of times per batch and
walks every live object in its older generations each time: on the Django benchmark that was a quarter of the
engine's time. Pausing it for the batch and letting it run between batches keeps the memory it guards bounded by
one batch.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused(*, freeze: bool = False) -> Iterator[None]:
    """Pause automatic garbage collection inside the block (it resumes after, if it was on before).

    With ``freeze``, every object alive after the block is moved out of the collector's reach for good, for a block
    that makes what lives as long as the process (a worker loading its modules), which later passes need not walk.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if was_enabled:
            gc.enable()
