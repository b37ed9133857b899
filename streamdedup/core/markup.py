"""Markup-aware text extraction: Markdown and HTML reduced to blocks of plain text (design §3).

Hashing and shingling see the plain text, so a passage written as Markdown, HTML or plain text has one content
hash; outputs keep the original text. Markdown is parsed with markdown-it-py (CommonMark and tables), HTML with
selectolax's lexbor engine (an HTML5 parser). Code blocks and tables keep their content; emphasis, links and
tags do not count as text.

Nesting depth is not limited by Python's recursion limit: the HTML walks keep their own stacks. An HTML5 parser's
time grows with the square of the nesting depth, so HTML nested deeper than :data:`MAX_HTML_DEPTH` elements is
reduced to text without a parser (tags removed, entities decoded), which keeps its text at a linear cost.
markdown-it parses blocks 20 levels deep (the CommonMark preset's maxNesting) and drops the rest of the document
past that; from the block that nests too deep on, the document is kept as plain paragraphs instead.

>>> [b.plain for b in blocks("# Reset\\n\\nOpen **Settings** and [reset](/r) it.", "text/markdown")]
['Reset', 'Open Settings and reset it.']
>>> paragraphs("First line\\nstill first.\\n\\n\\n  Second.  \\n")
['First line\\nstill first.', 'Second.']
>>> [b.plain for b in blocks("<h1>Reset</h1><p>Open <b>Settings</b> and <a href=/r>reset</a> it.</p>", "text/html")]
['Reset', 'Open Settings and reset it.']
"""

from __future__ import annotations

import functools
import html as html_lib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from streamdedup.core.nesting import too_deep

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from selectolax.lexbor import LexborHTMLParser, LexborNode

__all__ = ["MAX_HTML_DEPTH", "Block", "blocks", "paragraphs", "plain_text"]

_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


@functools.cache
def _markdown() -> MarkdownIt:
    """Return the Markdown parser, made on first use (a worker or a run may never see Markdown)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table")


def _html_parser(html: str) -> LexborHTMLParser:
    """Parse ``html`` with lexbor, loaded on first use (a run of plain text or Markdown never loads it)."""
    from selectolax.lexbor import LexborHTMLParser

    return LexborHTMLParser(html)


_SPACES = re.compile(r"[ \t]{2,}")
#: HTML whose elements nest deeper than this is reduced to text without a parser (see :mod:`.nesting`).
MAX_HTML_DEPTH = 1_000
_STRIP = re.compile(
    r"<!--(?:-?>|.*?(?:--!?>|\Z))|<(script|style)\b.*?(?:</\1\s*>|\Z)|</?[A-Za-z][^>]*>?",
    re.DOTALL | re.IGNORECASE,
)

_HTML_SKIP = frozenset(
    {"script", "style", "template", "noscript", "head", "title", "meta", "link", "iframe", "svg"}
)
_HTML_BLOCKS = {
    "p": "paragraph", "h1": "heading", "h2": "heading", "h3": "heading", "h4": "heading", "h5": "heading",
    "h6": "heading", "pre": "code", "table": "table", "ul": "list", "ol": "list", "dl": "list",
    "blockquote": "quote", "figure": "paragraph", "address": "paragraph",
}  # fmt: skip
_HTML_CONTAINERS = frozenset(
    {
        "html",
        "body",
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "nav",
        "aside",
        "details",
        "form",
    }
)
# Elements whose text starts on a new line inside a block (list items, table rows, nested paragraphs).
_HTML_LINE_BREAKING = frozenset(
    {
        "p",
        "li",
        "tr",
        "dt",
        "dd",
        "div",
        "br",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "pre",
        "blockquote",
        "caption",
    }
)
_HTML_CELLS = frozenset({"td", "th"})


class Block(NamedTuple):
    """A block of a document: its kind, its original text, and the plain text hashing sees."""

    kind: str  # heading, paragraph, list, code, table, quote
    original: str
    plain: str


def paragraphs(text: str) -> list[str]:
    """Return the non-empty paragraphs of plain ``text`` (split at blank lines), stripped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [part.strip() for part in _BLANK_LINE.split(text) if part.strip()]


