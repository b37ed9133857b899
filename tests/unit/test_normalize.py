import unicodedata

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.core import _native
from streamdedup.core.normalize import _words_by_pattern, content_hash, normalize, words
from streamdedup.core.state import ContentRecord


def test_collapses_whitespace_case_and_edge_punctuation():
    assert normalize("  Hello,\tWORLD!\n\n(again) ") == "hello world again"


def test_keeps_digits_and_in_word_punctuation_apart():
    assert normalize("v2") != normalize("v3")
    assert normalize("float16") != normalize("float32")
    assert normalize("30-day refund") == "30-day refund"
    assert normalize("don't") == "don't"


def test_nfkc_folds_compatibility_forms():
    assert normalize("ﬁle Ⅳ") == normalize("file IV")
    assert normalize("Straße") == normalize("STRASSE")


@pytest.mark.parametrize("letter", ["\u01f0", "\u0390", "\u1e96", "\u1fb6"])
def test_letters_whose_case_fold_undoes_composition_normalize_once_and_stay(letter):
    # Case folding turns these into a base letter and combining marks that NFKC composes again: folding must stop
    # at the fixed point instead of waiting for an NFKC form it never reaches.
    text = f"Jet {letter.upper()}{letter} fuel"
    once = normalize(text)
    assert normalize(once) == once
    assert content_hash(text.upper()) == content_hash(text.lower()) == content_hash(once)


def test_words_drop_tokens_that_are_only_punctuation():
    assert words("a — b ... c") == ["a", "b", "c"]


@given(st.text())
def test_normalization_is_idempotent(text):
    once = normalize(text)
    assert normalize(once) == once


_SEPARATORS = st.sampled_from([" ", "  ", "\t", "\n", "\u00a0", "\u3000", "\r\n"])


def _respace(tokens, data):
    separators = data.draw(st.lists(_SEPARATORS, min_size=len(tokens) - 1, max_size=len(tokens) - 1))
    return tokens[0] + "".join(sep + tok for sep, tok in zip(separators, tokens[1:], strict=True))


@given(
    st.lists(st.text(alphabet=st.characters(categories=["L", "N", "M"]), min_size=1), min_size=1), st.data()
)
def test_hash_is_stable_under_whitespace_and_unicode_form(tokens, data):
    form = data.draw(st.sampled_from(["NFC", "NFD", "NFKC", "NFKD"]))
    variant = unicodedata.normalize(form, _respace(tokens, data))
    assert content_hash(variant) == content_hash(" ".join(tokens))


@given(
    st.lists(st.text(alphabet=st.characters(codec="latin-1", categories=["L", "N"]), min_size=1), min_size=1),
    st.data(),
)
def test_hash_is_stable_under_case(tokens, data):
    text = " ".join(tokens)
    variant = data.draw(st.sampled_from([text.upper(), text.lower(), text.swapcase(), text.title()]))
    assert content_hash(variant) == content_hash(text)


@given(st.text())
def test_hash_is_sha256_hex_of_the_normalized_text(text):
    digest = content_hash(text)
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert content_hash(normalize(text)) == digest


_ASCII = st.text(
    alphabet=st.sampled_from([chr(c) for c in range(128)] + [" ", " ", "-", ".", "'", "a", "b"]), max_size=60
)


@given(_ASCII)
def test_the_ascii_path_splits_words_as_the_unicode_pattern_does(text):
    assert words(text) == _words_by_pattern(text)
    assert words(text + "\u00e9") == _words_by_pattern(text + "\u00e9")


@given(_ASCII)
def test_compiled_normalization_of_ascii_text_joins_the_words_the_python_paths_find(text):
    assert normalize(text) == " ".join(words(text)) == " ".join(_words_by_pattern(text))
    assert _native.normalize_ascii(text) == normalize(text)


def test_compiled_normalization_takes_only_ascii_text():
    assert _native.normalize_ascii("caf\u00e9") is None
    assert normalize("Caf\u00e9, CAF\u00c9!") == "caf\u00e9 caf\u00e9"


@given(st.text(), st.booleans())
def test_a_content_keeps_its_normal_form_once_and_only_where_the_text_does_not_give_it(text, normalized):
    # A content stores its normalized text only when normalizing the original text would not give it back; a text
    # that is its own normal form (pre-chunked, normalized input) takes the shortcut, with the same outcome.
    original = normalize(text) if normalized else text
    norm = normalize(original)
    record = ContentRecord()
    record.set_texts(original, norm)
    assert record.norm_stored == ""
    stored = msgspec.msgpack.decode(msgspec.msgpack.encode(record), type=ContentRecord)
    assert stored.norm == norm
    other = ContentRecord()
    other.set_texts(original, norm + " x")  # a normal form the text does not give (another chunker's, say)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(other), type=ContentRecord).norm == norm + " x"
