"""PDF, Word, PowerPoint and Excel files as text the engine chunks (the ``office`` extra).

Each format is read by the well-kept library that reads it, and turned into what the markup-aware path already
normalizes and chunks:

- **PDF** (pdfminer.six): plain text, one paragraph per text box of the page layout, paragraphs apart by a blank
  line. *Page furniture* is removed: a line at the top or bottom edge of a page whose text (digits aside, so that
  "Page 3 of 40" counts as one line) comes back at an edge, at the same height, on at least half the pages is a
  running header or footer, and no part of the text. A paragraph that a page break cut in two is joined again when
  the page's last paragraph does not end a sentence and the next page does not open with a heading-like line. A
  PDF with no text layer (a scan) is refused: text recognition is not done.
- **DOCX** (mammoth): HTML, with the styles' headings as ``h1`` to ``h6``, lists, tables; images, page headers and
  footers, comments and tracked deletions are left out.
- **PPTX** (python-pptx): HTML, a section per slide: its title as a heading, each text frame as a paragraph or,
  with several paragraphs, a list; tables as tables; the speaker notes as paragraphs after the slide's shapes.
  Shapes are read top to bottom, then left to right.
- **XLSX** (openpyxl): HTML, a heading and a table per sheet, the cells' values (a formula's last computed value),
  empty rows and trailing empty columns left out.

The formats that are zip archives (DOCX, PPTX, XLSX) are refused before they are opened when their members would
unpack to more than a bound (a zip bomb): Python's zip reader never unpacks more than a member declares.
"""

from __future__ import annotations

import html
import io
import math
import re
import zipfile
from collections import Counter
from collections.abc import Iterable, Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from streamdedup.convert import ConversionError, Converted

__all__ = [
    "DOCX",
    "EXTENSIONS",
    "OFFICE_TYPES",
    "PDF",
    "PPTX",
    "XLSX",
    "convert_office",
    "missing_extra",
]

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
#: A file's extension -> the content type it is converted as.
EXTENSIONS = {".pdf": PDF, ".docx": DOCX, ".pptx": PPTX, ".xlsx": XLSX}
OFFICE_TYPES = (PDF, DOCX, PPTX, XLSX)
_FORMAT_NAMES = {PDF: "PDF", DOCX: "DOCX", PPTX: "PPTX", XLSX: "XLSX"}
#: The library each format needs (the ``office`` extra installs them all).
_LIBRARIES = {PDF: "pdfminer", DOCX: "mammoth", PPTX: "pptx", XLSX: "openpyxl"}
_DISTRIBUTIONS = {PDF: "pdfminer.six", DOCX: "mammoth", PPTX: "python-pptx", XLSX: "openpyxl"}

# How many lines at each edge of a page can be running headers or footers, and on what share of the pages a line
# must come back to be one.
_EDGE_LINES = 2
_FURNITURE_SHARE = 0.5
_SAME_HEIGHT = 3.0  # points
_DIGITS = re.compile(r"\d+")
_SPACES = re.compile(r"\s+")
_SENTENCE_END = (".", "!", "?", ":", ";", '"', "'", ")", "]", "\u201d", "\u2019", "\u2026", "\u3002")
_HEADING_LIKE_MAX = 80


def missing_extra(content_type: str) -> str | None:
    """Return why files of ``content_type`` cannot be converted here (the extra to install), or None if they can."""
    module = _LIBRARIES[content_type]
    try:
        __import__(module)
    except ImportError:
        return (
            f"{_FORMAT_NAMES[content_type]} files need the office extra: pip install 'streamdedup[office]'"
            f" (no module named {module!r})"
        )
    return None


def _library(content_type: str) -> str:
    name = _DISTRIBUTIONS[content_type]
    try:
        return f"{name} {version(name)}"
    except PackageNotFoundError:  # pragma: no cover - installed without metadata
        return name


def convert_office(data: bytes, content_type: str, *, max_unpacked: int) -> Converted:
    """Convert a PDF, DOCX, PPTX or XLSX file; raise :class:`ConversionError` with the reason if it cannot be."""
    reason = missing_extra(content_type)
    if reason is not None:
        raise ConversionError(reason)
    name = _FORMAT_NAMES[content_type]
    if content_type == PDF:
        text, content, extra = _pdf(data)
    else:
        _check_zip(data, name, max_unpacked)
        reader = {DOCX: _docx, PPTX: _pptx, XLSX: _xlsx}[content_type]
        try:
            text, content, extra = reader(data)
        except (ConversionError, MemoryError):
            raise
        except Exception as exc:
            raise ConversionError(f"not a readable {name} file ({type(exc).__name__}: {exc})") from exc
    if not text.strip():
        raise ConversionError(f"the {name} file holds no text")
    return Converted(text, content, {"converted_from": name, "converter": _library(content_type), **extra})


