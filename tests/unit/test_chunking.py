from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core.chunking import chunk_document
from streamdedup.core.markup import paragraphs
from streamdedup.core.normalize import content_hash

WORD = st.sampled_from(
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron".split()
)
SENTENCE = st.lists(WORD, min_size=3, max_size=12).map(lambda w: " ".join(w).capitalize() + ".")
PARAGRAPH = st.lists(SENTENCE, min_size=1, max_size=6).map(" ".join)


def test_paragraphs_split_on_blank_lines_and_strip():
    assert paragraphs("a\nb\n\n  \n c \r\n\r\nd") == ["a\nb", "c", "d"]
    assert paragraphs("") == [] and paragraphs("\n\n \n") == []


def test_a_heading_joins_the_block_it_introduces():
    md = chunk_document("# Setup\n\nInstall it.\n\n## Use\n\nRun it.", "text/markdown", max_chars=500)
    assert [c.plain for c in md] == ["Setup\nInstall it.", "Use\nRun it."]
    assert md[0].original == "# Setup\n\nInstall it."
    html = chunk_document(
        "<h1>Setup</h1><p>Install it.</p><h2>Use</h2><p>Run it.</p>", "text/html", max_chars=500
    )
    assert [c.plain for c in html] == ["Setup\nInstall it.", "Use\nRun it."]
    plain = chunk_document("Setup\n\nInstall it.\n\nUse\n\nRun it.", "text/plain", max_chars=500)
    assert [c.plain for c in plain] == ["Setup\nInstall it.", "Use\nRun it."]


def test_a_trailing_heading_is_a_chunk_of_its_own():
    assert [c.plain for c in chunk_document("Body text.\n\n# End", "text/markdown", max_chars=500)] == [
        "Body text.",
        "End",
    ]


def test_long_blocks_are_split_at_sentences_within_the_limit():
    text = " ".join(f"Sentence number {i} is here." for i in range(60))
    chunks = chunk_document(text, "text/plain", max_chars=200)
    assert len(chunks) > 1 and all(len(c.plain) <= 200 for c in chunks)
    assert " ".join(c.plain for c in chunks) == text
    code = "```\n" + "\n".join(f"line_{i} = {i}" for i in range(100)) + "\n```"
    pieces = chunk_document(code, "text/markdown", max_chars=300)
    assert all(len(p.plain) <= 300 for p in pieces) and pieces[0].plain.startswith("line_0 = 0\nline_1 = 1")


def test_a_long_table_is_cut_between_rows():
    rows = "".join(f"<tr><td>SKU-{i:03d}</td><td>{i * 7}.50</td><td>EUR</td></tr>" for i in range(80))
    pieces = chunk_document(f"<table>{rows}</table>", "text/html", max_chars=300)
    assert len(pieces) > 1 and all(len(p.plain) <= 300 for p in pieces)
    lines = [line for p in pieces for line in p.plain.split("\n")]
    assert [line.split() for line in lines] == [[f"SKU-{i:03d}", f"{i * 7}.50", "EUR"] for i in range(80)]


def test_a_sentence_longer_than_the_limit_is_cut():
    chunks = chunk_document("x" * 450, "text/plain", max_chars=200)
    assert [len(c.plain) for c in chunks] == [200, 200, 50]


def test_boilerplate_lines_are_dropped_before_chunking():
    text = "Acme Docs\n\nReal content here.\n\nCopyright Acme"
    kept = chunk_document(text, "text/plain", max_chars=500, keep_line=lambda line: "Acme" not in line)
    assert [c.plain for c in kept] == ["Real content here."]


@given(
    st.lists(PARAGRAPH, min_size=2, max_size=12), st.data(), st.sampled_from(["text/plain", "text/markdown"])
)
def test_editing_one_paragraph_changes_only_its_chunk(paras, data, content_type):
    index = data.draw(st.integers(0, len(paras) - 1))
    edited = list(paras)
    edited[index] = edited[index] + " Omega was added."
    before = chunk_document("\n\n".join(paras), content_type, max_chars=2000)
    after = chunk_document("\n\n".join(edited), content_type, max_chars=2000)
    assert len(before) == len(after)
    changed = [
        i
        for i, (a, b) in enumerate(zip(before, after, strict=True))
        if content_hash(a.plain) != content_hash(b.plain)
    ]
    assert changed == [index]
