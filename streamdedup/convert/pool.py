"""Conversions bounded in time and memory, in processes of their own (Pebble's process pool).

A text file is decoded in the calling process: it takes time in proportion to its size, which the event bound
limits. A PDF or an Office file is converted in a pool process. While it converts, the process's address space is
capped (``RLIMIT_AS``) at what it holds plus ``STREAMDEDUP_CONVERT_MEMORY_MB``; a task that runs past
``STREAMDEDUP_CONVERT_TIMEOUT`` seconds is cancelled and its process replaced. The worker hands the pool one task
per process at a time, so each starts when handed over, and it waits at most the time bound plus :data:`GRACE`:
a task the pool lost (its process died before it reported the task started) is given up and the pool replaced.
Whatever goes wrong (a corrupt file, a zip bomb, a bound reached, the process killed) comes back as a
:class:`~streamdedup.convert.ConversionError` naming the reason, which the drivers dead-letter; nothing of it
stalls or brings down the caller. The pool's processes are forked from a fork server (not from the worker with
its threads) that holds the converters' libraries, started when the first such file arrives; a process is replaced
after :data:`MAX_TASKS` conversions, and at once after a conversion that ran out of memory.

A program that converts through this pool and is started as a script needs the ``if __name__ == "__main__":``
guard, as with any multiprocessing start method but fork: a new process imports the script's module.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import multiprocessing
import os
import resource
from collections.abc import Iterator
from concurrent.futures import BrokenExecutor, CancelledError, Future, TimeoutError
from contextlib import contextmanager
from os import _exit  # documented in os: end the process at once, no clean-up
from typing import Any

from streamdedup.convert import ConversionError, Converted, ConvertLimits
from streamdedup.convert.office import OFFICE_TYPES, convert_office, missing_extra
from streamdedup.convert.text import decode_text

__all__ = ["TEXT_TYPES", "Converter"]

logger = logging.getLogger(__name__)

TEXT_TYPES = ("text/plain", "text/markdown", "text/html")


#: What the fork server imports once, so that a conversion's process starts with it.
_PRELOAD = ["streamdedup.convert.office", "pdfminer.high_level", "mammoth", "pptx", "openpyxl"]
#: Conversions a pool process makes before it is replaced.
MAX_TASKS = 50
#: The exit code of a pool process whose conversion reached the memory bound.
MEMORY_EXIT = 75
#: Seconds a caller waits for a conversion beyond its time bound before it gives the task up and replaces the
#: pool's processes (a process that died before it reported the task started leaves it pending for ever).
GRACE = 30.0


def _vm_peak() -> int:
    """The most address space this process has held, in bytes (0 where /proc does not say)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - no /proc
        pass
    return 0


