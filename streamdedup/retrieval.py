"""The safety net's documented import path: :mod:`streamdedup.query.safety_net` holds it.

>>> from streamdedup.retrieval import SafetyNet
>>> SafetyNet.__module__
'streamdedup.query.safety_net'
"""

from streamdedup.query.outdated import outdated_by
from streamdedup.query.safety_net import (
    MMR,
    ChunkLookup,
    Citation,
    Hit,
    Kept,
    MemoryLookup,
    Policy,
    SafetyNet,
    chunk_id_in,
    mmr,
    readable,
)

__all__ = [
    "MMR",
    "ChunkLookup",
    "Citation",
    "Hit",
    "Kept",
    "MemoryLookup",
    "Policy",
    "SafetyNet",
    "chunk_id_in",
    "mmr",
    "outdated_by",
    "readable",
]