def has_markup(content_type: str) -> bool:
    """Whether a document of ``content_type`` is parsed as markup; any other is split into :func:`paragraphs`."""
    return content_type in ("text/markdown", "text/html")


def blocks(text: str, content_type: str) -> list[Block]:
    """Split a document into blocks according to its content type."""
    if content_type == "text/markdown":
        return list(_markdown_blocks(text))
    if content_type == "text/html":
        return list(_html_blocks(text))
    return [Block("paragraph", p, p) for p in paragraphs(text)]


def plain_text(text: str, content_type: str) -> str:
    """Return the plain text of a chunk: its blocks' plain text, one block per line."""
    if content_type == "text/plain":
        return text
    return "\n".join(b.plain for b in blocks(text, content_type))


# -- Markdown -----------------------------------------------------------------------------------------------------


def _inline_text(token: Any) -> str:
    parts: list[str] = []
    # An image's alt text is inline tokens of its own, which may hold images; a stack keeps their order.
    stack: list[Any] = list(reversed(token.children or ()))
    while stack:
        child = stack.pop()
        kind = child.type
        if kind in ("text", "code_inline"):
            parts.append(child.content)
        elif kind in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif kind == "image":
            stack.extend(reversed(child.children or ()))
        elif kind == "html_inline":
            parts.append(_html_fragment_text(child.content))
    return "".join(parts)


def _nesting_cut(tokens: list[Any]) -> int | None:
    """Return the index of the top-level token whose block markdown-it cut at its nesting limit, if any.

    Past ``maxNesting`` markdown-it stops parsing and drops the rest of the document, not only the deep part.
    """
    limit = _markdown().options["maxNesting"] - 1
    for index, token in enumerate(tokens):
        if token.level >= limit:
            return max(
                (
                    i
                    for i in range(index)
                    if tokens[i].level == 0 and tokens[i].nesting == 1 and tokens[i].map
                ),
                default=None,
            )
    return None


def _markdown_blocks(text: str) -> Iterator[Block]:
    lines = text.splitlines()
    tokens = _markdown().parse(text)
    cut = _nesting_cut(tokens)
    if cut is not None:
        # Everything from the block that nests too deep on is kept as plain paragraphs: no text is lost.
        tail = "\n".join(lines[(tokens[cut].map or (0,))[0] :])
        tokens = tokens[:cut]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.level != 0:
            i += 1
            continue
        start, end = token.map if token.map else (0, 0)
        original = "\n".join(lines[start:end]).strip()
        if token.type in ("fence", "code_block"):
            yield Block("code", original, token.content.rstrip("\n"))
            i += 1
            continue
        if token.type == "html_block":
            plain = _html_fragment_text(token.content)
            if plain.strip():
                yield Block("paragraph", original, plain)
            i += 1
            continue
        if not token.type.endswith("_open"):
            i += 1  # hr and anything without text
            continue
        j, kind, plain = _container(tokens, i)
        if plain.strip():
            yield Block(kind, original, plain)
        i = j + 1
    if cut is not None:
        yield from (Block("paragraph", part, part) for part in paragraphs(tail))


def _container(tokens: list[Any], start: int) -> tuple[int, str, str]:
    """Return where the top-level block opened at ``tokens[start]`` closes, its kind, and its plain text (a table's
    rows one a line)."""
    depth, j, texts, rows = 0, start, [], []
    while j < len(tokens):
        inner = tokens[j]
        depth += inner.nesting
        if inner.type == "inline":
            texts.append(_inline_text(inner))
        elif inner.type in ("fence", "code_block"):
            texts.append(inner.content.rstrip("\n"))
        elif inner.type == "tr_close":
            rows.append(" ".join(texts))
            texts = []
        if depth == 0:
            break
        j += 1
    kind = {"heading_open": "heading", "paragraph_open": "paragraph", "table_open": "table",
            "blockquote_open": "quote"}.get(tokens[start].type, "list")  # fmt: skip
    plain = "\n".join(rows + texts) if kind == "table" else "\n".join(texts)
    return j, kind, plain


