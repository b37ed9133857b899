"""What each tab of the console shows, as plain values for its template (no I/O, no HTTP).

- :func:`queue_items`: the review flags, each with both sides completed from the outputs, the words and fact
  tokens that differ, the measure it was flagged at and the decision in force;
- :func:`sample_items` and :func:`calibration_figures`: the calibration sample with the reviewer's verdicts, and
  the precision of merges and suggested threshold the verdicts give;
- the boilerplate tab shows :class:`~streamdedup.review.console.reader.CollectionLines` with each line's decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamdedup.core.lineage import LineageRules, ordered_versions
from streamdedup.query.calibration import VerifiedPair, pair_outcome
from streamdedup.query.corpus import CorpusText
from streamdedup.review.console.data import (
    ConsoleData,
    Decision,
    Flag,
    Side,
    Span,
    differing_facts,
    marked_pair,
    pair_subject,
    similarity_of,
)
from streamdedup.review.console.stats import (
    GuardTally,
    Precision,
    ThresholdAdvice,
    Verdict,
    guard_tally,
    merge_precision,
    suggest_threshold,
)

__all__ = [
    "CalibrationFigures",
    "LineageRow",
    "QueueItem",
    "SampleItem",
    "SideView",
    "calibration_figures",
    "queue_items",
    "sample_items",
]


@dataclass(frozen=True, slots=True)
class SideView:
    """One side of a pair as shown: its record, its text as marked spans, and its fact tokens the other lacks."""

    side: Side
    spans: tuple[Span, ...]
    facts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LineageRow:
    """A lineage (``STREAMDEDUP_LINEAGE_RULES``) that the sources of a pair's sides belong to: the versions holding
    each side, and every version seen on either, in the member order."""

    lineage: str
    a: tuple[str, ...]
    b: tuple[str, ...]

    @property
    def order(self) -> tuple[str, ...]:
        """Every version of the lineage that holds a side, oldest first."""
        return ordered_versions((*self.a, *self.b))


@dataclass(frozen=True, slots=True)
class QueueItem:
    """A review flag as the queue shows it."""

    flag: Flag
    open: bool
    measure: str  # "jaccard" or "cosine"
    similarity: float | None
    a: SideView
    b: SideView
    decision: Decision | None
    lineages: tuple[LineageRow, ...] = ()

    @property
    def key(self) -> str:
        """The flag's key, ``"<hash_a>:<hash_b>"``."""
        return self.flag.key

    @property
    def detail(self) -> str:
        """What the engine says about the pair."""
        return str(self.flag.value.get("detail") or "")


def queue_items(
    data: ConsoleData, flags: Sequence[Flag], texts: Mapping[str, str], lineages: LineageRules | None = None
) -> list[QueueItem]:
    """Return the queue's view of ``flags``; ``texts`` supplies side texts the outputs do not carry, ``lineages``
    the rules that tell which versions of a document each side's sources are."""
    items = []
    for flag in flags:
        sides = [data.side(flag, "a"), data.side(flag, "b")]
        sides = [
            _with_text(s, texts.get(s.content_hash)) if s.text is None and s.content_hash in texts else s
            for s in sides
        ]
        left_text, right_text = sides[0].text, sides[1].text
        if left_text is not None and right_text is not None:
            left, right = marked_pair(left_text, right_text)
            facts = differing_facts(left_text, right_text)
        else:
            left = [Span(left_text or "")]
            right = [Span(right_text or "")]
            facts = ([], [])
        measure, similarity = similarity_of(flag.value)
        items.append(
            QueueItem(
                flag=flag,
                open=data.is_open(flag),
                measure=measure,
                similarity=similarity,
                a=SideView(sides[0], tuple(left), tuple(facts[0])),
                b=SideView(sides[1], tuple(right), tuple(facts[1])),
                decision=data.decision(flag.key),
                lineages=lineage_rows(lineages, sides[0], sides[1]) if lineages else (),
            )
        )
    return items


