"""decode_text: one text in any of its encodings decodes to the same string; bytes that are not text are refused."""

from __future__ import annotations

import codecs
import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.convert import ConversionError
from streamdedup.convert.text import decode_text

RECIPE = (
    "Café crème brûlée… heat the cream to 65 degrees \N{EN DASH} never boil it. Whisk the yolks with the sugar until "
    "pale, then pour the warm cream over them, stirring all the time. Bake the crèmes in a bain-marie at 150 "
    "degrees for forty minutes, chill them overnight, and caramelise the sugar on top just before serving."
)
# Latin-1 has neither the ellipsis nor the en dash.
RECIPE_LATIN1 = RECIPE.replace("…", "...").replace("\N{EN DASH}", "-")
# Short enough that cp1250, cp1252, cp1257 and ISO 8859-10 read its Latin-1 bytes equally cleanly.
SHORT = "Café crème brûlée: heat the cream to 65 degrees, then let it rest. Never boil it."

WITH_BOM = {
    "utf_8_sig": lambda text: text.encode("utf_8_sig"),
    "utf_16_le": lambda text: codecs.BOM_UTF16_LE + text.encode("utf_16_le"),
    "utf_16_be": lambda text: codecs.BOM_UTF16_BE + text.encode("utf_16_be"),
    "utf_32_le": lambda text: codecs.BOM_UTF32_LE + text.encode("utf_32_le"),
    "utf_32_be": lambda text: codecs.BOM_UTF32_BE + text.encode("utf_32_be"),
}
BOM_METADATA = {
    "utf_8_sig": {},
    "utf_16_le": {"encoding": "utf_16", "encoding_confidence": 1.0},
    "utf_16_be": {"encoding": "utf_16", "encoding_confidence": 1.0},
    "utf_32_le": {"encoding": "utf_32", "encoding_confidence": 1.0},
    "utf_32_be": {"encoding": "utf_32", "encoding_confidence": 1.0},
}


def assert_detected(data: bytes, text: str, encoding: str) -> None:
    decoded, metadata = decode_text(data)
    assert decoded == text
    assert metadata["encoding"] == encoding
    confidence = metadata["encoding_confidence"]
    assert 0.8 <= confidence <= 1.0  # charset-normalizer drops readings with more than 0.2 chaos
    assert confidence == round(confidence, 3)


@pytest.mark.parametrize("text", [RECIPE, RECIPE_LATIN1, SHORT], ids=["recipe", "recipe-latin1", "short"])
def test_utf_8_is_returned_as_is_and_records_nothing(text):
    assert decode_text(text.encode()) == (text, {})


@pytest.mark.parametrize("text", [RECIPE, RECIPE_LATIN1, SHORT], ids=["recipe", "recipe-latin1", "short"])
@pytest.mark.parametrize("encoding", sorted(WITH_BOM))
def test_a_byte_order_mark_names_the_encoding_and_is_dropped(text, encoding):
    assert decode_text(WITH_BOM[encoding](text)) == (text, BOM_METADATA[encoding])


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        (RECIPE, "cp1252"),
        (RECIPE_LATIN1, "cp1252"),
        (RECIPE_LATIN1, "latin_1"),
        (SHORT, "cp1252"),
        (SHORT, "latin_1"),
    ],
    ids=["recipe-cp1252", "recipe-latin1-cp1252", "recipe-latin1", "short-cp1252", "short-latin1"],
)
def test_western_legacy_text_decodes_to_the_same_string_as_its_utf_8_copy(text, encoding):
    # Alone, charset-normalizer reads the Latin-1 bytes of SHORT as cp1250: "crčme brűlée".
    assert_detected(text.encode(encoding), text, "cp1252")
    assert decode_text(text.encode(encoding))[0] == decode_text(text.encode())[0]


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("El niño comió piña en la mañana… ¿Por qué?", "cp1252"),
        ("El niño comió piña en la mañana. ¿Por qué?", "latin_1"),
        ("Größe, Maß, Übergröße", "cp1252"),
        ("Größe, Maß, Übergröße", "latin_1"),
    ],
    ids=["spanish-cp1252", "spanish-latin1", "german-cp1252", "german-latin1"],
)
def test_spanish_and_german_in_a_western_code_page(text, encoding):
    # "Größe" reads the same in cp1250; a reading no letter tells apart is recorded as cp1252.
    assert_detected(text.encode(encoding), text, "cp1252")


@pytest.mark.parametrize(
    "text",
    [
        "Zażółć gęślą jaźń. Łódź leży w środkowej Polsce, a Wrocław nad Odrą.",
        # Only ł is not ASCII; cp1252 reads it as ³ ("szko³y"), a symbol inside a word.
        "Paweł i Michał poszli do szkoły rano.",
        "Příliš žluťoučký kůň úpěl ďábelské ódy.",
        # cp1252 reads these bytes as cleanly ("mìsto Èeské republiky ... øece"): preferring cp1252 on a tie
        # would take it; the letters, which are all Czech in cp1250 and of no one language in cp1252, do not.
        "Praha je hlavní město České republiky. Leží na řece Vltavě a má přes milion obyvatel.",
        "Budapest Magyarország fővárosa, a Duna két partján fekszik. Több mint másfél millió lakosa van.",
    ],
    ids=["polish", "polish-l", "czech", "czech-clean-in-cp1252", "hungarian"],
)
def test_central_european_text_stays_cp1250(text):
    assert_detected(text.encode("cp1250"), text, "cp1250")


def test_the_decoded_text_keeps_its_line_ends():
    text = "Première ligne\r\nDeuxième ligne\rTroisième\n"
    assert decode_text(text.encode("cp1252"))[0] == text
    assert decode_text(text.encode())[0] == text


def test_empty_data_is_empty_text():
    assert decode_text(b"") == ("", {})
    assert decode_text(codecs.BOM_UTF8) == ("", {})


def test_random_bytes_are_not_text():
    with pytest.raises(ConversionError, match="not text: no encoding explains its bytes"):
        decode_text(random.Random(7).randbytes(2000))


@pytest.mark.parametrize(
    "data",
    [
        b"\x00" * 1500 + b"PK header and a name",
        b"".join(struct.pack("<I", n) for n in range(100)),  # valid UTF-8, three NULs in four bytes
    ],
    ids=["nul-run", "packed-integers"],
)
def test_data_that_is_mostly_nul_is_not_text(data):
    with pytest.raises(ConversionError, match=r"not text: .* control characters"):
        decode_text(data)


def test_a_byte_order_mark_on_bytes_of_another_encoding_is_not_text():
    with pytest.raises(ConversionError, match="not text: its bytes are not utf_16"):
        decode_text(codecs.BOM_UTF16_LE + b"odd")


@pytest.mark.parametrize("encoding", ["utf_8", "cp1252"])
def test_a_few_control_characters_are_still_text(encoding):
    text = RECIPE[:60] + "\x0c\x1b[1m" + RECIPE[60:120] + "\x1b[0m\x07" + RECIPE[120:]
    decoded, metadata = decode_text(text.encode(encoding))
    assert decoded == text
    assert metadata.get("encoding") == (None if encoding == "utf_8" else "cp1252")


@given(st.text(st.characters(exclude_categories=("C",), include_characters="\t\n\r")))
def test_printable_text_in_utf_8_round_trips(text):
    assert decode_text(text.encode()) == (text, {})
