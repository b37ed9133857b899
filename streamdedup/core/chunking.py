"""Split a document's text into chunks.

The chunker is paragraph-anchored: a chunk is a paragraph (text between blank lines), so editing one paragraph
changes only that chunk. Pre-chunked input never comes here; it is used as given.

>>> paragraphs("First line\\nstill first.\\n\\n\\n  Second.  \\n")
['First line\\nstill first.', 'Second.']
"""

from __future__ import annotations

import re

__all__ = ["paragraphs"]

_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


def paragraphs(text: str) -> list[str]:
    """Return the non-empty paragraphs of ``text``, stripped of surrounding whitespace."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [part.strip() for part in _BLANK_LINE.split(text) if part.strip()]