@contextmanager
def _memory_cap(megabytes: int) -> Iterator[int]:
    """Cap this process's address space at what it holds now plus ``megabytes`` while the block runs (Linux);
    yield the cap (0: none could be set)."""
    try:
        with open("/proc/self/statm") as statm:
            held = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = held + megabytes * 1024 * 1024
        cap = cap if hard < 0 else min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (OSError, ValueError):  # pragma: no cover - no /proc or no rlimits: the time bound only
        yield 0
        return
    try:
        yield cap
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _exhausted(error: BaseException, peak_before: int, cap: int) -> bool:
    """Whether a failed conversion ran out of memory: a MemoryError (or the SystemError a library's C code may
    raise instead) anywhere in its chain, or the process's peak risen to within 1% of the cap while it ran."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, (MemoryError, SystemError)):
            return True
        seen = seen.__cause__ or seen.__context__
    peak = _vm_peak()
    return bool(cap) and peak > peak_before and peak >= cap * 0.99


def _convert_in_child(data: bytes, content_type: str, max_unpacked: int, megabytes: int) -> Converted | str:
    """Run in a pool process: the converted document, or the reason it could not be converted.

    The memory bound holds for the conversion alone, so what the process keeps between conversions never counts
    against it. A conversion that ran out of memory ends its process (a library's C code cut short may have left
    state no later conversion should meet), with an exit code that gives the reason; the pool starts another.
    """
    peak_before = _vm_peak()
    try:
        with _memory_cap(megabytes) as cap:
            return convert_office(data, content_type, max_unpacked=max_unpacked)
    except Exception as exc:
        if _exhausted(exc, peak_before, cap):
            _exit(MEMORY_EXIT)
        if isinstance(exc, ConversionError):
            return exc.reason
        return f"the conversion failed ({type(exc).__name__}: {exc})"


class Converter:
    """Turns documents' bytes into text: :meth:`convert` (blocking), :meth:`convert_async`, :meth:`submit`."""

    def __init__(self, limits: ConvertLimits | None = None) -> None:
        self.limits = limits or ConvertLimits()
        self._pool: Any = None
        self._warned: set[str] = set()
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    def _start(self) -> Any:
        if self._pool is None:
            from pebble import ProcessPool

            context = multiprocessing.get_context("forkserver")
            # Processes forked from a server that has the converters' libraries loaded, each replaced after
            # MAX_TASKS conversions (and after one that ran out of memory).
            context.set_forkserver_preload(_PRELOAD)
            self._pool = ProcessPool(max_workers=self._workers(), max_tasks=MAX_TASKS, context=context)
            atexit.register(self.close)
        return self._pool

    def submit(self, data: bytes, content_type: str) -> Future[Any]:
        """Start converting; the future's value goes through :meth:`result`. Text is decoded right away."""
        future: Future[Any] = Future()
        if content_type in TEXT_TYPES:
            try:
                text, metadata = decode_text(data)
                future.set_result(Converted(text, content_type, metadata))
            except ConversionError as exc:
                future.set_result(exc.reason)
            return future
        if content_type not in OFFICE_TYPES:
            future.set_result(f"no converter for content type {content_type!r}")
            return future
        missing = missing_extra(content_type)
        if missing is not None:
            if content_type not in self._warned:  # once per format: each such file is a dead letter saying so
                self._warned.add(content_type)
                logger.warning("%s; until then each one is a dead letter", missing)
            future.set_exception(ConversionError(missing, transient=True))
            return future
        scheduled: Future[Any] = self._start().schedule(
            _convert_in_child,
            args=(data, content_type, self.limits.max_unpacked_bytes, self.limits.memory_mb),
            timeout=self.limits.timeout,
        )
        return scheduled

    def result(self, future: Future[Any]) -> Converted:
        """The converted document of a finished :meth:`submit`; raise :class:`ConversionError` with the reason."""
        from pebble import ProcessExpired

        try:
            value = future.result(timeout=self.limits.timeout + GRACE)
        except ConversionError:
            raise
        except TimeoutError as exc:
            if not future.done():  # never started: its process died; start afresh
                future.cancel()
                self.close()
                raise self._lost() from exc
            raise ConversionError(
                f"the conversion ran past {self.limits.timeout:g} s (STREAMDEDUP_CONVERT_TIMEOUT)",
                transient=True,
            ) from exc
        except ProcessExpired as exc:
            if exc.exitcode == MEMORY_EXIT:
                raise ConversionError(
                    f"the conversion ran past the memory bound of {self.limits.memory_mb} MB"
                    " (STREAMDEDUP_CONVERT_MEMORY_MB)",
                    transient=True,
                ) from exc
            raise ConversionError(
                f"the conversion process died (exit code {exc.exitcode})", transient=True
            ) from exc
        except Exception as exc:  # the pool's own failure (a broken or replaced pool), not the file's
            raise ConversionError(
                f"the conversion failed ({type(exc).__name__}: {exc})", transient=True
            ) from exc
        if isinstance(value, str):
            raise ConversionError(value)
        assert isinstance(value, Converted)
        return value

    def convert(self, data: bytes, content_type: str) -> Converted:
        """Convert a document's bytes, waiting for the result."""
        return self.result(self.submit(data, content_type))

    async def convert_async(self, data: bytes, content_type: str) -> Converted:
        """Convert a document's bytes without blocking the event loop. A conversion cut short because the pool was
        replaced under it (another task was lost) is made once more in the new pool, not blamed on the file."""
        try:
            return await self._convert_once(data, content_type)
        except ConversionError as exc:
            if not isinstance(exc.__cause__, (CancelledError, BrokenExecutor)):
                raise
        return await self._convert_once(data, content_type)

    async def _convert_once(self, data: bytes, content_type: str) -> Converted:
        async with self._running():
            future = self.submit(data, content_type)
            if not future.done():  # its outcome, an error too, is read below
                await asyncio.wait([asyncio.wrap_future(future)], timeout=self.limits.timeout + GRACE)
            if not future.done():  # lost by the pool: replace it, off the event loop
                future.cancel()
                await asyncio.to_thread(self.close)
                raise self._lost()
        return self.result(future)

    def _lost(self) -> ConversionError:
        return ConversionError(
            f"the conversion did not finish within {self.limits.timeout + GRACE:g} s; the conversion processes"
            " were replaced",
            transient=True,
        )

    def _running(self) -> asyncio.Semaphore:
        """At most one conversion per process is handed to the pool at a time, so that each starts when handed
        over and the wait above bounds it (one semaphore per event loop)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self._workers()))
        return self._slots[1]

    def _workers(self) -> int:
        return self.limits.workers or min(4, os.cpu_count() or 1)

    def close(self) -> None:
        """Stop the pool's processes, if any started."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            atexit.unregister(self.close)
            pool.stop()
            pool.join(timeout=10)
