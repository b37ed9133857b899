"""The fact guard (design §3, invariant I6).

Two near copies that differ in any number, date, version string or negation are different facts, however high
their Jaccard similarity: ``refunds within 30 days`` and ``refunds within 14 days`` are not the same passage.

A *fact token* is a normalized word that holds a digit (``30``, ``v2``, ``float16``, ``2024-05-01``), a number word,
a month or weekday name, or a negation word. Two texts conflict when their fact-token sequences differ.

>>> fact_conflict("store as float16 tensors", "store as float32 tensors")
True
>>> fact_conflict("Refunds are allowed.", "refunds are ALLOWED")
False
"""

from __future__ import annotations

import re
from collections import Counter

from streamdedup.core.normalize import words

__all__ = ["describe_conflict", "describe_fact_difference", "fact_conflict", "fact_tokens"]

_NEGATIONS = frozenset(
    # English
    "no not never none nor neither nothing nobody nowhere cannot without"
    # Spanish, French, German
    " nunca jamás sin ni ningún ninguna ninguno nada nadie tampoco"
    " non ne pas jamais aucun aucune sans rien personne"
    " nein nicht nie kein keine keinen keinem keiner ohne niemals".split()
)

_NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
    " seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand"
    " million billion trillion dozen half quarter double triple once twice first second third"
    " cero uno una dos tres cuatro cinco seis siete ocho nueve diez once doce trece catorce quince dieciséis"
    " veinte treinta cuarenta cincuenta sesenta setenta ochenta noventa cien ciento mil millón millones"
    " primero primera segundo segunda tercero tercera".split()
)

_CALENDAR_WORDS = frozenset(
    # "may" and "mar" are left out: as a verb and a Spanish noun they are far more common than as months.
    "january february march april june july august september october november december"
    " jan feb apr jun jul aug sep sept oct nov dec"
    " monday tuesday wednesday thursday friday saturday sunday"
    " enero febrero marzo abril mayo junio julio agosto septiembre setiembre octubre noviembre diciembre"
    " lunes martes miércoles jueves viernes sábado domingo".split()
)

_VOCABULARY = _NEGATIONS | _NUMBER_WORDS | _CALENDAR_WORDS


_ASCII_DIGIT = re.compile("[0-9]")


def fact_tokens(text: str) -> list[str]:
    """Return the fact tokens of ``text`` in order of appearance."""
    digit = _ASCII_DIGIT.search
    return [
        token
        for token in words(text)
        if token in _VOCABULARY
        or token.endswith("n't")
        or (digit(token) is not None if token.isascii() else any(char.isdigit() for char in token))
    ]


def fact_conflict(a: str, b: str) -> bool:
    """Return whether ``a`` and ``b`` state different facts."""
    return fact_tokens(a) != fact_tokens(b)


def describe_conflict(a: str, b: str) -> str:
    """Return a short human-readable description of how the facts of ``a`` and ``b`` differ."""
    return describe_fact_difference(fact_tokens(a), fact_tokens(b))


def describe_fact_difference(tokens_a: list[str], tokens_b: list[str]) -> str:
    """:func:`describe_conflict` from the two texts' :func:`fact_tokens`."""
    fa, fb = Counter(tokens_a), Counter(tokens_b)
    only_a = sorted((fa - fb).elements())
    only_b = sorted((fb - fa).elements())
    if not only_a and not only_b:
        return "same fact tokens in a different order"
    return f"facts differ: {' '.join(only_a) or '(none)'} vs {' '.join(only_b) or '(none)'}"
