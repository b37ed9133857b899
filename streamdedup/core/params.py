"""Engine parameters: everything that changes what the state means.

The state records these parameters and refuses to open under different ones, because signatures, band keys and
merge decisions made under one set are meaningless under another.

>>> p = EngineParams()
>>> (p.bands, p.rows)
(21, 6)
>>> round(candidate_probability(0.8, p.bands, p.rows), 3)
0.998
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from streamdedup.errors import ConfigurationError

__all__ = [
    "DEFAULT_STATE_CACHE_MB",
    "POLICY_CRITERIA",
    "EngineParams",
    "candidate_probability",
    "choose_bands",
    "describe_mismatch",
    "false_positive_area",
]

#: Criteria the canonical policy may order. ``authority``, ``modified_at`` and ``length`` prefer higher values,
#: ``source_id`` prefers the lowest; the content hash always breaks the last tie.
POLICY_CRITERIA = ("authority", "modified_at", "length", "source_id")

#: Version of the state layout and of the normalization, shingle-hash and band-key functions.
STATE_FORMAT = 11

#: Megabytes of the content stage's records a process keeps in memory in front of its RocksDB state
#: (``STREAMDEDUP_STATE_CACHE_MB``; ``streamdedup.store.rocksdb`` says why).
DEFAULT_STATE_CACHE_MB = 1024


def describe_mismatch(stored: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """Say how recorded parameters differ from wanted ones (None if they match), for a refusal message."""
    if stored == wanted:
        return None
    if stored.get("format") != wanted["format"]:
        return f"format {stored.get('format')} (this version reads format {wanted['format']})"
    return ", ".join(
        f"{name}={stored.get(name)!r} (settings say {wanted.get(name)!r})"
        for name in sorted(set(wanted) | set(stored))
        if stored.get(name) != wanted.get(name)
    )


def candidate_probability(jaccard: float, bands: int, rows: int) -> float:
    """Return the probability that two sets with this Jaccard similarity share at least one LSH band."""
    return 1.0 - (1.0 - jaccard**rows) ** bands


def false_positive_area(threshold: float, bands: int, rows: int, steps: int = 400) -> float:
    """Return the integral of the candidate probability below ``threshold`` (expected wasted verifications)."""
    width = threshold / steps
    total = 0.0
    for i in range(steps):
        total += candidate_probability((i + 0.5) * width, bands, rows) * width
    return total


def choose_bands(threshold: float, num_perm: int, min_recall: float) -> tuple[int, int]:
    """Choose LSH ``(bands, rows)`` so a pair at the threshold is a candidate with ``min_recall``.

    Among the splits of ``num_perm`` that reach the recall at ``J = threshold``, the one with the fewest expected
    false candidates below the threshold wins.
    """
    best: tuple[float, int, int] | None = None
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if candidate_probability(threshold, bands, rows) < min_recall:
            continue
        area = false_positive_area(threshold, bands, rows)
        if best is None or area < best[0]:
            best = (area, bands, rows)
    if best is None:
        raise ConfigurationError(
            f"no LSH banding of {num_perm} permutations reaches recall {min_recall} at threshold {threshold}"
        )
    return best[1], best[2]


def _canonical_rules(text: str) -> str:
    """Check lineage rules (JSON) and return them in one spelling: keys sorted, no spaces ('' for none)."""
    if not text:
        return ""
    from streamdedup.core.lineage import LineageRules  # noqa: PLC0415 - it imports the model, which imports these

    try:
        rules = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"lineage_rules is not JSON: {exc}") from exc
    if not isinstance(rules, dict):
        raise ConfigurationError("lineage_rules is a JSON object: collection -> rules")
    LineageRules.parse(rules)
    return json.dumps(rules, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class EngineParams:
    """Parameters of the dedup engine (design §3); all have the design's defaults."""

    shingle_size: int = 5
    num_perm: int = 128
    threshold: float = 0.8
    min_shingles: int = 10
    lsh_min_recall: float = 0.99
    seed: int = 1
    canonical_policy: tuple[str, ...] = POLICY_CRITERIA
    bands: int = field(default=0)
    rows: int = field(default=0)
    max_chunk_chars: int = 2000
    boilerplate_min_docs: int = 20
    boilerplate_fraction: float = 0.5
    boilerplate_max_line_chars: int = 200
    boilerplate_allow: tuple[str, ...] = ()
    max_chunk_sources: int = 100
    max_candidates: int = 100
    #: Each collection's lineage rules (docs/lineages.md), as canonical JSON ('' for none): the source stage places
    #: sources in lineages by them, and the chunks only an outdated member holds are outdated.
    lineage_rules: str = ""

    def __post_init__(self) -> None:
        if self.shingle_size < 1:
            raise ConfigurationError("shingle_size must be at least 1")
        if not 1 <= self.num_perm <= 1024:
            raise ConfigurationError("num_perm must be between 1 and 1024")
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigurationError("threshold must be in (0, 1]")
        if self.min_shingles < 1:
            raise ConfigurationError("min_shingles must be at least 1")
        if not 0.0 < self.lsh_min_recall < 1.0:
            raise ConfigurationError("lsh_min_recall must be in (0, 1)")
        unknown = [c for c in self.canonical_policy if c not in POLICY_CRITERIA]
        if unknown or len(set(self.canonical_policy)) != len(self.canonical_policy):
            raise ConfigurationError(
                f"canonical_policy must be distinct criteria from {', '.join(POLICY_CRITERIA)}; got "
                f"{', '.join(self.canonical_policy)}"
            )
        if self.max_chunk_chars < 100:
            raise ConfigurationError("max_chunk_chars must be at least 100")
        if self.max_chunk_sources < 1 or self.max_candidates < 1:
            raise ConfigurationError("max_chunk_sources and max_candidates must be at least 1")
        if self.boilerplate_min_docs < 0 or not 0.0 < self.boilerplate_fraction <= 1.0:
            raise ConfigurationError("boilerplate_min_docs must be >= 0 and boilerplate_fraction in (0, 1]")
        if (self.bands == 0) != (self.rows == 0):
            raise ConfigurationError("set both bands and rows, or neither")
        if self.bands == 0:
            bands, rows = choose_bands(self.threshold, self.num_perm, self.lsh_min_recall)
            object.__setattr__(self, "bands", bands)
            object.__setattr__(self, "rows", rows)
        elif self.bands * self.rows > self.num_perm:
            raise ConfigurationError("bands * rows must not exceed num_perm")
        object.__setattr__(self, "lineage_rules", _canonical_rules(self.lineage_rules))

    @property
    def recall_at_threshold(self) -> float:
        """Probability that a pair exactly at the threshold becomes a candidate."""
        return candidate_probability(self.threshold, self.bands, self.rows)

    def fingerprint(self) -> dict[str, Any]:
        """Return the parameters as plain data, as recorded in the state."""
        data = asdict(self)
        data["canonical_policy"] = list(self.canonical_policy)
        data["boilerplate_allow"] = list(self.boilerplate_allow)
        data["format"] = STATE_FORMAT
        if not self.lineage_rules:
            del data["lineage_rules"]  # a state of a version before lineages records none, and means the same
        return data