def _check_zip(data: bytes, name: str, max_unpacked: int) -> None:
    """Refuse an Office file that is no zip archive, or whose members would unpack past ``max_unpacked`` bytes."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ConversionError(
            f"not a {name} file: not a zip archive ({exc}); a password-protected Office file is stored encrypted"
            " and cannot be read"
        ) from exc
    if unpacked > max_unpacked:
        raise ConversionError(
            f"the {name} file unpacks to {unpacked:,} bytes, over the bound of {max_unpacked:,}"
            " (STREAMDEDUP_CONVERT_MAX_UNPACKED_BYTES): a zip bomb?"
        )


# PDF


def _pdf(data: bytes) -> tuple[str, str, dict[str, Any]]:
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LAParams, LTTextContainer, LTTextLine
    from pdfminer.pdfdocument import PDFPasswordIncorrect
    from pdfminer.psexceptions import PSException

    if b"%PDF-" not in data[:1024]:
        raise ConversionError("not a PDF: the file does not start with a PDF header (%PDF-)")
    if b"%%EOF" not in data[-2048:]:
        raise ConversionError("a truncated PDF: the file does not end with its trailer (%%EOF)")
    pages: list[list[list[tuple[float, str]]]] = []  # page -> boxes -> lines (top, text)
    try:
        for page in extract_pages(io.BytesIO(data), laparams=LAParams()):
            boxes = []
            for element in page:
                if isinstance(element, LTTextContainer):
                    lines = [
                        (line.y1, line.get_text().strip())
                        for line in element
                        if isinstance(line, LTTextLine) and line.get_text().strip()
                    ]
                    if lines:
                        boxes.append(lines)
            pages.append(boxes)
    except PDFPasswordIncorrect as exc:
        raise ConversionError("an encrypted PDF: it opens only with a password") from exc
    except (PSException, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise ConversionError(f"not a readable PDF ({type(exc).__name__}: {exc})") from exc
    furniture = _furniture(pages)
    paragraphs: list[str] = []
    for boxes in pages:
        kept = ["\n".join(text for y, text in box if not _is_furniture(furniture, y, text)) for box in boxes]
        page_paragraphs = [p for p in kept if p.strip()]
        if (
            paragraphs
            and page_paragraphs
            and _continues(paragraphs[-1])
            and not _heading_like(page_paragraphs[0])
        ):
            paragraphs[-1] = f"{paragraphs[-1]}\n{page_paragraphs.pop(0)}"
        paragraphs.extend(page_paragraphs)
    extra: dict[str, Any] = {"pages": len(pages)}
    if furniture:
        extra["page_furniture"] = sorted(furniture)
    return "\n\n".join(paragraphs), "text/plain", extra


def _key(line: str) -> str:
    """A line as running headers and footers are compared: digits (page numbers) and spacing aside."""
    return _SPACES.sub(" ", _DIGITS.sub("#", line)).strip().casefold()


def _furniture(pages: list[list[list[tuple[float, str]]]]) -> dict[str, float]:
    """Return the running headers and footers: each line key (:func:`_key`) with the height it stands at.

    A line is one when it stands among the two at a page's top or bottom edge, at the same height (within
    :data:`_SAME_HEIGHT` points), on at least half the pages (two at least), and no line of that text stands there
    away from an edge: body text that happens to open or close pages comes back in the body, or at other heights.
    """
    if len(pages) < 2:
        return {}
    at_edges: dict[str, list[tuple[int, float]]] = {}
    in_body: dict[str, list[float]] = {}
    for number, boxes in enumerate(pages):
        lines = sorted((line for box in boxes for line in box), key=lambda line: -line[0])
        cut = min(_EDGE_LINES, len(lines) // 2)
        for index, (y, text) in enumerate(lines):
            edge = index < cut or index >= len(lines) - cut
            if edge:
                at_edges.setdefault(_key(text), []).append((number, y))
            else:
                in_body.setdefault(_key(text), []).append(y)
    needed = max(2, math.ceil(len(pages) * _FURNITURE_SHARE))
    found: dict[str, float] = {}
    for key, places in sorted(at_edges.items()):
        if not key:
            continue
        height = Counter(round(y) for _, y in places).most_common(1)[0][0]
        pages_there = {number for number, y in places if abs(y - height) <= _SAME_HEIGHT}
        body_there = any(abs(y - height) <= _SAME_HEIGHT for y in in_body.get(key, ()))
        if len(pages_there) >= needed and not body_there:
            found[key] = height
    return found


def _is_furniture(furniture: dict[str, float], y: float, text: str) -> bool:
    height = furniture.get(_key(text))
    return height is not None and abs(y - height) <= _SAME_HEIGHT


def _heading_like(paragraph: str) -> bool:
    return "\n" not in paragraph and len(paragraph) <= _HEADING_LIKE_MAX


def _continues(paragraph: str) -> bool:
    """Whether a page's last paragraph runs on to the next page: it ends mid-sentence and is not a heading."""
    last = paragraph.rstrip()
    return not _heading_like(last) and not last.endswith(_SENTENCE_END)


