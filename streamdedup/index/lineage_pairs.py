"""Semantic pairs between versions of one document: resolved by the document's lineage, not sent to review.

Versioned documentation holds the same page once per release; an edited paragraph (a changed link, an added
sentence) is a new text, close to the old one, and the writer's semantic search finds the pair. When the two texts
are held only by versions of one lineage (:mod:`streamdedup.core.lineage`, ``STREAMDEDUP_LINEAGE_RULES``), every
source of either text a member, and no version holds both, the pair is one passage as it changed between versions:
the writer records it in ``audit`` (action ``resolved``, reason ``lineage``) instead of asking a reviewer, unless
the rule says ``"review": true``. A pair whose sides share no lineage is flagged as before, and so is one that a
source outside the lineage holds a side of (another page, a copy elsewhere: that text is not only an old version).

The engine's ``fact_conflict`` flags (two near copies that state different facts) are resolved the same way: a
flag whose texts are held only by different versions of one lineage, none holding both, is the fact as it changed
between versions, and the writer writes its ``audit`` record and the flag's tombstone (:meth:`LineagePairs.facts`).
The writer reads the flags from ``review`` with the other outputs; a flag whose texts have no row yet stays open.

Output records name no collection, so a source id takes the first rule of any collection that matches it
(:meth:`~streamdedup.core.lineage.LineageRules.anywhere`).

>>> from streamdedup.core.lineage import LineageRules
>>> pairs = LineagePairs(LineageRules.parse({"docs": ["docs/{version}/{page...}"]}))
>>> found = pairs.versions(("docs/5.1/intro.txt",), ("docs/5.2/intro.txt", "docs/6.0/intro.txt"))
>>> found.lineage, found.a, found.b
('docs/{version}/intro.txt', ('5.1',), ('5.2', '6.0'))
>>> pairs.versions(("docs/5.1/intro.txt",), ("docs/5.1/intro.txt", "docs/5.2/intro.txt")) is None
True
>>> pairs.versions(("docs/5.1/intro.txt", "web/faq.txt"), ("docs/5.2/intro.txt",)) is None  # a copy elsewhere
True
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from streamdedup.core.lineage import LineageRules, ordered_versions
from streamdedup.core.messages import Output
from streamdedup.core.records import audit_value
from streamdedup.index.sink import Row
from streamdedup.query.live_view import ViewWriter

__all__ = ["LineagePairs", "Versions"]

# The writer's extras for the engine's fact flags it could not decide yet: the pair's hashes ('' once closed), and
# an entry per text, by which a batch that gives the text a row finds the flag.
_OPEN = "lineages:fact:"
_BY_TEXT = "lineages:fact-by:"


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
        """Return the lineage whose members are every source of the texts ``a`` and ``b`` hold, none holding both,
        or None: a text that a source outside the lineage also holds (another page, a copy elsewhere) is not only a
        version of this document, and its pair is left to a reviewer."""
        sources_a, sources_b = set(a), set(b)
        mine, theirs = self.rules.members(sources_a), self.rules.members(sources_b)
        if len(mine) != 1 or mine.keys() != theirs.keys():
            return None
        lineage = next(iter(mine))
        (held_a, rule), (held_b, _) = mine[lineage], theirs[lineage]
        if (
            held_a.keys() != sources_a
            or held_b.keys() != sources_b
            or not held_a.keys().isdisjoint(held_b.keys())
        ):
            return None
        return Versions(
            lineage, ordered_versions(held_a.values()), ordered_versions(held_b.values()), rule.review
        )

    def facts(
        self,
        records: Sequence[tuple[str, str, bytes | None]],
        view: ViewWriter,
        touched: Collection[str],
        row_of: Callable[[str], Row | None],
    ) -> tuple[list[Output], dict[str, bytes | None]]:
        """Resolve the engine's ``fact_conflict`` flags whose texts (their rows, by ``row_of``) are versions of one
        lineage: those in ``records``, and those ``view`` kept open from earlier batches whose texts are among the
        ``touched`` chunk ids.

        Return each resolved flag's ``audit`` record and tombstone, and the extras to commit with the batch: flags
        still open (a text without a row yet: the flag comes before the newer text's records), and the deletion of
        those decided since (None).
        """
        flags: dict[str, tuple[str, str] | None] = {}
        # The flags waiting for a text's row are few: one scan of them all, not one per chunk the batch touched.
        for name in view.extra_names(_BY_TEXT):
            text, key = name[len(_BY_TEXT) :].split(":", 1)
            held = view.extra(_OPEN + key) if text in touched else None
            if held:
                first, second = held.decode().split(":")
                flags[key] = (first, second)
        for topic, key, raw in records:
            if topic == "review":
                flag = None if raw is None else json.loads(raw)
                if flag is None or flag.get("reason") == "fact_conflict":
                    flags[key] = (
                        None if flag is None else (flag["a"]["content_hash"], flag["b"]["content_hash"])
                    )
        resolved: list[Output] = []
        extras: dict[str, bytes | None] = {}
        for key, hashes in flags.items():
            held = view.extra(_OPEN + key)
            if hashes is not None:
                rows = row_of(hashes[0]), row_of(hashes[1])
                if (
                    rows[0] is None or rows[1] is None
                ):  # not decidable yet: looked at when a text gets its row
                    extras[_OPEN + key] = ":".join(hashes).encode()
                    extras.update({f"{_BY_TEXT}{h}:{key}": b"1" for h in hashes})
                    continue
                versions = self.versions(rows[0].source_ids, rows[1].source_ids)
                if versions is not None and not versions.review:
                    resolved.extend([self.audit(key, *hashes, versions), Output("review", key, None)])
            # Decided (resolved, or left to a reviewer), or withdrawn (a tombstone): nothing is kept of the flag.
            if held:
                extras[_OPEN + key] = None
                extras.update({f"{_BY_TEXT}{h}:{key}": None for h in held.decode().split(":")})
        return resolved, extras

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
