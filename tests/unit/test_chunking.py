from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core.chunking import paragraphs


def test_splits_on_blank_lines_and_strips():
    assert paragraphs("a\nb\n\n  \n c \r\n\r\nd") == ["a\nb", "c", "d"]


def test_empty_text_has_no_paragraphs():
    assert paragraphs("") == []
    assert paragraphs("\n\n \n") == []


@given(st.lists(st.text(alphabet="abc \t", min_size=1).filter(lambda s: s.strip()), max_size=6))
def test_editing_one_paragraph_leaves_the_others(paras):
    text = "\n\n".join(paras)
    edited = paras[:]
    if edited:
        edited[0] = edited[0] + " x"
    before, after = paragraphs(text), paragraphs("\n\n".join(edited))
    assert before[1:] == after[1:]
