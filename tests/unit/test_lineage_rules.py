"""Lineage rules (streamdedup.core.lineage): which sources are versions of one document, and their order."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from packaging.version import Version
from pydantic import ValidationError

from streamdedup.core.lineage import LineageRule, LineageRules, Membership, order_by_modified, version_key
from streamdedup.errors import ConfigurationError
from streamdedup.settings import Settings

POLICY_RULE = "policies/{name}-v{version}.pdf"


def test_the_seed_policies_form_one_lineage_in_version_order() -> None:
    rules = LineageRules.parse({"policies": [POLICY_RULE]})
    ids = ["policies/travel-v2-final-signed.pdf", "policies/travel-v2.pdf", "policies/travel-v2-final.pdf"]
    members = {source_id: rules.of("policies", source_id) for source_id in ids}
    assert {m.lineage for m in members.values() if m} == {"policies/travel-v{version}.pdf"}
    ordered = sorted(ids, key=lambda source_id: members[source_id].order)  # type: ignore[union-attr]
    assert ordered == [
        "policies/travel-v2.pdf",
        "policies/travel-v2-final.pdf",
        "policies/travel-v2-final-signed.pdf",
    ]
    # Another policy is another lineage; a name with hyphens stays whole before '-v'.
    other = rules.of("policies", "policies/travel-europe-v2.pdf")
    assert other is not None and other.lineage == "policies/travel-europe-v{version}.pdf"


def test_the_plain_policy_rule_orders_the_seed_versions_too() -> None:
    rule = LineageRule("policies/{name}-{version}.pdf")
    keys = [rule.match(f"policies/travel-{v}.pdf") for v in ("v2-final-signed", "v2", "v2-final")]
    assert all(k is not None and k.lineage == "policies/travel-{version}.pdf" for k in keys)
    assert sorted(keys, key=lambda m: m.order) == [keys[1], keys[2], keys[0]]  # type: ignore[union-attr]


def test_django_paths_span_slashes_only_where_written_so() -> None:
    rule = LineageRule("django/{version}/{path...}")
    releases = ["5.0", "4.2", "4.10", "5.0rc1"]
    members = [rule.match(f"django/{r}/topics/db/models.txt") for r in releases]
    assert {m.lineage for m in members if m} == {"django/{version}/topics/db/models.txt"}
    ordered = sorted(zip(members, releases, strict=True), key=lambda pair: pair[0].order)  # type: ignore[union-attr]
    assert [r for _, r in ordered] == ["4.2", "4.10", "5.0rc1", "5.0"]
    assert LineageRule("django/{version}/{path}").match("django/4.2/topics/db/models.txt") is None
    assert LineageRule("django/{version}/{path}").match("django/4.2/index.txt") is not None
    # The version may span slashes too, and stays '{version}' in the lineage's name.
    nested = LineageRule("docs/{version...}/index.txt").match("docs/2024/05/index.txt")
    assert nested == Membership("docs/{version}/index.txt", version_key("2024/05"))


def test_a_source_no_rule_matches_has_no_lineage() -> None:
    rules = LineageRules.parse({"docs": ["django/{version}/{path...}"]})
    assert rules.of("docs", "flask/2.0/index.txt") is None
    assert rules.of("other", "django/4.2/index.txt") is None  # rules are per collection
    assert LineageRules().of("docs", "django/4.2/index.txt") is None
    assert not LineageRules() and rules


def test_the_first_matching_rule_wins() -> None:
    rules = LineageRules.parse(
        {"docs": ["django/{version}/{path...}", {"pattern": "{site}/{page...}", "order": "modified_at"}]}
    )
    first = rules.of("docs", "django/4.2/index.txt", "2024-01-01T00:00:00Z")
    assert first is not None and first.lineage == "django/{version}/index.txt"
    second = rules.of("docs", "flask/index.txt", "2024-01-01T00:00:00Z")
    assert second == Membership(
        "flask/index.txt", order_by_modified("2024-01-01T00:00:00Z", "flask/index.txt")
    )


def test_modified_at_rules_order_by_the_instant_then_the_source_id() -> None:
    rule = LineageRule("exports/{name}/{version...}", order="modified_at")
    early = rule.match("exports/handbook/latest.pdf", "2024-03-01T12:00:00+02:00")
    late = rule.match("exports/handbook/a.pdf", "2024-03-01T11:00:00Z")
    tie = rule.match("exports/handbook/b.pdf", "2024-03-01T11:00:00Z")
    assert early and late and tie and early.lineage == late.lineage == "exports/handbook/{version}"
    assert early.order < late.order < tie.order
    assert version_key("999") < early.order  # every modified_at key after every version key
    with pytest.raises(ValueError, match="modified_at"):
        rule.match("exports/handbook/a.pdf")
    with pytest.raises(ValueError, match="RFC 3339"):
        rule.match("exports/handbook/a.pdf", "yesterday")


def test_lineage_names_escape_braces_so_they_stay_unambiguous() -> None:
    rule = LineageRule("a/{x}/{version}")
    assert rule.match("a/{version}/1") == Membership("a/{{version}}/{version}", version_key("1"))
    assert LineageRule("a/{{b}}/{version}").match("a/{b}/1") == Membership(
        "a/{{b}}/{version}", version_key("1")
    )


@pytest.mark.parametrize(
    ("pattern", "order", "problem"),
    [
        ("", "version", "empty"),
        ("docs/{name}", "version", "needs a {version}"),
        ("docs/{name}{version}", "version", "adjacent"),
        ("docs/{version}/{version}", "version", "appears twice"),
        ("docs/{2x}/{version}", "version", "no placeholder name"),
        ("docs/{}/{version}", "version", "no placeholder name"),
        ("docs/{version", "version", "unmatched '{'"),
        ("docs}/{version}", "version", "unmatched '}'"),
        ("docs/{version}", "newest", "not 'version' or 'modified_at'"),
    ],
)
def test_invalid_patterns_are_refused_naming_the_problem(pattern: str, order: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem.replace("{", r"\{").replace("}", r"\}")) as info:
        LineageRule(pattern, order)  # type: ignore[arg-type]
    assert repr(pattern) in str(info.value)


def test_a_modified_at_rule_needs_no_version() -> None:
    member = LineageRule("wiki/{page}", order="modified_at").match("wiki/home", "2024-01-01T00:00:00Z")
    assert member is not None and member.lineage == "wiki/home"


# The setting.

RULES_JSON = (
    '{"docs": ["django/{version}/{path...}", {"pattern": "wiki/{page}/{version}", "order": "modified_at"}]}'
)


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMDEDUP_LINEAGE_RULES", RULES_JSON)
    settings = Settings()
    assert settings.lineage_rules["docs"][1] == {"pattern": "wiki/{page}/{version}", "order": "modified_at"}
    rules = settings.lineages()
    assert [(r.pattern, r.order) for r in rules.rules["docs"]] == [
        ("django/{version}/{path...}", "version"),
        ("wiki/{page}/{version}", "modified_at"),
    ]
    member = rules.of("docs", "django/4.2/index.txt")
    assert member is not None and member.lineage == "django/{version}/index.txt"


def test_the_setting_is_read_from_a_json_string_and_defaults_to_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMDEDUP_LINEAGE_RULES", raising=False)
    assert Settings().lineage_rules == {} and not Settings().lineages()
    assert Settings(lineage_rules=RULES_JSON).lineages() == LineageRules.parse(
        msgspec.json.decode(RULES_JSON)
    )
    assert Settings(lineage_rules="").lineage_rules == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"docs": [', "lineage_rules is not JSON"),
        (
            '{"docs": ["django/{path...}"]}',
            r"lineage_rules\['docs'\]\[0\]: lineage pattern 'django/\{path...\}'",
        ),
        ('{"docs": ["a/{version}", {"pattern": "b/{x}", "order": "date"}]}', r"lineage_rules\['docs'\]\[1\]"),
        ('{"docs": [{"pattern": "b/{version}", "oder": "version"}]}', r"lineage_rules\['docs'\]\[0\]"),
        ('{"docs": "django/{version}"}', "valid list"),
    ],
)
def test_invalid_settings_name_the_collection_and_the_rule(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv("STREAMDEDUP_LINEAGE_RULES", value)
    with pytest.raises(ValidationError, match=message):
        Settings()


# The order, as properties.

VERSION_LIKE = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.lists(st.sampled_from(["v", "V", "1", "2", "10", "0", ".", "-", "rc", "a", "final", "post", "dev", "+"]),
             max_size=6).map("".join),
)  # fmt: skip


def _pep440() -> st.SearchStrategy[str]:
    number = st.integers(0, 30).map(str)
    release = st.lists(number, min_size=1, max_size=4).map(".".join)
    pre = st.one_of(
        st.just(""), st.tuples(st.sampled_from(["a", "b", "rc", "alpha", "c"]), number).map("".join)
    )
    post = st.one_of(st.just(""), number.map(lambda n: f".post{n}"))
    dev = st.one_of(st.just(""), number.map(lambda n: f".dev{n}"))
    local = st.one_of(
        st.just(""), st.lists(st.sampled_from(["1", "2", "ubuntu", "x"]), min_size=1).map(".".join)
    )
    epoch = st.one_of(st.just(""), st.sampled_from(["1!", "2!"]))
    prefix = st.sampled_from(["", "v"])
    parts = st.tuples(prefix, epoch, release, pre, post, dev, local.map(lambda s: f"+{s}" if s else ""))
    return parts.map("".join)


#: Any text, version-like text and PEP 440 versions, mixed.
ANY_VERSION = st.one_of(VERSION_LIKE, _pep440())


def _cmp(a: object, b: object) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


@settings(max_examples=500)
@given(ANY_VERSION, ANY_VERSION)
def test_the_order_is_total_and_antisymmetric(a: str, b: str) -> None:
    ka, kb = version_key(a), version_key(b)
    assert [ka < kb, ka == kb, ka > kb].count(True) == 1  # no TypeError, one answer
    assert (ka == kb) == (a == b)
    assert _cmp(ka, kb) == -_cmp(kb, ka)


@settings(max_examples=500)
@given(ANY_VERSION, ANY_VERSION, ANY_VERSION)
def test_the_order_is_transitive(a: str, b: str, c: str) -> None:
    for x, y, z in itertools.permutations(map(version_key, (a, b, c))):
        if x <= y and y <= z:
            assert x <= z
        if x < y and y <= z:
            assert x < z


@settings(max_examples=500)
@given(_pep440(), _pep440())
def test_the_order_agrees_with_packaging_on_pep_440_versions(a: str, b: str) -> None:
    va, vb = Version(a), Version(b)
    assume(va != vb)
    assert _cmp(version_key(a), version_key(b)) == _cmp(va, vb)


@given(ANY_VERSION, ANY_VERSION)
def test_encoded_keys_keep_their_order(a: str, b: str) -> None:
    ka, kb = version_key(a), version_key(b)
    for codec in (msgspec.msgpack, msgspec.json):
        da, db = codec.decode(codec.encode(ka)), codec.decode(codec.encode(kb))
        assert _cmp(da, db) == _cmp(ka, kb)


def test_examples_of_the_order() -> None:
    chain = ["0", "final", "1.0.dev1", "1.0a1", "1.0", "1.0.0", "1.0.post1", "1-final", "v1.1", "1.10", "2", "v2",
             "v2-final", "V2-Final-2", "v2-final-10", "v2-final-signed", "1!0.1"]  # fmt: skip
    assert sorted(chain, key=version_key) == chain
    huge = "9" * 40
    assert version_key("9" * 39) < version_key(huge) < version_key(huge + ".1")
    msgspec.msgpack.encode(version_key(huge))
