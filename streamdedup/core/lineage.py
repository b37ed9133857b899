"""Lineages: the versions of one document, told apart by rules on their source ids, and the order of those versions.

A rule is a pattern: literal text and named placeholders. ``{name}`` matches one or more characters other than
``/``; ``{name...}`` matches one or more of any character, ``/`` included. ``{{`` and ``}}`` stand for a literal brace.
The placeholder ``{version}`` (or ``{version...}``) is the member's place in its lineage; the others name the lineage.
A source id matches a rule when the whole of it matches the pattern; where it could be split in more than one way,
each placeholder takes as few characters as it can, the first one first.

>>> rule = LineageRule("policies/{name}-{version}.pdf")
>>> member = rule.match("policies/travel-v2-final.pdf")
>>> member.lineage
'policies/travel-{version}.pdf'
>>> [m.lineage for m in map(rule.match, ["policies/travel-v2.pdf", "policies/travel.pdf"]) if m]
['policies/travel-{version}.pdf']
>>> sorted(["5.0", "4.10", "v2-final", "5.0rc1", "4.2", "v2"], key=version_key)
['v2', 'v2-final', '4.2', '4.10', '5.0rc1', '5.0']

The member order (:func:`version_key`) is a total order over all strings: see docs/lineages.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from packaging.version import Version

from streamdedup.core.model import parse_timestamp
from streamdedup.errors import ConfigurationError

__all__ = [
    "LineageRule",
    "LineageRules",
    "Membership",
    "Order",
    "OrderKey",
    "order_by_modified",
    "ordered_versions",
    "version_key",
]

#: How the members of a rule's lineages are ordered.
Order = Literal["version", "modified_at"]
#: A member's place in its lineage: a tuple of ints, strings and such tuples. Any two compare without a TypeError,
#: and they keep their order when encoded (msgpack or JSON arrays decode to lists, which compare alike).
OrderKey: TypeAlias = tuple[object, ...]

#: The marker that stands for the version in a lineage's name.
VERSION = "version"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]|[^{}]+")
# A natural key's leading release: numbers separated by dots, after an optional 'v'.
_RELEASE = re.compile(r"[vV]?([0-9]+(?:\.[0-9]+)*)")
_RUNS = re.compile(r"[0-9]+|[^0-9]+")
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}


@dataclass(frozen=True)
class Membership:
    """A source's lineage (its rule's pattern, the version left as ``{version}``) and its place there."""

    lineage: str
    order: OrderKey


def _number(digits: str | int) -> tuple[int, str]:
    """A non-negative number as (its digit count, its digits): ordered as the number, of any size, encodable."""
    text = str(digits).lstrip("0") or "0"
    return (len(text), text)


def _release(numbers: Iterable[str | int]) -> tuple[tuple[int, str], ...]:
    parts = [_number(n) for n in numbers]
    while parts and parts[-1] == (1, "0"):  # 1.0 is 1, as PEP 440 has it
        parts.pop()
    return tuple(parts)


def _pep440(version: Version) -> tuple[object, ...]:
    """Packaging's own comparison key of a version (epoch, release, pre, post, dev, local), in simple values."""
    if version.pre is None and version.post is None and version.dev is not None:
        pre: tuple[object, ...] = (0,)  # 1.0.dev0 comes before 1.0a0
    elif version.pre is None:
        pre = (2,)
    else:
        pre = (1, _PRE_RANK[version.pre[0]], _number(version.pre[1]))
    post = (0,) if version.post is None else (1, _number(version.post))
    dev = (1,) if version.dev is None else (0, _number(version.dev))
    local: tuple[object, ...] = (0,)
    if version.local is not None:
        segments = re.split(r"[._-]", version.local)
        local = (1, tuple((1, _number(s)) if s.isdigit() else (0, s.lower()) for s in segments))
    return (pre, post, dev, local)


def _parse(text: str) -> Version | None:
    try:
        return Version(text[1:] if text[:1] in ("v", "V") else text)
    except ValueError:  # InvalidVersion, or a number too long for int()
        return None


