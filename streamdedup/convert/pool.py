"""Conversions bounded in time and memory, in processes of their own (Pebble's process pool).

A text file is decoded in the calling process: it takes time in proportion to its size, which the event bound
limits. A PDF or an Office file is converted in a pool process whose address space is capped
(``RLIMIT_AS``, ``STREAMDEDUP_CONVERT_MEMORY_MB`` past what the process holds when it starts) and whose task is
cancelled, and the process replaced, once it runs past ``STREAMDEDUP_CONVERT_TIMEOUT`` seconds. Whatever goes
wrong (a corrupt file, a zip bomb, the bound reached, the process killed) comes back as a
:class:`~streamdedup.convert.ConversionError` naming the reason, which the drivers dead-letter; nothing of it
stalls or brings down the caller. The pool's processes are started from a fork server (not forked from the
worker with its threads), when the first such file arrives.
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing
import os
import sys
from concurrent.futures import Future, TimeoutError
from typing import Any

from streamdedup.convert import ConversionError, Converted, ConvertLimits
from streamdedup.convert.office import OFFICE_TYPES, convert_office, missing_extra
from streamdedup.convert.text import decode_text

__all__ = ["TEXT_TYPES", "Converter", "convertible"]

TEXT_TYPES = ("text/plain", "text/markdown", "text/html")


def convertible(content_type: str) -> bool:
    """Whether a document's bytes of this content type can be turned into text (with the office extra)."""
    return content_type in TEXT_TYPES or content_type in OFFICE_TYPES


def _limit_memory(megabytes: int) -> None:
    """Cap this process's address space at what it holds now plus ``megabytes`` (Linux and other POSIX)."""
    try:
        import resource

        with open("/proc/self/statm") as statm:
            held = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = held + megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap if hard < 0 else min(cap, hard), hard))
    except (ImportError, OSError, ValueError):  # pragma: no cover - no /proc or no rlimits: time bound only
        pass


def _convert_in_child(data: bytes, content_type: str, max_unpacked: int) -> Converted | str:
    """Run in a pool process: the converted document, or the reason it could not be converted."""
    try:
        return convert_office(data, content_type, max_unpacked=max_unpacked)
    except ConversionError as exc:
        return str(exc).removeprefix("data: ")
    except MemoryError:
        return "memory"


class Converter:
    """Turns documents' bytes into text: :meth:`convert` (blocking), :meth:`convert_async`, :meth:`submit`."""

    def __init__(self, limits: ConvertLimits | None = None) -> None:
        self.limits = limits or ConvertLimits()
        self._pool: Any = None

    def _start(self) -> Any:
        if self._pool is None:
            from pebble import ProcessPool

            workers = self.limits.workers or min(4, os.cpu_count() or 1)
            context = multiprocessing.get_context("forkserver" if sys.platform != "win32" else "spawn")
            self._pool = ProcessPool(
                max_workers=workers,
                max_tasks=100,
                initializer=_limit_memory,
                initargs=(self.limits.memory_mb,),
                context=context,
            )
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
                future.set_result(str(exc).removeprefix("data: "))
            return future
        if content_type not in OFFICE_TYPES:
            future.set_result(f"no converter for content type {content_type!r}")
            return future
        missing = missing_extra(content_type)
        if missing is not None:
            future.set_result(missing)
            return future
        scheduled: Future[Any] = self._start().schedule(
            _convert_in_child,
            args=(data, content_type, self.limits.max_unpacked_bytes),
            timeout=self.limits.timeout,
        )
        return scheduled

    def result(self, future: Future[Any]) -> Converted:
        """The converted document of a finished :meth:`submit`; raise :class:`ConversionError` with the reason."""
        from pebble import ProcessExpired

        try:
            value = future.result()
        except TimeoutError as exc:
            raise ConversionError(
                f"the conversion ran past {self.limits.timeout:g} s (STREAMDEDUP_CONVERT_TIMEOUT)"
            ) from exc
        except ProcessExpired as exc:
            raise ConversionError(
                f"the conversion process died (exit code {exc.exitcode}), past the memory bound of"
                f" {self.limits.memory_mb} MB (STREAMDEDUP_CONVERT_MEMORY_MB) or killed"
            ) from exc
        except Exception as exc:
            raise ConversionError(f"the conversion failed ({type(exc).__name__}: {exc})") from exc
        if value == "memory":
            raise ConversionError(
                f"the conversion ran past the memory bound of {self.limits.memory_mb} MB"
                " (STREAMDEDUP_CONVERT_MEMORY_MB)"
            )
        if isinstance(value, str):
            raise ConversionError(value)
        assert isinstance(value, Converted)
        return value

    def convert(self, data: bytes, content_type: str) -> Converted:
        """Convert a document's bytes, waiting for the result."""
        return self.result(self.submit(data, content_type))

    async def convert_async(self, data: bytes, content_type: str) -> Converted:
        """Convert a document's bytes without blocking the event loop."""
        future = self.submit(data, content_type)
        if not future.done():
            await asyncio.wait([asyncio.wrap_future(future)])  # its outcome, an error too, is read below
        return self.result(future)

    def close(self) -> None:
        """Stop the pool's processes, if any started."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            atexit.unregister(self.close)
            pool.stop()
            pool.join(timeout=10)
