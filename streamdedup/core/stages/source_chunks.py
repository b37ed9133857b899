"""The chunks and lines of a source's document, as the ``source`` stage makes them.

A document is chunked (markup-aware, without its collection's known boilerplate lines) and its normalized lines
counted for its collection's boilerplate statistics. Each function is compiled where the kernels are; its
``*_in_python`` twin is the Python implementation, which the tests compare with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from streamdedup.core import kernels
from streamdedup.core.chunking import Chunk, chunk_document
from streamdedup.core.markup import Block, blocks, plain_text
from streamdedup.core.model import UpsertEvent
from streamdedup.core.normalize import normalize
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.collection import line_hash
from streamdedup.core.state import pack_added, pack_lines, unpack_lines

__all__ = [
    "document_chunks",
    "document_lines",
    "line_keeper",
    "line_update",
    "line_update_in_python",
    "plain_chunks",
    "plain_chunks_in_python",
]


def document_chunks(
    event: UpsertEvent,
    params: EngineParams,
    keep_line: Callable[[str], bool] | None = None,
    parsed: Sequence[Block] | None = None,
) -> list[Chunk]:
    """Return the chunks of an upsert: its ``chunks`` as given, or its ``text`` chunked (from ``parsed`` if given)."""
    if event.chunks is not None:
        return [Chunk(c, plain_text(c, event.content_type)) for c in event.chunks]
    return chunk_document(
        event.text or "",
        event.content_type,
        max_chars=params.max_chunk_chars,
        keep_line=keep_line,
        parsed=parsed,
    )


def plain_chunks(
    text: str, content_type: str, max_chars: int, known: dict[str, str] | None
) -> tuple[list[str], list[str], list[str]]:
    """Chunk a text without markup (:func:`~streamdedup.core.markup.has_markup` false), leaving out the lines whose
    key is in ``known`` (a collection's boilerplate): its paragraphs' plain text, and each chunk's original and
    plain text. Compiled where the kernels are (``plain_chunks_in_python`` is the Python implementation)."""
    compiled = kernels.native()
    if compiled is None:
        return plain_chunks_in_python(text, content_type, max_chars, known)
    return compiled.plain_chunks(text, content_type == "text/plain", max_chars, known, normalize)  # type: ignore[no-any-return]


def plain_chunks_in_python(
    text: str, content_type: str, max_chars: int, known: dict[str, str] | None
) -> tuple[list[str], list[str], list[str]]:
    """:func:`plain_chunks` in Python (the compiled kernel's twin): ``blocks`` and ``chunk_document``."""
    parsed = blocks(text, content_type)
    chunks = chunk_document(
        text, content_type, max_chars=max_chars, keep_line=line_keeper(known), parsed=parsed
    )
    return [b.plain for b in parsed], [c.original for c in chunks], [c.plain for c in chunks]


def line_keeper(known: dict[str, str] | None) -> Callable[[str], bool] | None:
    """Whether to keep a line of a document: not if it is one of a collection's ``known`` boilerplate lines."""
    if not known:
        return None
    lines = known

    def keep_line(line: str) -> bool:
        return line_hash(normalize(line)) not in lines

    return keep_line


def _line_parts(
    event: UpsertEvent, params: EngineParams, parsed: Sequence[str] | None, compiled: bool
) -> tuple[str, dict[str, str]]:
    """Return the ASCII blocks of a text upsert joined (for a ``compiled`` call) and the lines of its other blocks
    (of all its blocks, when not ``compiled``).

    ``parsed`` is the plain text of its blocks, where the caller has them already. A document counts no lines
    where its upsert gives chunks or boilerplate is off.
    """
    if event.chunks is not None or params.boilerplate_min_docs == 0:
        return "", {}
    found: dict[str, str] = {}
    longest = params.boilerplate_max_line_chars
    ascii_blocks: list[str] = []
    if parsed is None:
        parsed = [block.plain for block in blocks(event.text or "", event.content_type)]
    for plain in parsed:
        if compiled and plain.isascii():
            ascii_blocks.append(plain)
            continue
        for line in plain.split("\n"):
            normalized = normalize(line)
            if normalized and len(normalized) <= longest:
                found[line_hash(normalized)] = normalized
    return "\n".join(ascii_blocks), found


def document_lines(
    event: UpsertEvent, params: EngineParams, parsed: Sequence[str] | None = None
) -> dict[str, str]:
    """Return the normalized lines a text upsert counts in its collection's boilerplate statistics.

    ``parsed`` is the plain text of the text's :func:`blocks`, where the caller has them already.
    """
    compiled = kernels.native()
    text, found = _line_parts(event, params, parsed, compiled is not None)
    if text and compiled is not None:
        # Compiled: the same keys and lines as the loop of _line_parts, for the ASCII blocks' lines in one call.
        found.update(compiled.line_hashes(text, params.boilerplate_max_line_chars))
    return found


_LineChange = tuple[bytes, bytes, tuple[str, ...], int]


def line_update(
    event: UpsertEvent, params: EngineParams, parsed: Sequence[str] | None, old: bytes
) -> _LineChange:
    """Return how a text upsert changes the lines its source counts, against ``old`` (packed hashes).

    ``(lines, added, removed, count)``: its lines' hashes sorted and packed (``pack_lines``), the packed
    ``(hash, line)`` of those not in ``old`` (``pack_added``), the hashes in ``old`` no longer among them (sorted),
    and the number of its lines. Compiled where the kernels are; ``line_update_in_python`` is the Python
    implementation.
    """
    compiled = kernels.native()
    if compiled is None:
        return line_update_in_python(event, params, parsed, old)
    text, others = _line_parts(event, params, parsed, True)
    found = compiled.line_update(text, params.boilerplate_max_line_chars, list(others.items()), old)
    assert found is not None  # the ASCII blocks only
    lines, added, removed, count = found
    return lines, added, tuple(removed), count


def line_update_in_python(
    event: UpsertEvent, params: EngineParams, parsed: Sequence[str] | None, old: bytes
) -> _LineChange:
    """:func:`line_update` in Python (the compiled kernel's twin, which the tests compare it with)."""
    lines = document_lines(event, params, parsed)
    ordered = sorted(lines)
    known = set(unpack_lines(old))
    return (
        pack_lines(ordered),
        pack_added([(h, lines[h]) for h in ordered if h not in known]),
        tuple(sorted(known.difference(lines))),
        len(lines),
    )