def lineage_rows(lineages: LineageRules, a: Side, b: Side) -> tuple[LineageRow, ...]:
    """Return the lineages the sources listed on either side belong to, with the versions holding each side.

    Outputs name no collection, so a source takes the first rule of any collection that matches it.
    """
    mine = lineages.members(s.source_id for s in a.sources)
    theirs = lineages.members(s.source_id for s in b.sources)
    return tuple(
        LineageRow(
            lineage,
            ordered_versions(mine.get(lineage, ({}, None))[0].values()),
            ordered_versions(theirs.get(lineage, ({}, None))[0].values()),
        )
        for lineage in sorted(mine.keys() | theirs.keys())
    )


def _with_text(side: Side, text: str | None) -> Side:
    return Side(
        content_hash=side.content_hash,
        text=text,
        acl=side.acl,
        modified_at=side.modified_at,
        sources=side.sources,
        more_sources=side.more_sources,
        chunk_id=side.chunk_id,
        relation=side.relation,
    )


@dataclass(frozen=True, slots=True)
class SampleItem:
    """A calibration sample pair: both texts marked, its Jaccard, what the engine makes of it, the verdict."""

    key: str
    pair: VerifiedPair
    outcome: str  # near, fact_conflict, acl_boundary or below (at the current threshold)
    better: CorpusText
    worse: CorpusText
    better_spans: tuple[Span, ...]
    worse_spans: tuple[Span, ...]
    verdict: str | None
    decision: Decision | None  # a reviewer's decision on the pair in the queue, which overrides the threshold


def sample_items(
    pairs: Sequence[VerifiedPair],
    texts: Mapping[str, CorpusText],
    threshold: float,
    verdicts: Mapping[str, Mapping[str, Any]],
    decisions: Mapping[str, Decision] | None = None,
) -> list[SampleItem]:
    """Return the sample's pairs as the calibration tab shows them, with the verdicts recorded so far.

    ``decisions`` (by pair key) are the reviewers' decisions from the queue, shown beside the engine's outcome.
    """
    items = []
    for pair in pairs:
        better, worse = texts[pair.better], texts[pair.worse]
        left, right = marked_pair(better.text, worse.text)
        key = pair_subject(pair.better, pair.worse)
        given = verdicts.get(key, {}).get("verdict")
        items.append(
            SampleItem(
                key=key,
                pair=pair,
                outcome=pair_outcome(pair, threshold),
                better=better,
                worse=worse,
                better_spans=tuple(left),
                worse_spans=tuple(right),
                verdict=None if given is None else str(given),
                decision=(decisions or {}).get(key),
            )
        )
    return items


@dataclass(frozen=True, slots=True)
class CalibrationFigures:
    """What the verdicts say: the precision of merges now, the threshold they suggest, the fact guard's record."""

    threshold: float
    precision: Precision
    advice: ThresholdAdvice
    guard: GuardTally
    judged: int

    @property
    def precision_words(self) -> str:
        """The estimate in one sentence, the way the page shows it."""
        estimate, interval = self.precision.estimate, self.precision.interval
        if estimate is None or interval is None:
            return (
                f"Estimated precision of merges at the threshold {self.threshold:.2f}: no verdict yet on a pair "
                "it merges."
            )
        return (
            f"Estimated precision of merges at the threshold {self.threshold:.2f}: {estimate:.1%} "
            f"({self.precision.correct} of {self.precision.judged} judged pairs correct), "
            f"95% Wilson interval {interval[0]:.1%} to {interval[1]:.1%}."
        )


def calibration_figures(verdicts: Sequence[Verdict], threshold: float) -> CalibrationFigures:
    """Return the figures the calibration tab shows for ``verdicts`` at the engine's ``threshold``."""
    return CalibrationFigures(
        threshold=threshold,
        precision=merge_precision(verdicts, threshold),
        advice=suggest_threshold(verdicts, threshold),
        guard=guard_tally(verdicts),
        judged=len(verdicts),
    )
