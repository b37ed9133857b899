"""Paragraph-anchored chunking with a maximum size (design §3).

A chunk is one block of the document (a paragraph, list, table or code block), with a heading attached to the
block that follows it. Chunks never pack several paragraphs together, so editing one paragraph changes only its
own chunk: every other chunk keeps its text and content hash. A block longer than the maximum is split at
sentence ends (lines, for code; rows, for a table) into pieces of at most that size. Pre-chunked input never comes here.

>>> [c.plain for c in chunk_document("Intro\\n\\nFirst paragraph.\\n\\nSecond one.", "text/plain", max_chars=500)]
['Intro\\nFirst paragraph.', 'Second one.']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from streamdedup.core.markup import Block, blocks

__all__ = ["Chunk", "chunk_document"]

_SENTENCE_END = re.compile(r"(?<=[.!?…。])\s+")
_HEADING_LIKE_MAX = 80


class Chunk(NamedTuple):
    """One chunk: the text as the source had it, and the plain text that is normalized and hashed."""

    original: str
    plain: str


def _heading_like(plain: str) -> bool:
    # In plain text a heading is a short single line that does not end like a sentence.
    return (
        "\n" not in plain
        and len(plain) <= _HEADING_LIKE_MAX
        and not plain.rstrip().endswith((".", "!", "?", ":", ";", ","))
    )


def _split(plain: str, kind: str, max_chars: int) -> list[str]:
    by_line = kind in ("code", "table")  # a table is cut between rows, as code is between lines
    units = plain.split("\n") if by_line else _SENTENCE_END.split(plain)
    pieces: list[str] = []
    current = ""
    joiner = "\n" if by_line else " "
    for whole in units:
        unit = whole
        while len(unit) > max_chars:  # a single sentence or line beyond the limit is cut hard
            if current:
                pieces.append(current)
                current = ""
            pieces.append(unit[:max_chars])
            unit = unit[max_chars:]
        if current and len(current) + len(joiner) + len(unit) > max_chars:
            pieces.append(current)
            current = unit
        else:
            current = f"{current}{joiner}{unit}" if current else unit
    if current:
        pieces.append(current)
    return pieces


def chunk_document(
    text: str,
    content_type: str,
    *,
    max_chars: int,
    keep_line: Callable[[str], bool] | None = None,
    parsed: Sequence[Block] | None = None,
) -> list[Chunk]:
    """Chunk a document; ``keep_line`` (given the plain text of a line) can drop boilerplate lines first.

    ``parsed`` is the document's :func:`blocks`, where the caller has them already.
    """
    units: list[tuple[str, str, str]] = []
    for block in blocks(text, content_type) if parsed is None else parsed:
        original, plain = block.original, block.plain
        if keep_line is not None:
            lines = plain.split("\n")
            kept = [line for line in lines if keep_line(line)]
            if not kept:
                continue
            if len(kept) != len(lines):
                plain = "\n".join(kept)
                original = plain  # the markup of a partly stripped block is not kept
        units.append((block.kind, original, plain))

    chunks: list[Chunk] = []
    pending: tuple[str, str] | None = None  # a heading waiting for the block it introduces
    for index, (kind, block_original, block_plain) in enumerate(units):
        is_heading = kind == "heading" or (
            content_type == "text/plain" and index + 1 < len(units) and _heading_like(block_plain)
        )
        if is_heading and index + 1 < len(units):
            if pending is not None:
                chunks.append(Chunk(*pending))
            pending = (block_original, block_plain)
            continue
        original, plain = block_original, block_plain
        if pending is not None:
            original, plain = f"{pending[0]}\n\n{original}", f"{pending[1]}\n{plain}"
            pending = None
        if len(plain) <= max_chars:
            chunks.append(Chunk(original, plain))
        else:
            chunks.extend(Chunk(piece, piece) for piece in _split(plain, kind, max_chars))
    if pending is not None:
        chunks.append(Chunk(*pending))
    return chunks
