"""Threshold calibration: what each near-copy threshold would merge and flag on one corpus (design §3, §5).

The corpus (:mod:`streamdedup.query.corpus`) is the set of distinct normalized texts a state holds, or would hold
after a run over some input, each with its live positions, its readers and its rank under the canonical policy.

1. **Candidates.** The engine's MinHash signatures, banded with the banding chosen for J = 0.5
   (:data:`LOWEST_THRESHOLD`, the lowest threshold calibrated), so that pairs across the whole range are found:
   a pair at J = 0.5 shares a band with probability 0.996 under the default parameters. Only texts with at least
   ``min_shingles`` distinct shingles join bands, as in the engine, so every candidate passes the engine's
   length rule.
2. **Verification.** Every candidate pair gets the exact shingle Jaccard and the fact guard, as the engine
   verifies a pair, and the readers rule of I2 (:class:`VerifiedPair`).
3. **Outcome per threshold.** The engine's own decision (:func:`~streamdedup.core.clustering.decide`) is taken
   for every text, best-ranked first, over its verified neighbours at that threshold. A text's choice depends only
   on better-ranked texts, so this is the one outcome a run over the same texts settles on: its canonical chunks,
   near members, ``acl_boundary`` flags (a better canonical whose readers do not cover the text's, I2) and
   ``fact_conflict`` flags (one per text that has a better-ranked conflicting text above the threshold, I6).
   Pair counts are given beside it: a pair of the same facts counts as ``acl_boundary`` when the worse-ranked
   side's readers are not covered by the better-ranked side's, which is what :func:`decide` checks against a
   canonical; whether the engine flags it also depends on the better side being a canonical, which only the
   outcome knows.

Where the outcome may differ from a run: the engine bands for its own threshold and verifies at most
``max_candidates`` candidates per text (the most similar first), so a pair found here may be missed there (and
the other way round, rarely); the engine raises a text's ``fact_conflict`` flag once in the text's life, so a run
whose texts changed over time may have flagged against texts that are gone.

>>> thresholds(0.8)
(0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
>>> thresholds(0.82)[6:10]
(0.8, 0.82, 0.85, 0.9)
>>> [(op.tag, op.a, op.b) for op in word_diff("refunds within 30 days", "refunds within 14 days")]
[('equal', 'refunds within ', 'refunds within '), ('replace', '30 ', '14 '), ('equal', 'days', 'days')]
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdedup.core.clustering import decide
from streamdedup.core.facts import fact_tokens
from streamdedup.core.messages import Info
from streamdedup.core.model import covered
from streamdedup.core.params import EngineParams, choose_bands
from streamdedup.core.policy import CanonicalPolicy
from streamdedup.core.shingles import jaccard_of_sets, shingle_set
from streamdedup.core.signatures import SignatureScheme
from streamdedup.query.corpus import Corpus, CorpusText

__all__ = [
    "BIN_WIDTH",
    "GRID",
    "LOWEST_THRESHOLD",
    "MIN_STEP_PAIRS",
    "RULE",
    "Calibration",
    "DiffOp",
    "Progress",
    "Suggestion",
    "ThresholdRow",
    "VerifiedPair",
    "calibrate",
    "candidate_banding",
    "candidate_pairs",
    "jaccard_histogram",
    "nearest_pairs",
    "outcome",
    "pair_outcome",
    "suggest",
    "thresholds",
    "verify_pairs",
    "word_diff",
]

#: The lowest threshold calibrated; candidate pairs are found with the LSH banding chosen for it.
LOWEST_THRESHOLD = 0.5
#: The thresholds every calibration reports (the current setting is added when it is not one of them).
GRID = tuple(round(LOWEST_THRESHOLD + 0.05 * step, 2) for step in range(10))
#: Width of the bins of the Jaccard histogram.
BIN_WIDTH = 0.05

#: Pairs a step must hold before its share of fact conflicts can stop the suggestion (fewer are noise).
MIN_STEP_PAIRS = 10

#: How the suggested threshold is chosen; the page and the JSON state it.
RULE = (
    "The knee of merged texts against threshold, but never below the point where pairs stating different facts "
    "take over. Knee: over the thresholds from highest to lowest, with both the threshold and the merged-text "
    "count scaled to [0, 1], the threshold where the merge curve lies furthest above the straight line joining "
    "its ends (below it, lowering the threshold adds few merges). Fact limit: going down from the highest "
    "threshold, the lowest one reached before a step whose entering pairs (Jaccard from that threshold up to the "
    f"next higher one) number at least {MIN_STEP_PAIRS} and are mostly fact_conflict pairs; acl_boundary pairs "
    "count with the "
    "pairs of the same facts, since readers do not depend on similarity. The suggestion is the higher of the "
    "two; without a knee (no merges, or a merge curve that never rises above the line) it is the higher of the "
    "current threshold and the fact limit."
)

_WORD = re.compile(r"\S+\s*")

#: Reports progress: what is being done, how much of it is done, and of how much.
Progress = Callable[[str, int, int], None]


def _no_progress(stage: str, done: int, total: int) -> None:
    del stage, done, total


@dataclass(frozen=True, slots=True)
class VerifiedPair:
    """A verified candidate pair: ``better`` is the better-ranked text (the one the other would join)."""

    better: str
    worse: str
    jaccard: float
    fact_conflict: bool  # their fact tokens differ (I6)
    acl_boundary: bool  # the worse side's readers are not all readers of the better side (I2)


@dataclass(frozen=True, slots=True)
class ThresholdRow:
    """What one threshold does to the corpus: pair counts, and the outcome a run settles on."""

    threshold: float
    pairs: int  # verified pairs at or above the threshold (long enough)
    near_pairs: int  # of those: same facts, readers covered
    fact_conflict_pairs: int
    acl_boundary_pairs: int
    merged: int  # texts that join a canonical as near copies
    fact_conflict: int  # flags the engine raises
    acl_boundary: int
    chunks: int  # canonical chunks
    exact: int  # positions that are exact copies of their chunk's canonical position
    near: int  # positions whose text is a near member
    positions: int

    @property
    def reduction(self) -> float:
        """The share of positions that need no chunk of their own: 1 - chunks / positions."""
        return 1.0 - self.chunks / self.positions if self.positions else 0.0


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A suggested threshold with the two figures it was chosen from and the reason, in words."""

    threshold: float
    knee: float | None
    fact_limit: float
    reason: str


