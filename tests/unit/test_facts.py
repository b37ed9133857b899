import pytest

from streamdedup.core.facts import describe_conflict, fact_conflict, fact_tokens


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("weights are stored as float16 on the device", "weights are stored as float32 on the device"),
        ("refunds within 30 days of delivery", "refunds within 14 days of delivery"),
        ("refunds within thirty days", "refunds within fourteen days"),
        ("see the v2 policy", "see the v3 policy"),
        ("released on 2024-05-01", "released on 2024-06-01"),
        ("the office closes in March", "the office closes in April"),
        ("refunds are allowed after delivery", "refunds are not allowed after delivery"),
        ("you can reset it yourself", "you can't reset it yourself"),
        ("los reembolsos se aceptan", "los reembolsos no se aceptan"),
        ("se paga en 30 días", "se paga en 14 días"),
        ("from 10 to 20 seats", "from 20 to 10 seats"),
    ],
)
def test_different_facts_conflict(a, b):
    assert fact_conflict(a, b)
    assert fact_conflict(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("choose the security tab", "select the security tab"),
        ("Refunds within 30 days.", "refunds WITHIN 30 days"),
        ("the link may expire", "the link will expire"),
    ],
)
def test_same_facts_do_not_conflict(a, b):
    assert not fact_conflict(a, b)


def test_fact_tokens_keep_order():
    assert fact_tokens("not before March 3, not after v2.1") == ["not", "march", "3", "not", "v2.1"]


def test_conflict_description_names_the_differing_facts():
    assert describe_conflict("x float16 y", "x float32 y") == "facts differ: float16 vs float32"
    assert describe_conflict("a 1 b 2", "a 2 b 1") == "same fact tokens in a different order"