# -- HTML ---------------------------------------------------------------------------------------------------------
#
# The walks below keep their own stacks instead of recursing per element: a hostile page nests elements tens of
# thousands deep, past Python's recursion limit.


def _children(node: LexborNode) -> list[LexborNode]:
    """``node``'s child nodes, text and comments included, last first (the order a stack pops them in)."""
    children = list(node.iter(include_text=True))
    children.reverse()
    return children


def _html_node_text(node: LexborNode, out: list[str]) -> None:
    # A string on the stack is the separator closing an element whose children are above it.
    stack: list[LexborNode | str] = [*_children(node)]
    while stack:
        child = stack.pop()
        if isinstance(child, str):
            out.append(child)
            continue
        tag = child.tag
        if tag == "-text":
            out.append(child.text_content or "")
        elif tag in _HTML_SKIP or tag == "-comment":
            continue
        elif tag == "br":
            out.append("\n")
        elif tag == "pre":
            out.append("\n" + (child.text(deep=True) or "") + "\n")
        else:
            edge = " " if tag in _HTML_CELLS else "\n" if tag in _HTML_LINE_BREAKING else ""
            if edge:
                out.append(edge)
                stack.append(edge)
            stack.extend(_children(child))


def _clean(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _html_text(node: LexborNode) -> str:
    if node.tag == "pre":
        return (node.text(deep=True) or "").strip("\n")
    out: list[str] = []
    _html_node_text(node, out)
    return _clean("".join(out))


def _html_fragment_text(html: str) -> str:
    if too_deep(html, limit=MAX_HTML_DEPTH):
        return _clean(_tags_removed(html))
    parser = _html_parser(f"<body>{html}</body>")
    return _html_text(parser.body) if parser.body is not None else ""


def _html_blocks(text: str) -> Iterator[Block]:
    if too_deep(text, limit=MAX_HTML_DEPTH):
        yield from (Block("paragraph", part, part) for part in paragraphs(_tags_removed(text)))
        return
    parser = _html_parser(text)
    if parser.body is not None:
        yield from _html_walk(parser.body)


def _tags_removed(html: str) -> str:
    """Return the text of HTML too deep to parse: comments, scripts, styles and tags removed, entities decoded."""
    return html_lib.unescape(_SPACES.sub(" ", _STRIP.sub(" ", html)))


def _html_walk(container: LexborNode) -> Iterator[Block]:
    pending_html: list[str] = []
    pending_text: list[str] = []

    def flush() -> Iterator[Block]:
        plain = _clean("".join(pending_text))
        if plain:
            yield Block("paragraph", "".join(pending_html).strip(), plain)
        pending_html.clear()
        pending_text.clear()

    # None marks the end of a nested container: loose text before it and after it are separate paragraphs.
    stack: list[LexborNode | None] = [*_children(container)]
    while stack:
        child = stack.pop()
        if child is None:
            yield from flush()
            continue
        tag = child.tag
        if tag in _HTML_SKIP or tag == "-comment":
            continue
        if tag in _HTML_BLOCKS:
            yield from flush()
            plain = _html_text(child)
            if plain:
                yield Block(_HTML_BLOCKS[tag], child.html or "", plain)
        elif tag in _HTML_CONTAINERS:
            yield from flush()
            stack.append(None)
            stack.extend(_children(child))
        elif tag == "-text":
            pending_html.append(child.text_content or "")
            pending_text.append(child.text_content or "")
        else:
            pending_html.append(child.html or "")
            out: list[str] = []
            _html_node_text(child, out) if tag != "br" else out.append("\n")
            pending_text.append("".join(out))
    yield from flush()