@dataclass(frozen=True, slots=True)
class DiffOp:
    """One step of a word diff: ``tag`` is difflib's (equal, replace, delete, insert); words joined by spaces."""

    tag: str
    a: str
    b: str


def thresholds(current: float) -> tuple[float, ...]:
    """Return the calibrated thresholds: the grid, with ``current`` added if it is not on it."""
    if any(abs(current - t) < 1e-9 for t in GRID):
        return GRID
    return tuple(sorted((*GRID, current)))


def candidate_banding(params: EngineParams) -> tuple[int, int]:
    """Return the ``(bands, rows)`` of the candidate search: the engine's choice for :data:`LOWEST_THRESHOLD`."""
    return choose_bands(LOWEST_THRESHOLD, params.num_perm, params.lsh_min_recall)


def candidate_pairs(
    texts: Sequence[CorpusText], params: EngineParams, *, progress: Progress = _no_progress
) -> npt.NDArray[np.int64]:
    """Return the index pairs ``(i, j)``, ``i < j``, of texts that share at least one LSH band.

    A band's bucket is a run of equal ``rows``-value slices of the signatures: the engine's band key names that
    slice by a 64-bit digest, so its buckets are the same (up to digest collisions, which add candidates only).
    """
    bands, rows = candidate_banding(params)
    scheme = SignatureScheme(params.num_perm, params.seed, params.shingle_size)
    signatures = np.empty((len(texts), params.num_perm), dtype=np.uint32)
    distinct = np.zeros(len(texts), dtype=np.int64)
    step = 4096
    for start in range(0, len(texts), step):
        part = texts[start : start + step]
        signatures[start : start + len(part)], distinct[start : start + len(part)] = scheme.signatures(
            [t.norm for t in part]
        )
        progress("signatures", start + len(part), len(texts))
    indexed = np.flatnonzero(distinct >= params.min_shingles)  # shorter texts merge only exactly
    found: list[npt.NDArray[np.int64]] = []
    count = len(texts)
    for band in range(bands):
        block = signatures[indexed, band * rows : (band + 1) * rows]
        order = np.lexsort(block.T[::-1])
        ranked = block[order]
        bounds = np.flatnonzero(np.r_[True, (ranked[1:] != ranked[:-1]).any(axis=1), True])
        shared = np.flatnonzero(np.diff(bounds) >= 2)  # buckets of two texts or more
        for begin, end in zip(bounds[shared].tolist(), bounds[shared + 1].tolist(), strict=True):
            members = np.sort(indexed[order[begin:end]])
            first, second = np.triu_indices(len(members), 1)
            found.append(members[first] * count + members[second])
        progress("bands", band + 1, bands)
    if not found:
        return np.empty((0, 2), dtype=np.int64)
    codes = np.unique(np.concatenate(found))
    return np.stack([codes // count, codes % count], axis=1)


def verify_pairs(
    texts: Sequence[CorpusText],
    candidates: npt.NDArray[np.int64],
    params: EngineParams,
    policy: CanonicalPolicy,
    *,
    progress: Progress = _no_progress,
) -> list[VerifiedPair]:
    """Verify candidate pairs as the engine does (exact shingle Jaccard, fact guard); then the readers rule (I2).

    Pairs come back by Jaccard, highest first (ties by the better, then the worse text's hash).
    """
    shingles: dict[int, frozenset[str]] = {}
    facts: dict[int, tuple[str, ...]] = {}

    def features(index: int) -> tuple[frozenset[str], tuple[str, ...]]:
        if index not in shingles:
            norm = texts[index].norm
            shingles[index], facts[index] = shingle_set(norm, params.shingle_size), tuple(fact_tokens(norm))
        return shingles[index], facts[index]

    verified: list[VerifiedPair] = []
    total = len(candidates)
    for done, (i, j) in enumerate(candidates.tolist(), start=1):
        (set_i, facts_i), (set_j, facts_j) = features(i), features(j)
        a, b = texts[i], texts[j]
        better, worse = (a, b) if policy.better(a.rank, b.rank) else (b, a)
        verified.append(
            VerifiedPair(
                better.content_hash,
                worse.content_hash,
                jaccard_of_sets(set_i, set_j),
                facts_i != facts_j,
                not covered(worse.readers, better.readers),
            )
        )
        if done % 65536 == 0 or done == total:
            progress("verification", done, total)
    verified.sort(key=lambda p: (-p.jaccard, p.better, p.worse))
    return verified


def pair_outcome(pair: VerifiedPair, threshold: float) -> str:
    """Say what the engine makes of a pair at ``threshold``: near, fact_conflict, acl_boundary or below."""
    if pair.jaccard < threshold:
        return "below"
    if pair.fact_conflict:
        return "fact_conflict"
    return "acl_boundary" if pair.acl_boundary else "near"


def outcome(
    texts: Sequence[CorpusText], pairs: Sequence[VerifiedPair], threshold: float, policy: CanonicalPolicy
) -> ThresholdRow:
    """Return the pair counts at ``threshold`` and the clusters the engine's decisions settle on."""
    counts = {"near": 0, "fact_conflict": 0, "acl_boundary": 0}
    better_of: dict[str, list[tuple[str, float]]] = {}
    conflicted: set[str] = set()
    for pair in pairs:
        kind = pair_outcome(pair, threshold)
        if kind == "below":
            continue
        counts[kind] += 1
        if kind == "fact_conflict":
            conflicted.add(pair.worse)  # the worse-ranked side raises the text's one flag
        else:
            better_of.setdefault(pair.worse, []).append((pair.better, pair.jaccard))
    infos: dict[str, Info] = {}
    merged = refused = chunks = exact = near = 0
    for text in sorted(texts, key=lambda t: policy.sort_key(t.rank)):
        key = text.content_hash
        neighbours = [(other, jaccard, infos[other]) for other, jaccard in better_of.get(key, ())]
        decision = decide(text.rank, text.readers, neighbours, policy, first=False)
        if decision is None:  # pragma: no cover - only a first decision waits
            raise AssertionError("a later decision never waits")
        refused += len(decision.refused)
        if decision.role == "member":
            infos[key] = Info(0, "member", text.rank, text.readers, decision.target)
            merged += 1
            near += text.positions
        else:
            infos[key] = Info(0, "canonical", text.rank, text.readers)
            chunks += 1
            exact += text.positions - 1
    return ThresholdRow(
        threshold=threshold,
        pairs=sum(counts.values()),
        near_pairs=counts["near"],
        fact_conflict_pairs=counts["fact_conflict"],
        acl_boundary_pairs=counts["acl_boundary"],
        merged=merged,
        fact_conflict=len(conflicted),
        acl_boundary=refused,
        chunks=chunks,
        exact=exact,
        near=near,
        positions=sum(t.positions for t in texts),
    )


def suggest(rows: Sequence[ThresholdRow], pairs: Sequence[VerifiedPair], current: float) -> Suggestion:
    """Suggest a threshold from the rows of every calibrated threshold, by :data:`RULE`."""
    ordered = sorted(rows, key=lambda r: -r.threshold)
    if not ordered:
        return Suggestion(current, None, current, "no thresholds were calibrated")
    fact_limit, stop = ordered[0].threshold, None
    upper = float("inf")
    for row in ordered:
        entering = [p for p in pairs if row.threshold <= p.jaccard < upper]
        upper = row.threshold
        conflicts = sum(1 for p in entering if p.fact_conflict)
        if len(entering) >= MIN_STEP_PAIRS and conflicts > len(entering) - conflicts:
            stop = (row.threshold, conflicts, len(entering))
            break
        fact_limit = row.threshold
    knee = _knee(ordered)
    if stop is None:
        limit_words = (
            f"no step down to {fact_limit:.2f} holds {MIN_STEP_PAIRS} pairs or more "
            "that are mostly fact conflicts"
        )
    elif stop[0] == ordered[0].threshold:
        limit_words = f"{stop[1]} of the {stop[2]} pairs at the top are fact conflicts already"
    else:
        limit_words = (
            f"below {fact_limit:.2f}, {stop[1]} of the {stop[2]} pairs entering at {stop[0]:.2f} state "
            "different facts"
        )
    if knee is None:
        kept = "kept" if current >= fact_limit else f"raised to {fact_limit:.2f}"
        return Suggestion(
            max(current, fact_limit),
            None,
            fact_limit,
            f"no knee in the merges, so the current threshold is {kept}; {limit_words}",
        )
    chosen = max(knee, fact_limit)
    if knee >= fact_limit:
        reason = f"the knee of merged texts against threshold is at {knee:.2f}; {limit_words}"
    else:
        reason = f"the knee of merged texts is at {knee:.2f}, but {limit_words}"
    return Suggestion(chosen, knee, fact_limit, reason)


def _knee(ordered: Sequence[ThresholdRow]) -> float | None:
    """Return the threshold where the merge curve (highest threshold first) lies furthest above its chord."""
    high, low = ordered[0].threshold, ordered[-1].threshold
    counts = [r.merged for r in ordered]
    least, most = min(counts), max(counts)
    if most == least or high == low:
        return None
    best, found = 0.0, None
    for row in ordered:
        lift = (row.merged - least) / (most - least) - (high - row.threshold) / (high - low)
        if lift > best + 1e-12:
            best, found = lift, row.threshold
    return found


def nearest_pairs(
    pairs: Sequence[VerifiedPair], threshold: float, count: int
) -> tuple[list[VerifiedPair], list[VerifiedPair]]:
    """Return the ``count`` pairs nearest to ``threshold`` at or above it, and below it, nearest first."""
    above = sorted((p for p in pairs if p.jaccard >= threshold), key=lambda p: (p.jaccard, p.better, p.worse))
    below = sorted((p for p in pairs if p.jaccard < threshold), key=lambda p: (-p.jaccard, p.better, p.worse))
    return above[:count], below[:count]


def word_diff(a: str, b: str) -> list[DiffOp]:
    """Return the word-level differences of two texts as difflib's opcodes.

    Words are compared without the whitespace around them; each side's words keep the whitespace that follows
    them, so that either text can be shown with its own line breaks.
    """
    spaced_a, spaced_b = _WORD.findall(a), _WORD.findall(b)
    matcher = difflib.SequenceMatcher(
        None, [w.rstrip() for w in spaced_a], [w.rstrip() for w in spaced_b], autojunk=False
    )
    return [
        DiffOp(tag, "".join(spaced_a[i1:i2]), "".join(spaced_b[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    ]


def jaccard_histogram(pairs: Sequence[VerifiedPair], bins: int = round(1 / BIN_WIDTH)) -> list[int]:
    """Return the number of verified pairs in each of ``bins`` equal bins of [0, 1]."""
    counts = [0] * bins
    for pair in pairs:
        counts[min(int(pair.jaccard * bins + 1e-9), bins - 1)] += 1
    return counts


@dataclass(frozen=True, slots=True)
class Calibration:
    """Everything a calibration found: the corpus, the verified pairs, a row per threshold, samples, a suggestion."""

    params: EngineParams
    corpus: Corpus
    candidates: int
    pairs: tuple[VerifiedPair, ...]
    rows: tuple[ThresholdRow, ...]
    suggestion: Suggestion
    above: tuple[VerifiedPair, ...]
    below: tuple[VerifiedPair, ...]

    @property
    def histogram(self) -> list[int]:
        """Verified pairs per Jaccard bin of width :data:`BIN_WIDTH`."""
        return jaccard_histogram(self.pairs)


def calibrate(
    corpus: Corpus, params: EngineParams, *, samples: int = 10, progress: Progress = _no_progress
) -> Calibration:
    """Find and verify the corpus's candidate pairs, take the outcome at every threshold, and suggest one."""
    policy = CanonicalPolicy(params.canonical_policy)
    texts = corpus.texts
    candidates = candidate_pairs(texts, params, progress=progress)
    pairs = verify_pairs(texts, candidates, params, policy, progress=progress)
    grid = thresholds(params.threshold)
    rows = []
    for done, threshold in enumerate(grid, start=1):
        rows.append(outcome(texts, pairs, threshold, policy))
        progress("thresholds", done, len(grid))
    above, below = nearest_pairs(pairs, params.threshold, samples)
    return Calibration(
        params=params,
        corpus=corpus,
        candidates=len(candidates),
        pairs=tuple(pairs),
        rows=tuple(rows),
        suggestion=suggest(rows, pairs, params.threshold),
        above=tuple(above),
        below=tuple(below),
    )
