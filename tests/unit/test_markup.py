import html as html_lib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core.markup import blocks, plain_text
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


# Start tags repeated to nest the innermost "x" deep. Lexbor's tree builder scans its stack of open elements for
# each div, blockquote and li start tag, so those parse in time quadratic in the depth and stay at 10,000 here.
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
    [(kind, depth) for kind in _DEEP_HTML for depth in (1_000, 10_000)]
    + [("table", 100_000), ("span", 100_000), ("b", 100_000)],
)
def test_deeply_nested_html_keeps_its_innermost_text(kind, depth):
    page = "<p>before</p>" + _DEEP_HTML[kind] * depth + "x"
    assert plain_text(page, "text/html").split("\n") == ["before", "x"]
    # Markdown hands HTML blocks to the same walk.
    assert plain_text(page, "text/markdown").split("\n") == ["before", "x"]


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
