"""The calibration sample's statistics: which pairs to show, the precision of merges, and a suggested threshold.

A reviewer judges sample pairs *correct* (one chunk may stand for both texts: merging them is right) or
*incorrect* (they must stay apart). The precision of merges at a threshold is the share of correct verdicts among
the judged pairs the threshold merges: those at or above it that state the same facts (the fact guard keeps the
others apart at any threshold, so their verdicts judge the guard, not the threshold). It is given with a 95%
Wilson score interval, which stays inside [0, 1] and is honest with few verdicts. Everything here is pure.

>>> low, high = wilson_interval(9, 10)
>>> round(low, 3), round(high, 3)
(0.596, 0.982)
>>> merge_precision([Verdict(0.9, True), Verdict(0.85, False), Verdict(0.7, True)], 0.8).correct
1
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from streamdedup.query.calibration import VerifiedPair, nearest_pairs

__all__ = [
    "SAMPLE_SEED",
    "SUGGESTION_RULE",
    "TARGET_PRECISION",
    "Z_95",
    "GuardTally",
    "Precision",
    "ThresholdAdvice",
    "Verdict",
    "draw_sample",
    "guard_tally",
    "merge_precision",
    "suggest_threshold",
    "wilson_interval",
]

#: The normal quantile of a two-sided 95% interval.
Z_95 = 1.959963984540054
#: The precision of merges a suggested threshold must reach, by the Wilson lower bound.
TARGET_PRECISION = 0.95
#: The seed of the sample draw: the same state gives the same sample on every start.
SAMPLE_SEED = 20_240_501

#: How the page's suggested threshold is chosen; the page states it.
SUGGESTION_RULE = (
    "The lowest threshold at which the judged pairs at or above it (fact conflicts left out) reach a precision "
    f"of {TARGET_PRECISION:.2f} by the lower bound of the 95% Wilson interval; the thresholds tried are the "
    "current one and the Jaccard of every judged pair. When none reaches it, the current threshold stays."
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A reviewer's verdict on one pair: its Jaccard, whether merging it is correct, and the fact guard's view."""

    jaccard: float
    correct: bool
    fact_conflict: bool = False


@dataclass(frozen=True, slots=True)
class Precision:
    """The precision of merges at ``threshold``: judged and correct pairs, the estimate and its 95% interval."""

    threshold: float
    judged: int
    correct: int

    @property
    def estimate(self) -> float | None:
        """Correct over judged, or None before any verdict."""
        return self.correct / self.judged if self.judged else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The 95% Wilson score interval, or None before any verdict."""
        return wilson_interval(self.correct, self.judged)


@dataclass(frozen=True, slots=True)
class ThresholdAdvice:
    """The threshold the verdicts suggest, whether the verdicts support it, and why, in words."""

    threshold: float
    supported: bool  # False: no threshold reaches the target yet, so the current one stays
    reason: str


@dataclass(frozen=True, slots=True)
class GuardTally:
    """Verdicts on pairs the fact guard keeps apart: how many were judged, and how many judged incorrect to merge."""

    judged: int
    kept_apart_rightly: int


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float] | None:
    """Return the Wilson score interval of a proportion, or None for no trials.

    >>> wilson_interval(0, 0) is None
    True
    >>> wilson_interval(5, 5)[1]
    1.0
    """
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be within 0..{trials}, not {successes}")
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    # At p = 0 or 1 one bound is exactly 0 or 1; the formula reaches it only up to rounding.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def _counted(verdicts: Sequence[Verdict], threshold: float) -> list[Verdict]:
    return [v for v in verdicts if not v.fact_conflict and v.jaccard >= threshold]


def merge_precision(verdicts: Sequence[Verdict], threshold: float) -> Precision:
    """Return the precision of merges at ``threshold``: verdicts at or above it, fact conflicts left out."""
    counted = _counted(verdicts, threshold)
    return Precision(threshold, len(counted), sum(1 for v in counted if v.correct))


def guard_tally(verdicts: Sequence[Verdict]) -> GuardTally:
    """Return how the verdicts on fact-conflict pairs judge the fact guard."""
    guarded = [v for v in verdicts if v.fact_conflict]
    return GuardTally(len(guarded), sum(1 for v in guarded if not v.correct))


def suggest_threshold(
    verdicts: Sequence[Verdict], current: float, target: float = TARGET_PRECISION
) -> ThresholdAdvice:
    """Suggest a threshold from the verdicts, by :data:`SUGGESTION_RULE`.

    >>> suggest_threshold([Verdict(0.6, True)] * 80, 0.8).threshold
    0.6
    >>> suggest_threshold([Verdict(0.9, True)], 0.8).supported
    False
    """
    tried = sorted({current, *(v.jaccard for v in verdicts if not v.fact_conflict)})
    for threshold in tried:
        precision = merge_precision(verdicts, threshold)
        interval = precision.interval
        if interval is not None and interval[0] >= target:
            return ThresholdAdvice(
                threshold,
                True,
                f"at {threshold:.4f} and above, {precision.correct} of {precision.judged} judged pairs are "
                f"correct merges; the 95% Wilson lower bound {interval[0]:.3f} reaches {target:.2f}",
            )
    at_current = merge_precision(verdicts, current)
    interval = at_current.interval
    if interval is None:
        words = f"no verdict yet on a pair the current threshold {current:.4f} merges"
    else:
        words = (
            f"at the current threshold {current:.4f}, {at_current.correct} of {at_current.judged} judged pairs "
            f"are correct merges, with a 95% Wilson lower bound of {interval[0]:.3f}"
        )
    needed = _all_correct_needed(target)
    return ThresholdAdvice(
        current,
        False,
        f"no threshold reaches {target:.2f} by the lower bound yet ({words}; even all-correct verdicts need "
        f"{needed} pairs to reach it), so the current threshold stays",
    )


def _all_correct_needed(target: float, z: float = Z_95) -> int:
    """Return the fewest verdicts, all correct, whose Wilson lower bound reaches ``target``.

    >>> _all_correct_needed(0.95)
    73
    """
    # With n of n correct, the lower bound is n / (n + z^2).
    return max(1, math.ceil(target * z * z / (1 - target))) if target < 1 else 0


def draw_sample(
    pairs: Sequence[VerifiedPair], threshold: float, count: int, seed: int = SAMPLE_SEED
) -> list[VerifiedPair]:
    """Draw ``count`` pairs around ``threshold``, reproducibly: from the ``count`` nearest on each side of it.

    The pairs come back by Jaccard, highest first.

    >>> pairs = [VerifiedPair(f"b{i}", f"w{i}", i / 100, False, False) for i in range(50, 100)]
    >>> drawn = draw_sample(pairs, 0.8, 6)
    >>> len(drawn), drawn == draw_sample(list(reversed(pairs)), 0.8, 6)
    (6, True)
    >>> all(0.74 <= p.jaccard <= 0.85 for p in drawn)
    True
    """
    if count <= 0:
        return []
    above, below = nearest_pairs(pairs, threshold, count)
    pool = sorted([*above, *below], key=lambda p: (-p.jaccard, p.better, p.worse))
    chosen = pool if len(pool) <= count else random.Random(seed).sample(pool, count)
    return sorted(chosen, key=lambda p: (-p.jaccard, p.better, p.worse))
