"""Semantic pairs between versions of one document: resolved by the document's lineage, not sent to review.

Versioned documentation holds the same page once per release; an edited paragraph (a changed link, an added
sentence) is a new text, close to the old one, and the writer's semantic search finds the pair. When the two texts
are held by different versions of one lineage (:mod:`streamdedup.core.lineage`, ``STREAMDEDUP_LINEAGE_RULES``),
and no version holds both, the pair is one passage as it changed between versions: the writer records it in
``audit`` (action ``resolved``, reason ``lineage``) instead of asking a reviewer, unless the rule says
``"review": true``. A pair that some version holds both sides of is two passages of one document, and is flagged
as before; so is a pair whose sides share no lineage.

Output records name no collection, so a source id takes the first rule of any collection that matches it
(:meth:`~streamdedup.core.lineage.LineageRules.anywhere`).

>>> from streamdedup.core.lineage import LineageRules
>>> pairs = LineagePairs(LineageRules.parse({"docs": ["docs/{version}/{page...}"]}))
>>> found = pairs.versions(("docs/5.1/intro.txt",), ("docs/5.2/intro.txt", "docs/6.0/intro.txt"))
>>> found.lineage, found.a, found.b
('docs/{version}/intro.txt', ('5.1',), ('5.2', '6.0'))
>>> pairs.versions(("docs/5.1/intro.txt",), ("docs/5.1/intro.txt", "docs/5.2/intro.txt")) is None
True
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streamdedup.core.lineage import LineageRules, ordered_versions
from streamdedup.core.messages import Output
from streamdedup.core.records import audit_value

__all__ = ["LineagePairs", "Versions"]


@dataclass(frozen=True)
class Versions:
    """The lineage two texts are versions of, the versions holding each (in the member order), and whether the
    rule still sends such pairs to review."""

    lineage: str
    a: tuple[str, ...]
    b: tuple[str, ...]
    review: bool


class LineagePairs:
    """Tell which semantic pairs are versions of one lineage (module docs)."""

    def __init__(self, rules: LineageRules) -> None:
        self.rules = rules

    def versions(self, a: Iterable[str], b: Iterable[str]) -> Versions | None:
        """Return the lineage whose members hold the texts of sources ``a`` and ``b``, none holding both, or None."""
        mine, theirs = self.rules.members(a), self.rules.members(b)
        for lineage in sorted(mine.keys() & theirs.keys()):
            (held_a, rule), (held_b, _) = mine[lineage], theirs[lineage]
            if held_a.keys().isdisjoint(held_b.keys()):
                return Versions(
                    lineage, ordered_versions(held_a.values()), ordered_versions(held_b.values()), rule.review
                )
        return None

    @staticmethod
    def audit(key: str, a_hash: str, b_hash: str, versions: Versions) -> Output:
        """Return the ``audit`` record of a pair the lineage resolved (``key``: the pair's review key)."""
        sides = sorted(
            [(a_hash, versions.a), (b_hash, versions.b)]
        )  # a: the lower hash, as in a review record
        detail = f"versions {', '.join(sides[0][1])} and {', '.join(sides[1][1])} of {versions.lineage}"
        return Output(
            "audit",
            key,
            audit_value(
                None,
                "resolved",
                "lineage",
                subject=key,
                lineage=versions.lineage,
                a={"content_hash": sides[0][0], "versions": list(sides[0][1])},
                b={"content_hash": sides[1][0], "versions": list(sides[1][1])},
                detail=detail,
            ),
        )