def version_key(text: str) -> OrderKey:
    """The order key of a version text: ``(0, epoch, release, kind, rest, text)``.

    A PEP 440 version (after a leading ``v``) has kind 0 and packaging's order; any other text has kind 1, its
    release the numbers it starts with (``v2-final``: 2) and its rest a natural key of what follows: digit runs as
    numbers, other runs case-folded, a prefix before its extensions. The text itself breaks any tie.
    """
    version = _parse(text)
    if version is not None:
        return (0, version.epoch, _release(version.release), 0, _pep440(version), text)
    match = _RELEASE.match(text)
    numbers = match.group(1).split(".") if match else []
    rest = text[match.end() :] if match else text
    runs = tuple((0, _number(run)) if run.isdigit() else (1, run.casefold()) for run in _RUNS.findall(rest))
    return (0, 0, _release(numbers), 1, runs, text)


def order_by_modified(modified_at: str, source_id: str) -> OrderKey:
    """The order key of a member of a ``modified_at`` lineage: ``(1, microseconds since the epoch, source_id)``.

    Raise ValueError if ``modified_at`` is no RFC 3339 timestamp. Every such key comes after every version key.
    """
    return (1, parse_timestamp(modified_at), source_id)


@dataclass(frozen=True)
class _Placeholder:
    name: str
    spans_slash: bool


def _tokens(pattern: str) -> list[str | _Placeholder]:
    """The pattern as literal texts and placeholders; raise ConfigurationError naming what is wrong with it."""
    if not pattern:
        raise ConfigurationError("lineage pattern '' is empty")
    parts: list[str | _Placeholder] = []
    for match in _TOKEN.finditer(pattern):
        token = match.group()
        if token in ("{{", "}}"):
            token = token[0]
        elif token in ("{", "}"):
            raise ConfigurationError(
                f"lineage pattern {pattern!r}: unmatched {token!r} (write {token * 2!r})"
            )
        elif match.group(1) is not None:
            inner = match.group(1)
            name = inner.removesuffix("...")
            if not _NAME.fullmatch(name):
                raise ConfigurationError(f"lineage pattern {pattern!r}: {token!r} is no placeholder name")
            if parts and isinstance(parts[-1], _Placeholder):
                raise ConfigurationError(
                    f"lineage pattern {pattern!r}: placeholders {{{parts[-1].name}}} and {token} are adjacent"
                )
            if any(isinstance(p, _Placeholder) and p.name == name for p in parts):
                raise ConfigurationError(f"lineage pattern {pattern!r}: placeholder {{{name}}} appears twice")
            parts.append(_Placeholder(name, inner.endswith("...")))
            continue
        if parts and isinstance(parts[-1], str):
            parts[-1] += token
        else:
            parts.append(token)
    return parts


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


@dataclass(frozen=True)
class LineageRule:
    """One pattern of source ids and the order of the members of the lineages it names."""

    pattern: str
    order: Order = "version"
    #: Whether a semantic pair between versions of one of its lineages still goes to review (by default the
    #: lineage resolves it).
    review: bool = False
    _parts: tuple[str | _Placeholder, ...] = field(init=False, repr=False, compare=False)
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.order not in ("version", "modified_at"):
            raise ConfigurationError(
                f"lineage pattern {self.pattern!r}: order {self.order!r} is not 'version' or 'modified_at'"
            )
        parts = _tokens(self.pattern)
        versions = sum(isinstance(p, _Placeholder) and p.name == VERSION for p in parts)
        if self.order == "version" and versions != 1:
            raise ConfigurationError(
                f"lineage pattern {self.pattern!r}: needs a {{version}} placeholder (or order 'modified_at')"
            )
        regex = "".join(
            f"(?P<{p.name}>{'.+?' if p.spans_slash else '[^/]+?'})"
            if isinstance(p, _Placeholder)
            else re.escape(p)
            for p in parts
        )
        object.__setattr__(self, "_parts", tuple(parts))
        object.__setattr__(self, "_regex", re.compile(regex, re.DOTALL))

    def lineage_of(self, source_id: str) -> tuple[str, str] | None:
        """The lineage ``source_id`` belongs to under this rule and its version text ('' without one), or None."""
        found = self._regex.fullmatch(source_id)
        if found is None:
            return None
        lineage = "".join(
            (f"{{{VERSION}}}" if p.name == VERSION else _escape(found[p.name]))
            if isinstance(p, _Placeholder)
            else _escape(p)
            for p in self._parts
        )
        return lineage, found.groupdict().get(VERSION) or ""

    def match(self, source_id: str, modified_at: str | None = None) -> Membership | None:
        """The membership of ``source_id`` under this rule, or None if it does not match.

        A ``modified_at`` rule needs the upsert's ``modified_at`` (ValueError without a valid one).
        """
        found = self.lineage_of(source_id)
        if found is None:
            return None
        lineage, version = found
        if self.order == "version":
            return Membership(lineage, version_key(version))
        if modified_at is None:
            raise ValueError(f"lineage rule {self.pattern!r} orders by modified_at, and none was given")
        return Membership(lineage, order_by_modified(modified_at, source_id))


