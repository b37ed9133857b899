import html as html_lib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core.markup import MAX_HTML_DEPTH, blocks, plain_text
from streamdedup.core.nesting import too_deep
from streamdedup.core.normalize import content_hash, normalize

PASSAGE_MD = (
    "To reset your password, open **Settings** and choose [Security](https://example.com/security).\n"
    "Then click *Reset*."
)
PASSAGE_HTML = (
    '<p>To reset your password, open <strong>Settings</strong> and choose <a href="https://example.com/security">'
    "Security</a>.<br>Then click <em>Reset</em>.</p>"
)
PASSAGE_TEXT = "To reset your password, open Settings and choose Security.\nThen click Reset."


def test_the_same_passage_in_three_formats_has_one_hash():
    hashes = {
        content_hash(plain_text(PASSAGE_MD, "text/markdown")),
        content_hash(plain_text(PASSAGE_HTML, "text/html")),
        content_hash(PASSAGE_TEXT),
    }
    assert len(hashes) == 1


def test_code_blocks_and_tables_keep_their_content():
    md = "```\nx = compute(1, 2)\n```\n\n| key | value |\n|-----|-------|\n| a   | 1     |\n"
    html = "<pre>x = compute(1, 2)</pre><table><tr><th>key</th><th>value</th></tr><tr><td>a</td><td>1</td></tr></table>"
    assert [b.kind for b in blocks(md, "text/markdown")] == ["code", "table"]
    assert [normalize(b.plain) for b in blocks(md, "text/markdown")] == [
        normalize(b.plain) for b in blocks(html, "text/html")
    ]
    assert normalize(plain_text(md, "text/markdown")) == "x = compute(1 2 key value a 1"


def test_html_scripts_styles_and_comments_are_not_text():
    page = "<html><head><style>p{}</style><script>alert(1)</script></head><body><!-- x --><p>Body</p></body></html>"
    assert plain_text(page, "text/html") == "Body"


def test_nested_html_containers_and_loose_text():
    page = "<div><section><p>One</p>loose <b>text</b><div><p>Two</p></div></section></div>"
    assert [b.plain for b in blocks(page, "text/html")] == ["One", "loose text", "Two"]


def test_lists_put_items_on_their_own_lines():
    assert blocks("- one\n- two", "text/markdown")[0].plain == "one\ntwo"
    assert blocks("<ul><li>one</li><li>two</li></ul>", "text/html")[0].plain == "one\ntwo"


@pytest.mark.parametrize("content_type", ["text/markdown", "text/html"])
@given(text=st.text(max_size=300))
def test_markup_normalization_never_raises_and_is_a_fixed_point(content_type, text):
    normalized = normalize(plain_text(text, content_type))
    assert normalize(normalized) == normalized
    assert normalize(plain_text(text, content_type)) == normalized  # deterministic


@given(
    st.lists(
        st.text(alphabet=st.characters(categories=["L", "N"]), min_size=1, max_size=12),
        min_size=1,
        max_size=30,
    )
)
def test_plain_words_hash_the_same_as_markdown_and_html(words):
    text = " ".join(words)
    assert content_hash(plain_text(text, "text/markdown")) == content_hash(text)
    assert content_hash(plain_text(f"<p>{html_lib.escape(text)}</p>", "text/html")) == content_hash(text)


# Start tags repeated to nest the innermost "x" deep. Up to MAX_HTML_DEPTH the parser builds the tree (the walks
# keep their own stacks); deeper, the text is taken without a parser, whose time would grow with the square.
_DEEP_HTML = {
    "div": "<div>",
    "table": "<table><tr><td>",
    "list": "<ul><li>",
    "blockquote": "<blockquote>",
    "span": "<span>",
    "b": "<b>",
}


@pytest.mark.parametrize(
    ("kind", "depth"),
    [(kind, depth) for kind in _DEEP_HTML for depth in (900, 10_000, 200_000)],
)
def test_deeply_nested_html_keeps_its_innermost_text(kind, depth):
    page = "<p>before</p>" + _DEEP_HTML[kind] * depth + "x"
    assert plain_text(page, "text/html").split() == ["before", "x"]
    # Markdown hands HTML blocks to the same walk.
    assert plain_text(page, "text/markdown").split() == ["before", "x"]


