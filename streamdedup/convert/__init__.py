"""Documents as files are kept, turned into text the engine chunks: legacy encodings, PDF and Office formats.

A text file's bytes are decoded by detection (:mod:`streamdedup.convert.text`); PDF, DOCX, PPTX and XLSX are
converted to HTML or plain text by :mod:`streamdedup.convert.office` (the ``office`` extra), which runs each
conversion in a process of its own, bounded in time and memory (:mod:`streamdedup.convert.pool`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamdedup.errors import InvalidEventError

__all__ = ["ConversionError", "Converted"]


class ConversionError(InvalidEventError):
    """A document's bytes could not be turned into text (the reason says why); the document is dead-lettered."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="data")


@dataclass(frozen=True)
class Converted:
    """A document's text, the content type the engine reads it as, and what to record in its metadata."""

    text: str
    content_type: str
    metadata: dict[str, Any] = field(default_factory=dict)
