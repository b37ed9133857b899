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
def collector_paused() -> Iterator[None]:
    """Pause automatic garbage collection inside the block (it resumes after, if it was on before)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