# DOCX


def _docx(data: bytes) -> tuple[str, str, dict[str, Any]]:
    import mammoth

    def no_image(image: Any) -> dict[str, str]:
        return {"alt": image.alt_text} if image.alt_text else {}

    result = mammoth.convert_to_html(io.BytesIO(data), convert_image=mammoth.images.img_element(no_image))
    return str(result.value), "text/html", {}


# PPTX


def _pptx(data: bytes) -> tuple[str, str, dict[str, Any]]:
    from pptx import Presentation

    deck = Presentation(io.BytesIO(data))
    sections = []
    for slide in deck.slides:
        parts = list(_slide(slide))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            parts.extend(_paragraphs(p.text for p in slide.notes_slide.notes_text_frame.paragraphs))
        if parts:
            sections.append("<section>\n" + "\n".join(parts) + "\n</section>")
    return "\n".join(sections), "text/html", {"slides": len(deck.slides)}


def _shapes(shapes: Iterable[Any]) -> Iterator[Any]:
    """A slide's shapes, groups opened, top to bottom and then left to right."""
    found: list[Any] = []
    for shape in shapes:
        if shape.shape_type is not None and getattr(shape, "shapes", None) is not None:  # a group
            found.extend(_shapes(shape.shapes))
        else:
            found.append(shape)
    return iter(sorted(found, key=lambda s: (s.top or 0, s.left or 0)))


def _slide(slide: Any) -> Iterator[str]:
    title = slide.shapes.title
    if title is not None and title.has_text_frame and title.text_frame.text.strip():
        yield f"<h2>{_escape(title.text_frame.text)}</h2>"
    for shape in _shapes(slide.shapes):
        if title is not None and shape.shape_id == title.shape_id:
            continue
        if getattr(shape, "has_table", False) and shape.has_table:
            rows = ([cell.text for cell in row.cells] for row in shape.table.rows)
            yield _table(rows)
        elif shape.has_text_frame:
            texts = [p.text for p in shape.text_frame.paragraphs if p.text.strip()]
            if len(texts) > 1:
                yield "<ul>" + "".join(f"<li>{_escape(t)}</li>" for t in texts) + "</ul>"
            else:
                yield from _paragraphs(texts)


# XLSX


def _xlsx(data: bytes) -> tuple[str, str, dict[str, Any]]:
    from openpyxl import load_workbook

    book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        parts = []
        for sheet in book.worksheets:
            rows = [[_cell(v) for v in row] for row in sheet.iter_rows(values_only=True)]
            rows = [row for row in rows if any(row)]
            if not rows:
                continue
            width = max(max((i + 1 for i, v in enumerate(row) if v), default=0) for row in rows)
            parts.append(f"<h2>{_escape(sheet.title)}</h2>")
            parts.append(_table(row[:width] for row in rows))
        return "\n".join(parts), "text/html", {"sheets": len(book.worksheets)}
    finally:
        book.close()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


# HTML


def _escape(text: str) -> str:
    return html.escape(text.strip(), quote=False).replace("\n", "<br>").replace("\x0b", "<br>")


def _paragraphs(texts: Iterable[str]) -> Iterator[str]:
    return (f"<p>{_escape(t)}</p>" for t in texts if t.strip())


def _table(rows: Iterable[list[str]]) -> str:
    body = "".join("<tr>" + "".join(f"<td>{_escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{body}</table>"
