"""What a stage handler is built from: the engine's parameters, its canonical policy, its signature scheme and what
it reports beyond its results."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from streamdedup.core.lineage import LineageRules
from streamdedup.core.params import EngineParams
from streamdedup.core.policy import CanonicalPolicy
from streamdedup.core.signatures import SignatureScheme

__all__ = ["StageContext"]


@dataclass(frozen=True)
class StageContext:
    """The parts of the engine a stage reads; stages hold this, not the engine."""

    params: EngineParams
    policy: CanonicalPolicy
    scheme: SignatureScheme
    #: Whether the source stage emits an ``audit`` ``merge``/``exact`` record for each position that holds a copy
    #: (``STREAMDEDUP_AUDIT_EXACT_COPIES``). Not an engine parameter: it changes what is reported, not what the
    #: state means, so a state or a generation is the same with it on or off.
    audit_exact_copies: bool = False
    #: Whether the band stage also keeps its buckets by member (:mod:`.bands`): what a Kafka worker's changelog
    #: holds instead of the buckets themselves.
    band_members: bool = False
    #: The lineage rules of the parameters (``params.lineage_rules``).
    lineages: LineageRules = field(default_factory=LineageRules)

    @classmethod
    def of(
        cls, params: EngineParams, *, audit_exact_copies: bool = False, band_members: bool = False
    ) -> StageContext:
        """Build the policy and the signature scheme that ``params`` name."""
        return cls(
            params,
            CanonicalPolicy(params.canonical_policy),
            SignatureScheme(params.num_perm, params.seed, params.shingle_size),
            audit_exact_copies,
            band_members,
            LineageRules.parse(json.loads(params.lineage_rules)) if params.lineage_rules else LineageRules(),
        )
