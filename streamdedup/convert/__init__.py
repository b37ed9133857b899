"""Documents as files are kept, turned into text the engine chunks: legacy encodings, PDF and Office formats.

A text file's bytes are decoded by detection (:mod:`streamdedup.convert.text`); PDF, DOCX, PPTX and XLSX are
converted to HTML or plain text by :mod:`streamdedup.convert.office` (the ``office`` extra), which runs each
conversion in a process of its own, bounded in time and memory (:mod:`streamdedup.convert.pool`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamdedup.errors import InvalidEventError

__all__ = ["ConversionError", "ConvertLimits", "Converted"]


class ConversionError(InvalidEventError):
    """A document's bytes could not be turned into text (the reason says why); the document is dead-lettered.

    ``transient`` says the reason lies in this machine, not in the file (the office extra missing, a time or memory
    bound reached, a conversion process lost): the folder feed tries such a file again on its next sync.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message, field="data")
        self.reason = message
        self.transient = transient


@dataclass(frozen=True)
class Converted:
    """A document's text, the content type the engine reads it as, and what to record in its metadata."""

    text: str
    content_type: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConvertLimits:
    """Bounds on one conversion; ``Settings`` exposes each as ``STREAMDEDUP_CONVERT_<NAME>``."""

    #: Seconds one PDF or Office conversion may take.
    timeout: float = 60.0
    #: Megabytes of memory a conversion process may allocate.
    memory_mb: int = 1024
    #: Bytes a zipped Office file may unpack to.
    max_unpacked_bytes: int = 256 * 1024 * 1024
    #: Conversion processes (0: one per core, at most 4).
    workers: int = 0
