"""What a stage handler is built from: the engine's parameters, its canonical policy and its signature scheme."""

from __future__ import annotations

from dataclasses import dataclass

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
    #: Whether the band stage also keeps its buckets by member (:mod:`.bands`): what a Kafka worker's changelog
    #: holds instead of the buckets themselves.
    band_members: bool = False

    @classmethod
    def of(cls, params: EngineParams, *, band_members: bool = False) -> StageContext:
        """Build the policy and the signature scheme that ``params`` name."""
        return cls(
            params,
            CanonicalPolicy(params.canonical_policy),
            SignatureScheme(params.num_perm, params.seed, params.shingle_size),
            band_members,
        )