@pytest.mark.parametrize(
    "nested",
    [">" * 100_000 + " x", "> " * 100_000 + "x", "- " * 100_000 + "x", "1. " * 100_000 + "x"],
    ids=["quote", "spaced-quote", "bullet-list", "ordered-list"],
)
def test_deeply_nested_markdown_loses_no_text(nested):
    # markdown-it stops 20 levels deep and drops the rest of the document; from the block that nests too deep on,
    # the document is kept as plain paragraphs.
    lines = plain_text(f"before\n\n{nested}\n\nafter", "text/markdown").split("\n")
    assert lines[0] == "before" and lines[-1] == "after" and lines[1].endswith("x")


def test_a_list_nested_ten_deep_keeps_the_rest_of_the_document():
    nested = "".join("  " * i + f"- item {i}\n" for i in range(12))
    found = blocks(f"# Title\n\nbefore\n\n{nested}\nafter\n\n## More\n\nlast", "text/markdown")
    assert [b.plain for b in found][:2] == ["Title", "before"]
    assert [b.plain for b in found][-3:] == ["after", "## More", "last"]
    assert all(f"item {i}" in found[2].plain for i in range(12))


@pytest.mark.parametrize("depth", [1_000, 10_000])
def test_deeply_nested_markdown_images_keep_their_text(depth):
    assert "x" in plain_text("![" * depth + "x" + "](u)" * depth, "text/markdown")


# Ways to nest deep that a depth count can miss; each would take the parser minutes to hours (the test's timeout
# fails it) if it reached the parser.
_EVASIONS = {
    "unmatched end tags": "<div></x>" * 300_000,
    "empty comment": "<!-->" + "<div>" * 300_000,
    "self-closing div in svg": "<svg>" + "<div/>" * 300_000,
    "noscript": "<noscript>" + "<blockquote>" * 300_000,
    "upper case and attributes": '<DIV class="a>b">' * 300_000,
    "style in svg": "<svg><style>" + "<div>" * 300_000,
}


@pytest.mark.parametrize("content_type", ["text/html", "text/markdown"])
@pytest.mark.parametrize("page", list(_EVASIONS.values()), ids=list(_EVASIONS))
def test_tricks_that_nest_deep_never_reach_the_parser(page, content_type):
    assert too_deep(page, limit=MAX_HTML_DEPTH)
    blocks(page + "x", content_type)


@pytest.mark.parametrize(
    "page",
    [
        "<p>a" * 5_000,  # paragraphs close each other
        "<ul>" + "<li>item" * 5_000 + "</ul>",
        "<table>" + "<tr><td>a<td>b" * 5_000 + "</table>",
        "<svg>" + "<path d='M0 0'/>" * 5_000 + "</svg>",
        "<div>" * 900 + "<script>" + "if (a<b) {}" * 5_000 + "</script>" + "</div>" * 900,
        "<!-- <div> -->" * 5_000,
        "<div><b>x</b><br><img src=a></div>" * 5_000,
    ],
    ids=["paragraphs", "list", "table", "svg", "script", "comments", "siblings"],
)
def test_ordinary_pages_with_many_tags_are_not_too_deep(page):
    assert not too_deep(page, limit=MAX_HTML_DEPTH)


_PIECES = [
    "<div>",
    "</div>",
    "<span>",
    "</span>",
    "<p>",
    "</p>",
    "<ul>",
    "</ul>",
    "<li>",
    "x",
    "<br>",
    "<b>",
    "</b>",
]


@given(st.lists(st.sampled_from(_PIECES), max_size=400))
def test_the_depth_estimate_never_undercounts_what_the_parser_builds(parts):
    from selectolax.lexbor import LexborHTMLParser

    page = "".join(parts)
    deepest, stack = 0, [(LexborHTMLParser(page).body, 0)]
    while stack:
        node, depth = stack.pop()
        if node is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in node.iter())
    # Elements that close themselves (p, li) are not counted; between two of them there is always one that is.
    limit = deepest // 2 - 2
    assert limit < 0 or too_deep(page, limit=limit)
