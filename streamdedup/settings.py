"""Settings: one object, read from ``STREAMDEDUP_*`` environment variables and command-line flags.

The CLI builds :class:`Settings` once and passes it down; nothing reads the environment anywhere else.

>>> Settings(threshold=0.9).engine_params().threshold
0.9
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from streamdedup.codec import DEFAULT_MAX_EVENT_BYTES
from streamdedup.core.params import POLICY_CRITERIA, EngineParams
from streamdedup.errors import ConfigurationError

__all__ = ["Settings"]


class Settings(BaseSettings):
    """Every setting of streamdedup, with its environment variable ``STREAMDEDUP_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="STREAMDEDUP_", extra="ignore", frozen=True)

    # Dedup parameters (design §3); the state refuses to open under different ones.
    shingle_size: int = Field(5, ge=1, description="Words per shingle.")
    num_perm: int = Field(128, ge=1, le=1024, description="MinHash permutations.")
    threshold: float = Field(
        0.8, gt=0, le=1, description="Jaccard at or above which a verified pair is near."
    )
    min_shingles: int = Field(10, ge=1, description="Chunks with fewer distinct shingles merge only exactly.")
    lsh_min_recall: float = Field(
        0.99, gt=0, lt=1, description="Candidate probability wanted at J = threshold."
    )
    lsh_bands: int = Field(0, ge=0, description="LSH bands; 0 chooses bands and rows from the recall.")
    lsh_rows: int = Field(0, ge=0, description="LSH rows per band; set together with lsh_bands.")
    seed: int = Field(1, description="Seed of the MinHash permutations.")
    canonical_policy: Annotated[tuple[str, ...], NoDecode] = Field(
        POLICY_CRITERIA, description="Ordered canonical criteria, comma-separated in the environment."
    )

    # Embedded runner.
    batch_size: int = Field(256, ge=1, description="Input events per batch (one atomic state commit each).")
    max_event_bytes: int = Field(
        DEFAULT_MAX_EVENT_BYTES, ge=1024, description="Larger input events are dead-lettered."
    )
    state_dir: Path | None = Field(None, description="Default state directory for run and inspect.")

    @field_validator("canonical_policy", mode="before")
    @classmethod
    def _split_policy(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    def engine_params(self) -> EngineParams:
        """Return the engine parameters these settings describe."""
        try:
            return EngineParams(
                shingle_size=self.shingle_size,
                num_perm=self.num_perm,
                threshold=self.threshold,
                min_shingles=self.min_shingles,
                lsh_min_recall=self.lsh_min_recall,
                seed=self.seed,
                canonical_policy=self.canonical_policy,
                bands=self.lsh_bands,
                rows=self.lsh_rows,
            )
        except ConfigurationError:
            raise
        except (TypeError, ValueError) as exc:  # pragma: no cover - pydantic validated the types already
            raise ConfigurationError(str(exc)) from exc