@dataclass(frozen=True)
class LineageRules:
    """Each collection's rules, in order: a source's lineage is the one the first matching rule names."""

    rules: Mapping[str, Sequence[LineageRule]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return any(self.rules.values())

    def of(self, collection: str, source_id: str, modified_at: str | None = None) -> Membership | None:
        """The membership of ``source_id`` in ``collection``, or None if no rule of the collection matches it."""
        for rule in self.rules.get(collection, ()):
            membership = rule.match(source_id, modified_at)
            if membership is not None:
                return membership
        return None

    def of_event(
        self, collection: str, source_id: str, modified_at: str, lineage: str | None, version: str | None
    ) -> Membership | None:
        """The membership of an upsert: the ``lineage`` it names (placed by ``version``, or by ``modified_at``
        without one), else what the collection's rules say."""
        if lineage is not None:
            order = version_key(version) if version is not None else order_by_modified(modified_at, source_id)
            return Membership(lineage, order)
        return self.of(collection, source_id, modified_at)

    def anywhere(self, source_id: str) -> tuple[str, str, LineageRule] | None:
        """The lineage and version text of ``source_id`` under the first rule of any collection that matches it,
        with that rule, or None: for readers of outputs, which do not name a source's collection."""
        for rules in self.rules.values():
            for rule in rules:
                found = rule.lineage_of(source_id)
                if found is not None:
                    return (*found, rule)
        return None

    def members(self, source_ids: Iterable[str]) -> dict[str, tuple[dict[str, str], LineageRule]]:
        """Group ``source_ids`` by the lineage :meth:`anywhere` gives each: per lineage, its members among them
        (source id → version text, or the source id where the rule names no version) and its rule."""
        grouped: dict[str, tuple[dict[str, str], LineageRule]] = {}
        for source_id in source_ids:
            found = self.anywhere(source_id)
            if found is not None:
                lineage, version, rule = found
                grouped.setdefault(lineage, ({}, rule))[0][source_id] = version or source_id
        return grouped

    @classmethod
    def parse(cls, value: Mapping[str, Sequence[object]]) -> LineageRules:
        """Build the rules from the setting's form: collection → [pattern, or {"pattern": ..., "order": ...}]."""
        built: dict[str, tuple[LineageRule, ...]] = {}
        for collection, entries in value.items():
            rules = []
            for index, entry in enumerate(entries):
                where = f"lineage_rules[{collection!r}][{index}]"
                review: object = False
                if isinstance(entry, str):
                    pattern, order = entry, "version"
                elif (
                    isinstance(entry, Mapping)
                    and set(entry) <= {"pattern", "order", "review"}
                    and "pattern" in entry
                ):
                    pattern, order = entry["pattern"], entry.get("order", "version")
                    review = entry.get("review", False)
                else:
                    raise ConfigurationError(
                        f"{where}: {entry!r} is neither a pattern nor an object with 'pattern', 'order' and "
                        "'review'"
                    )
                if not isinstance(pattern, str) or order not in ("version", "modified_at"):
                    raise ConfigurationError(
                        f"{where}: {entry!r} needs a string 'pattern' and an 'order' of 'version' or 'modified_at'"
                    )
                if not isinstance(review, bool):
                    raise ConfigurationError(f"{where}: 'review' is true or false, not {review!r}")
                try:
                    rules.append(
                        LineageRule(pattern, "version" if order == "version" else "modified_at", review)
                    )
                except ConfigurationError as exc:
                    raise ConfigurationError(f"{where}: {exc}") from exc
            built[collection] = tuple(rules)
        return cls(built)


def ordered_versions(versions: Iterable[str]) -> tuple[str, ...]:
    """Return distinct version texts in the member order (:func:`version_key`), oldest first."""
    return tuple(sorted(set(versions), key=version_key))
