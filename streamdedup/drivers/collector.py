"""The cyclic garbage collector, paused while a batch runs.

A batch allocates hundreds of thousands of small objects (messages, decoded records, output values), nearly all
freed by reference counting when the batch ends. Left on, the collector runs thousands of times per batch and
walks every live object in its older generations each time: on the Django benchmark that was a quarter of the
engine's time. Pausing it for the batch and letting it run between batches keeps the memory it guards bounded by
one batch.

A driver that runs batch after batch in one process (the embedded runner) also freezes, after each batch, what
the batch left alive (:class:`BatchCollector`): there, a reference cycle waits for the next thaw, at most 64
batches, to be collected.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BatchCollector", "collector_paused"]


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


class BatchCollector:
    """The collector's part in a driver that runs batches one after another in one process.

    Each batch runs with the collector paused, and what is alive after it (the outputs it returns, everything
    older) is then frozen: moved out of the generations the collector walks. Left there, the first collection
    after each batch walked all it made that still lived, and later ones all the rest again, for nothing: batches
    make no reference cycles (none in a whole Django run), and every other object is freed, frozen or not, when its
    last reference goes. So that a cycle a batch does leave (an exception's traceback, say) is still collected, every
    ``thaw_every`` batches the frozen objects go back to the oldest generation, which the collector walks as usual.
    """

    def __init__(self, thaw_every: int = 64) -> None:
        self._thaw_every = thaw_every
        self._batches = 0

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Run one batch with the collector paused; freeze what is alive after it (or thaw, every few batches)."""
        with collector_paused():
            try:
                yield
            finally:
                self._batches += 1
                if self._batches % self._thaw_every == 0:
                    gc.unfreeze()
                else:
                    gc.freeze()
