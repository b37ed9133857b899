"""How deep the elements of an HTML text nest, estimated without building a tree.

An HTML5 parser keeps a stack of open elements and, for most block start tags, searches it (whether a ``p`` is
"in button scope"), so its time grows with the square of the nesting depth: lexbor takes about 20 s for 100,000
nested ``div`` and hours for the millions a few megabytes can hold. :func:`too_deep` follows the tokenizer
and the parts of tree building that decide the depth, in one linear pass, so that deeper text can be reduced to
text without a parser. It may count more than the parser nests (a too deep estimate costs only a plainer
extraction), but not fewer, up to a small factor (a nested table is one level here and four in the parser):

- void elements (``br``, ``img``, ...) and elements that close themselves (``p``, ``li``, ``td``, ...) do not count;
- an end tag closes the innermost open element of its name and everything inside it, and is ignored when none is
  open; comments, and the text of ``script``, ``style``, ``textarea``, ``title`` and the like, hold no tags;
- inside ``svg`` and ``math``, ``<x/>`` closes itself, and an HTML element such as ``div`` leaves foreign content.

>>> too_deep("<div><p>a<p>b<br><div>c</div></div>" * 20, limit=2)
False
>>> too_deep("<div><p>a<p>b<br><div>c</div>" * 20, limit=2)
True
"""

from __future__ import annotations

import re

__all__ = ["too_deep"]

# A comment's start, or a tag: whether it closes, its name, and what follows the name up to ">".
_TOKEN = re.compile(r"<(?:(!--)|(/?)([A-Za-z][^\s/>]*)([^>]*)>?)")
_COMMENT_END = re.compile(r"--!?>")
# Elements that never hold others, or whose end tag the parser supplies when the next one of the kind starts.
_FLAT = frozenset(
    "area base basefont bgsound br col embed hr img input keygen link meta param source track wbr "
    "p li dt dd option optgroup tr td th thead tbody tfoot colgroup caption rb rt rtc rp html head body".split()
)
# Their content is text up to their own end tag (in HTML content, not inside svg or math).
_RAW_TEXT = frozenset("script style textarea title xmp iframe noembed noframes".split())
_FOREIGN = frozenset(("svg", "math"))
# Start tags that end foreign content (HTML standard, "parsing main inforeign").
_BREAKOUT = frozenset(
    "b big blockquote body br center code dd div dl dt em embed h1 h2 h3 h4 h5 h6 head hr i img li listing menu "
    "meta nobr ol p pre ruby s small span strong strike sub sup table tt u ul var font".split()
)


def too_deep(text: str, *, limit: int) -> bool:
    """Return whether the elements of ``text`` nest deeper than ``limit`` at some point (see the module)."""
    if text.count("<") <= limit:
        return False  # it cannot nest deeper than its number of tags
    stack: list[str] = []
    open_count: dict[str, int] = {}
    foreign = 0  # open svg and math elements
    search, position, end = _TOKEN.search, 0, len(text)
    while (match := search(text, position)) is not None:
        comment, closing, name, rest = match.groups()
        position = match.end()
        if comment:
            position = _comment_end(text, position)
            continue
        name = name.lower()
        if closing:
            foreign -= _close(stack, open_count, name)
            continue
        if name in _FLAT and not foreign:
            continue  # the commonest case, decided first
        if foreign and name in _BREAKOUT:
            foreign = _leave_foreign(stack, open_count, foreign)
        if foreign or name in _FOREIGN:
            foreign = _open_foreign(stack, open_count, name, rest, foreign)
        elif name == "plaintext":
            break  # everything after it is text
        elif name in _RAW_TEXT:
            close = re.compile(rf"</{re.escape(name)}[\s/>]", re.IGNORECASE).search(text, position)
            position = close.start() if close else end
            continue
        elif name not in _FLAT:
            _push(stack, open_count, name)
        if len(stack) > limit:
            return True
    return False


def _push(stack: list[str], open_count: dict[str, int], name: str) -> None:
    stack.append(name)
    open_count[name] = open_count.get(name, 0) + 1


def _close(stack: list[str], open_count: dict[str, int], name: str) -> int:
    """Close the elements up to the innermost open ``name``, if one is open; return how many were svg or math."""
    closed = 0
    if open_count.get(name):
        while stack:
            top = stack.pop()
            open_count[top] -= 1
            closed += top in _FOREIGN
            if top == name:
                break
    return closed


def _leave_foreign(stack: list[str], open_count: dict[str, int], foreign: int) -> int:
    """Leave foreign content: close up to the outermost svg or math; return the svg and math elements left open."""
    while foreign and stack:
        top = stack.pop()
        open_count[top] -= 1
        foreign -= top in _FOREIGN
    return foreign


def _open_foreign(stack: list[str], open_count: dict[str, int], name: str, rest: str, foreign: int) -> int:
    """Open an element in foreign content, or the svg or math element that starts it (unless it closes itself);
    return the count of open foreign elements, which only the element that starts foreign content raises."""
    if not rest.rstrip().endswith("/"):
        _push(stack, open_count, name)
        if not foreign:
            foreign += 1
    return foreign


def _comment_end(text: str, after_open: int) -> int:
    """Return where a comment opened just before ``after_open`` ends (the HTML standard's rules, at EOF too)."""
    if text.startswith(">", after_open):
        return after_open + 1  # <!--> is a whole comment
    if text.startswith("->", after_open):
        return after_open + 2  # and so is <!--->
    close = _COMMENT_END.search(text, after_open)
    return close.end() if close else len(text)
