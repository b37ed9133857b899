"""A text file's bytes, decoded: UTF-8 as is, by its byte order mark if it has one, by detection otherwise.

Most files are UTF-8; they are returned unchanged and nothing is recorded. A UTF-16 or UTF-32 byte order mark names
its encoding. Other bytes go to charset-normalizer, which decodes them with every code page that fits and measures
the *chaos* of each reading (its share of implausible characters: symbols stuck to letters, stray accents, ...).

Short text often reads equally cleanly in several code pages, and charset-normalizer's last resort is then the
order in which it tried them, which is alphabetical. ``"Café crème brûlée"`` in Latin-1 reads cleanly in cp1250,
cp1252, cp1257 and ISO 8859-10 (every byte is a letter in each, and the languages it guesses from letter frequencies
score the same), so cp1250 wins and the text comes back as ``"Café crčme brűlée"``: the copies of one text in UTF-8
and in Latin-1 would not be one chunk. Simply preferring cp1252 would make the same mistake the other way round:
``"Tři čtvrtě"`` in cp1250 reads just as cleanly in cp1252, as ``"Tøi ètvrtì"``.

So a tie is broken by the letters of each reading. A text is written in one language and its accented letters come
from that language's alphabet; a wrong code page scatters them over several (è becomes č, which French lacks, and û
becomes ű, which Czech lacks) or turns them into symbols inside words (ł into ³ in ``"Wroc³aw"``). The rule:

1. The candidates are those charset-normalizer counts as clean as its best one: chaos within 0.005 of the best's,
   the margin it uses itself.
2. Of these, the readings that fit one alphabet best are kept: the largest share of their distinct non-ASCII letters
   (and symbols inside words, which fit none) that a single alphabet holds. The alphabets are those of the European
   languages written in the Latin script (``_LATIN_LETTERS``) and, whole, each other script (Cyrillic, Greek, the CJK
   scripts together, ...).
3. Of these, cp1252 is preferred: the most common legacy code page (the WHATWG Encoding Standard decodes text
   labelled Latin-1 or ASCII as windows-1252) and a superset of Latin-1's printable characters. A reading no letter
   tells apart (``"Größe"`` is the same in cp1250 and cp1252) is therefore recorded as cp1252.
4. Otherwise charset-normalizer's order decides.

The choice depends on the bytes only, so it is deterministic. It cannot tell code pages apart where they differ in
no letter a text uses, or only between letters of one alphabet (Slovak has both ľ and ž, which ISO 8859-2 and cp1250
swap); nor can it recover a reading charset-normalizer did not find clean.

Bytes that no code page reads cleanly, or whose reading is more than one tenth control characters (binary data, such
as runs of NULs), are not text: :class:`~streamdedup.convert.ConversionError`. A few control characters (a form
feed, an escape sequence in a log) are text. The decoded text is returned as it is, line ends included; only a byte
order mark is removed.

Encodings are named as Python's codecs and charset-normalizer name them: ``utf_16``, ``utf_32``, ``cp1252``,
``iso8859_2``.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections import Counter
from typing import Any

import charset_normalizer
from charset_normalizer import CharsetMatch, CharsetMatches

from streamdedup.convert import ConversionError

__all__ = ["decode_text"]

# Longest first: the UTF-32 little-endian mark begins with the UTF-16 one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf_32"),
    (codecs.BOM_UTF32_BE, "utf_32"),
    (codecs.BOM_UTF16_LE, "utf_16"),
    (codecs.BOM_UTF16_BE, "utf_16"),
)

# Candidates whose chaos is within this of the best one's are equally clean (charset-normalizer's own tie margin).
_CHAOS_TIE = 0.005

# Among equally good readings, the most common legacy code page.
_PREFERRED = "cp1252"

# The share of a text's characters that may be control characters other than whitespace: more is binary data.
_MAX_CONTROL_SHARE = 0.1
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")

# The non-ASCII lowercase letters of the European languages written in the Latin script.
_LATIN_LETTERS = {
    "Albanian": "çë",
    "Catalan": "àçèéíïòóúü",
    "Croatian": "čćđšž",
    "Czech": "áčďéěíňóřšťúůýž",
    "Danish": "æøåé",
    "Dutch": "áéíóúèëïöü",
    "Esperanto": "ĉĝĥĵŝŭ",
    "Estonian": "äöõüšž",
    "Faroese": "áðíóúýæø",
    "Finnish": "äöåšž",
    "French": "àâæçéèêëîïôœùûüÿ",
    "German": "äöüß",
    "Hungarian": "áéíóöőúüű",
    "Icelandic": "áðéíóúýþæö",
    "Italian": "àèéìíîòóùú",
    "Latvian": "āčēģīķļņšūž",
    "Lithuanian": "ąčęėįšųūž",
    "Maltese": "àċèġħìòùż",
    "Norwegian": "æøåéèêóòô",
    "Polish": "ąćęłńóśźż",
    "Portuguese": "áâãàçéêíóôõú",
    "Romanian": "ăâîșşțţ",
    "Slovak": "áäčďéíĺľňóôŕšťúýž",
    "Slovene": "čšžćđ",
    "Spanish": "áéíñóúü",
    "Swedish": "åäöé",
    "Turkish": "çğıöşüâîû",
}
_ALPHABETS = {language: frozenset(letters + letters.upper()) for language, letters in _LATIN_LETTERS.items()}
_ALPHABETS["Turkish"] |= {"İ"}  # the capital of i, which is ASCII

# A non-ASCII character between two letters; letters, accents and punctuation (apostrophes, dashes) belong there.
_INSIDE_WORD = re.compile(r"(?<=[^\W\d_])[^\x00-\x7f](?=[^\W\d_])")
_STRAY_CATEGORIES = frozenset({"No", "Sc", "Sk", "Sm", "So", "Cc", "Co", "Cn"})

# Scripts written together, counted as one alphabet.
_SCRIPT_GROUPS = dict.fromkeys(["HIRAGANA", "KATAKANA", "HANGUL", "HALFWIDTH", "FULLWIDTH"], "CJK")


def decode_text(data: bytes) -> tuple[str, dict[str, Any]]:
    """Return a text file's text and what to record in its source's metadata about how it was decoded.

    UTF-8, with or without its byte order mark, is returned as is and records nothing (``{}``, UTF-8 being the
    default assumption); so does empty data. Otherwise the metadata is ``{"encoding": name, "encoding_confidence":
    c}``: the Python codec name, and ``c`` = 1 - chaos rounded to 3 digits (1.0 for a byte order mark), roughly the
    share of the reading that is plausible text; charset-normalizer's ``detect()`` gives the same confidence (less
    0.2 under 32 bytes). It says how cleanly the text reads, not how likely the code page is to be the one it was
    written in: a short text can read cleanly (1.0) in several. Raises :class:`ConversionError` when the bytes are
    not text (see the module).
    """
    metadata: dict[str, Any] = {}
    try:
        text = data.decode("utf_8_sig")
    except UnicodeDecodeError:
        text, metadata = _decode_other(data)
    _check_not_binary(text)
    return text, metadata


def _decode_other(data: bytes) -> tuple[str, dict[str, Any]]:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode(data, encoding), {"encoding": encoding, "encoding_confidence": 1.0}
    text, encoding, chaos = _detect(data)
    return text, {"encoding": encoding, "encoding_confidence": round(1 - chaos, 3)}


def _decode(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)  # the utf_16 and utf_32 codecs read a byte order mark and drop it
    except UnicodeDecodeError as exc:
        raise ConversionError(f"not text: its bytes are not {encoding} ({exc})") from exc


def _detect(data: bytes) -> tuple[str, str, float]:
    """The text, the encoding to record and the chaos of its reading.

    charset-normalizer gives up on legacy text with a few control characters in it, so when it finds nothing and
    they are few, it is asked again without them; the bytes are then decoded with them in, and the chaos is that of
    the reading without them.
    """
    found = _choose(charset_normalizer.from_bytes(data))
    if found is not None:
        return str(found[1]), found[0], found[1].chaos
    cleaned = _CONTROL_BYTES.sub(b"", data)
    if len(cleaned) < len(data) and len(data) - len(cleaned) <= len(data) * _MAX_CONTROL_SHARE:
        found = _choose(charset_normalizer.from_bytes(cleaned))
        if found is not None:
            return _decode(data, found[0]), found[0], found[1].chaos
    raise ConversionError("not text: no encoding explains its bytes")


def _choose(matches: CharsetMatches) -> tuple[str, CharsetMatch] | None:
    """The encoding to record and the candidate whose reading is the text, by the rule of the module."""
    best = matches.best()
    if best is None:
        return None
    fitting = _best_fitting([match for match in matches if abs(match.chaos - best.chaos) < _CHAOS_TIE])
    preferred = [match for match in fitting if _PREFERRED in match.could_be_from_charset]
    if preferred:
        return _PREFERRED, preferred[0]
    return fitting[0].encoding, fitting[0]


def _best_fitting(candidates: list[CharsetMatch]) -> list[CharsetMatch]:
    """The candidates whose reading fits one alphabet best, in the order given."""
    fits = [_alphabet_fit(str(match)) for match in candidates]
    return [match for match, fit in zip(candidates, fits, strict=True) if fit == max(fits)]


def _alphabet_fit(text: str) -> float:
    """The largest share of the text's distinct odd characters that one alphabet holds (1.0 if it has none).

    The odd characters are its non-ASCII letters and the symbols it has inside words (``"Wroc³aw"`` is cp1250's
    ``"Wrocław"`` read as cp1252), which no alphabet holds.
    """
    letters = {char for char in set(text) if not char.isascii() and char.isalpha()}
    strays = {char for char in _INSIDE_WORD.findall(text) if _is_stray(char)}
    if not letters and not strays:
        return 1.0
    held = Counter(alphabet for letter in letters for alphabet in _alphabets_of(letter))
    return max(held.values(), default=0) / (len(letters) + len(strays))


def _is_stray(char: str) -> bool:
    """Whether a character is out of place inside a word: a symbol, a number form, a control character, ¿ or ¡."""
    return unicodedata.category(char) in _STRAY_CATEGORIES or char in "¿¡"


def _alphabets_of(letter: str) -> list[str]:
    """The alphabets a letter belongs to: the Latin-script languages that use it, or its script."""
    script = unicodedata.name(letter, "").split(" ")[0]
    if script == "LATIN":
        return [language for language, alphabet in _ALPHABETS.items() if letter in alphabet]
    return [_SCRIPT_GROUPS.get(script, script)]


def _check_not_binary(text: str) -> None:
    controls = len(_CONTROLS.findall(text))
    if controls > len(text) * _MAX_CONTROL_SHARE:
        raise ConversionError(
            f"not text: {controls} of its {len(text)} characters are control characters (binary data)"
        )
