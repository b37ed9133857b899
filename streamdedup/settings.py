"""Settings: one object, read from ``STREAMDEDUP_*`` environment variables and command-line flags.

The CLI builds :class:`Settings` once and passes it down; nothing reads the environment anywhere else.

>>> Settings(threshold=0.9).engine_params().threshold
0.9
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from streamdedup.contract.codec import DEFAULT_LIMITS, EventLimits
from streamdedup.convert import ConvertLimits
from streamdedup.core.lineage import LineageRules
from streamdedup.core.params import DEFAULT_STATE_CACHE_MB, EngineParams
from streamdedup.errors import ConfigurationError

if TYPE_CHECKING:
    from streamdedup.drivers.kafka.topics import TopicNames

__all__ = ["Settings"]


#: The engine parameters' defaults, defined once in :class:`EngineParams`.
_ENGINE: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(EngineParams)}


class Settings(BaseSettings):
    """Every setting of streamdedup, with its environment variable ``STREAMDEDUP_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="STREAMDEDUP_", extra="ignore", frozen=True)

    # Dedup parameters (design §3; defaults and checks in EngineParams); the state refuses other ones.
    shingle_size: int = Field(_ENGINE["shingle_size"], ge=1, description="Words per shingle.")
    num_perm: int = Field(_ENGINE["num_perm"], ge=1, le=1024, description="MinHash permutations.")
    threshold: float = Field(
        _ENGINE["threshold"], gt=0, le=1, description="Jaccard at or above which a verified pair is near."
    )
    min_shingles: int = Field(
        _ENGINE["min_shingles"], ge=1, description="Chunks with fewer distinct shingles merge only exactly."
    )
    lsh_min_recall: float = Field(
        _ENGINE["lsh_min_recall"], gt=0, lt=1, description="Candidate probability wanted at J = threshold."
    )
    lsh_bands: int = Field(
        _ENGINE["bands"], ge=0, description="LSH bands; 0 chooses bands and rows from the recall."
    )
    lsh_rows: int = Field(
        _ENGINE["rows"], ge=0, description="LSH rows per band; set together with lsh_bands."
    )
    seed: int = Field(_ENGINE["seed"], description="Seed of the MinHash permutations.")
    canonical_policy: Annotated[tuple[str, ...], NoDecode] = Field(
        _ENGINE["canonical_policy"],
        description="Ordered canonical criteria, comma-separated in the environment.",
    )
    max_chunk_chars: int = Field(
        _ENGINE["max_chunk_chars"], ge=100, description="Longest chunk the chunker makes, in characters."
    )
    boilerplate_min_docs: int = Field(
        _ENGINE["boilerplate_min_docs"],
        ge=0,
        description="Documents a collection needs before lines count as boilerplate (0: never).",
    )
    boilerplate_fraction: float = Field(
        _ENGINE["boilerplate_fraction"],
        gt=0,
        le=1,
        description="Share of documents that makes a line boilerplate.",
    )
    boilerplate_max_line_chars: int = Field(
        _ENGINE["boilerplate_max_line_chars"], ge=1, description="Longer lines are never boilerplate."
    )
    boilerplate_allow: Annotated[tuple[str, ...], NoDecode] = Field(
        _ENGINE["boilerplate_allow"],
        description="Lines never treated as boilerplate, '|'-separated in the environment.",
    )
    max_chunk_sources: int = Field(
        _ENGINE["max_chunk_sources"],
        ge=1,
        description="Sources and members a canonical-chunks record lists (the first in canonical order).",
    )
    max_candidates: int = Field(
        _ENGINE["max_candidates"],
        ge=1,
        description="Near-copy candidates a new text verifies, the most similar by estimated Jaccard.",
    )

    # Bounds on one input event (every driver); an event beyond one is dead-lettered, naming it.
    max_event_bytes: int = Field(
        DEFAULT_LIMITS.bytes,
        ge=1024,
        le=16 * 1024 * 1024 - 65536,  # its dead letter must still fit in one Kafka message
        description="Bytes of one input event (of one file, for a folder).",
    )
    max_event_depth: int = Field(
        DEFAULT_LIMITS.depth, ge=3, le=200, description="JSON nesting depth of an event."
    )
    max_event_chunks: int = Field(DEFAULT_LIMITS.chunks, ge=1, description="Entries in an event's 'chunks'.")
    max_event_chunk_chars: int = Field(
        DEFAULT_LIMITS.chunk_chars, ge=1, description="Characters in one entry of 'chunks'."
    )
    max_event_acl: int = Field(DEFAULT_LIMITS.acl, ge=1, description="Principals in an event's 'acl'.")
    max_event_principal_chars: int = Field(
        DEFAULT_LIMITS.principal_chars, ge=1, description="Characters in one principal."
    )
    max_event_string_chars: int = Field(
        DEFAULT_LIMITS.string_chars, ge=1, description="Characters in 'uri', 'title' and 'collection'."
    )
    # Documents' bytes (a folder's files, upserts with 'data') turned into text: PDF and Office files in processes
    # bounded in time and memory (streamdedup.convert).
    convert_timeout: float = Field(
        ConvertLimits.timeout,
        gt=0,
        description="Seconds one PDF or Office conversion may take; past it, a dead letter.",
    )
    convert_memory_mb: int = Field(
        ConvertLimits.memory_mb,
        ge=64,
        description="Megabytes of memory one PDF or Office conversion may allocate.",
    )
    convert_max_unpacked_bytes: int = Field(
        ConvertLimits.max_unpacked_bytes,
        ge=1024 * 1024,
        description="Bytes a DOCX, PPTX or XLSX file may unpack to (a zip bomb is refused before it is opened).",
    )
    convert_workers: int = Field(
        ConvertLimits.workers,
        ge=0,
        le=64,
        description="Processes converting PDF and Office files (0: one per core, at most 4).",
    )
    # What the engine reports beyond its results (every driver alike); not a parameter, the state does not record it.
    audit_exact_copies: bool = Field(
        False,
        description="Emit an audit merge/exact record for each position that holds a copy of a known text (off: "
        "the source-mappings record says 'exact' all the same).",
    )
    lineage_rules: Annotated[dict[str, list[Any]], NoDecode] = Field(
        {},
        description="Lineage rules (docs/lineages.md): a JSON object mapping a collection to its rules, each a pattern "
        'such as "django/{version}/{path...}" or {"pattern": ..., "order": "version" or "modified_at", "review": '
        "true or false}.",
    )
    fault_source_id: str | None = Field(
        None, description="Testing only: the source stage raises on every event of this source_id."
    )

    # Embedded runner.
    # A batch is one atomic commit. The more copies of a text one batch holds, the fewer times its chunk record and
    # the mappings it changes are rewritten and emitted (as a Kafka Streams cache merges a key's updates within its
    # commit interval): on the five Django releases, batches of 2,048 instead of 256 made a run 1.5 times as fast.
    batch_size: int = Field(2048, ge=1, description="Input events per batch (one atomic state commit each).")
    batch_chars: int = Field(
        32 * 1024 * 1024,
        ge=1,
        description="Characters of document text after which a batch closes early (bounds a batch's memory).",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Processes the embedded runner spreads the engine's partitions over; a state keeps its number.",
    )
    state_dir: Path | None = Field(None, description="Default state directory for run and inspect.")
    state_cache_mb: int = Field(
        DEFAULT_STATE_CACHE_MB,
        ge=0,
        le=1024 * 1024,
        description="Megabytes of the content stage's records a process keeps in memory after reading or writing them "
        "(0: none); `run --workers N` gives each worker an Nth, at least 1.",
    )
    kernels: Literal["auto", "compiled", "python"] = Field(
        "auto",
        description="The engine's kernels: auto (compiled where the package was built with them, else Python), "
        "compiled (an error without them) or python; both give byte-identical outputs and states.",
    )
    folder_acl: Annotated[tuple[str, ...], NoDecode] = Field(
        ("*",), description="ACL of folder files without a sidecar <file>.acl.json, comma-separated."
    )

    # Kafka service (worker, produce, tail, materialize).
    broker: str = Field(
        "kafka://127.0.0.1:9092", description="Kafka bootstrap servers, 'kafka://host:port[;...]'."
    )
    topic_prefix: str = Field(
        "streamdedup.", description="Prefix of every topic, the consumer group and tables."
    )
    partitions: int = Field(
        8, ge=1, description="Partitions of the internal topics (the unit of parallelism)."
    )
    generation: int | None = Field(
        None,
        ge=1,
        description="The generation a worker runs (default 1) and readers read (default: the serving one); "
        "docs/generations.md.",
    )
    replication_factor: int = Field(
        1, ge=1, description="Replication factor of the topics the worker creates."
    )
    data_dir: Path = Field(
        Path("streamdedup-data"), description="Worker directory for the partition stores (RocksDB)."
    )
    web_host: str = Field("127.0.0.1", description="Host of the worker's web server (metrics, health).")
    web_port: int = Field(6066, ge=1, le=65535, description="Port of the worker's web server.")
    max_batch_bytes: int = Field(
        512 * 1024, ge=1024, description="Largest internal batch message before splitting."
    )
    feeds: Path | None = Field(
        None,
        description="TOML file of change-data-capture feeds: connector topics the worker reads beside the "
        "documents topic, and how their rows map onto events (docs/connectors.md).",
    )
    fetch_records: int = Field(
        2000, ge=1, description="Kafka messages a worker takes in one round (one handler call per partition)."
    )
    fetch_wait: float = Field(0.05, gt=0, description="Seconds a worker waits for messages to fill a round.")
    internal_compression: str = Field(
        "", description="Compression codec of what the worker sends ('', 'gzip', 'lz4', 'zstd', 'snappy')."
    )
    fault_kill_at: str | None = Field(
        None, description="Testing only: 'point:n' kills the worker the n-th time it passes a fault point."
    )
    commit_interval: float = Field(1.0, gt=0, description="Seconds between consumer offset commits.")
    checkpoint_interval: float = Field(
        0.5,
        gt=0,
        description="Seconds between a worker's checkpoints of a stage partition: its calls' outputs acknowledged, "
        "their changes sent to the changelog and committed with the input they applied.",
    )
    checkpoint_messages: int = Field(
        20_000, ge=1, description="Messages a stage partition's calls may carry before its checkpoint is due."
    )
    # Failover: how soon the group gives a worker's partitions to the others (docs/service.md#failover).
    session_timeout: float = Field(
        6.0,
        ge=1,
        le=3600,
        description="Seconds without a heartbeat after which the group gives a worker's partitions to the others "
        "(the broker allows group.min.session.timeout.ms to group.max.session.timeout.ms: 6 to 1,800 s by default).",
    )
    heartbeat_interval: float = Field(
        0.5,
        gt=0,
        description="Seconds between a worker's heartbeats, at most a third of the session timeout; a rebalance "
        "reaches a worker with its next heartbeat.",
    )
    delivery_timeout: float = Field(
        120.0,
        ge=10,
        le=3600,
        description="Seconds the worker's producer keeps trying to deliver a record batch while Kafka is away or "
        "elects a leader (also the timeout of one request); past it the worker stops, and what it did not apply is "
        "read again after a restart.",
    )
    rebalance_timeout: float = Field(
        60.0,
        ge=1,
        le=3600,
        description="Seconds the group waits in a rebalance for each worker to finish its round in flight, commit and "
        "rejoin; one that takes longer leaves the group.",
    )
    embedder: str = Field(
        "onnx",
        description="Embedding provider of 'index': 'onnx' (all-MiniLM-L6-v2 int8, offline), "
        "'sentence-transformers:<model path or name>' or 'callable:<module>:<attribute>'.",
    )
    embedder_threads: int = Field(
        0,
        ge=0,
        le=1024,
        description="Threads of the onnx embedder of 'index' (0: one per core the process may run on); 1 leaves "
        "the other cores to a dedup worker on the same machine.",
    )
    semantic_threshold: float = Field(
        0.92,
        gt=0,
        le=1,
        description="Cosine at or above which 'index' flags two canonical texts as semantic.",
    )
    index_port: int | None = Field(
        None, ge=1, le=65535, description="Port of the /metrics page of 'index --follow' (none by default)."
    )

    @property
    def bootstrap_servers(self) -> str:
        """Return the broker list as aiokafka wants it: 'host:port,host:port'."""
        return ",".join(part.split("://", 1)[-1] for part in self.broker.replace(",", ";").split(";") if part)

    @field_validator("canonical_policy", "folder_acl", mode="before")
    @classmethod
    def _split_policy(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("lineage_rules", mode="before")
    @classmethod
    def _decode_lineage_rules(cls, value: Any) -> Any:
        if isinstance(value, (str, bytes)):  # the environment's or --set's JSON
            try:
                return json.loads(value or "{}")
            except ValueError as exc:
                raise ValueError(f"lineage_rules is not JSON: {exc}") from exc
        return value

    @field_validator("lineage_rules", mode="after")
    @classmethod
    def _check_lineage_rules(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        try:
            LineageRules.parse(value)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from exc
        return value

    @model_validator(mode="after")
    def _heartbeat_within_session(self) -> Settings:
        if self.heartbeat_interval * 3 > self.session_timeout:
            raise ValueError(
                f"heartbeat_interval ({self.heartbeat_interval} s) must be at most a third of session_timeout "
                f"({self.session_timeout} s)"
            )
        return self

    @field_validator("boilerplate_allow", mode="before")
    @classmethod
    def _split_allow(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split("|") if part.strip())
        return value

    def topic_names(self) -> TopicNames:
        """The topic names of the generation these settings name (generation 1 unless ``generation`` is set)."""
        from streamdedup.drivers.kafka.topics import TopicNames  # noqa: PLC0415 - settings load no Kafka module

        return TopicNames(self.topic_prefix, self.generation or 1)

    def worker_data_dir(self) -> Path:
        """Where a worker of this generation keeps its partition stores: a generation after the first has a
        directory of its own inside ``data_dir``, so generations can share a machine and a data directory."""
        generation = self.generation or 1
        return self.data_dir if generation == 1 else self.data_dir / f"generation-{generation}"

    def with_params(self, fingerprint: dict[str, Any]) -> Settings:
        """These settings with the engine parameters a generation recorded (:meth:`EngineParams.fingerprint`)."""
        renamed = {"bands": "lsh_bands", "rows": "lsh_rows"}
        update = {
            renamed.get(name, name): tuple(value) if isinstance(value, list) else value
            for name, value in fingerprint.items()
            if name != "format"
        }
        return self.model_copy(update=update)

    def event_limits(self) -> EventLimits:
        """Return the bounds on one input event these settings describe."""
        return EventLimits(
            bytes=self.max_event_bytes,
            depth=self.max_event_depth,
            chunks=self.max_event_chunks,
            chunk_chars=self.max_event_chunk_chars,
            acl=self.max_event_acl,
            principal_chars=self.max_event_principal_chars,
            string_chars=self.max_event_string_chars,
        )

    def convert_limits(self) -> ConvertLimits:
        """Return the bounds on converting a document's bytes these settings describe."""
        return ConvertLimits(
            timeout=self.convert_timeout,
            memory_mb=self.convert_memory_mb,
            max_unpacked_bytes=self.convert_max_unpacked_bytes,
            workers=self.convert_workers,
        )

    def lineages(self) -> LineageRules:
        """Return the lineage rules of every collection these settings describe (none by default)."""
        return LineageRules.parse(self.lineage_rules)

    def engine_options(self) -> dict[str, Any]:
        """Return what an :class:`~streamdedup.core.engine.Engine` takes besides its parameters: what it reports and
        its test fault, as every driver builds its engine with them."""
        return {"audit_exact_copies": self.audit_exact_copies, "fault_source_id": self.fault_source_id}

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
                max_chunk_chars=self.max_chunk_chars,
                boilerplate_min_docs=self.boilerplate_min_docs,
                boilerplate_fraction=self.boilerplate_fraction,
                boilerplate_max_line_chars=self.boilerplate_max_line_chars,
                boilerplate_allow=self.boilerplate_allow,
                max_chunk_sources=self.max_chunk_sources,
                max_candidates=self.max_candidates,
                lineage_rules=json.dumps(self.lineage_rules) if self.lineage_rules else "",
            )
        except ConfigurationError:
            raise
        except (TypeError, ValueError) as exc:  # pragma: no cover - pydantic validated the types already
            raise ConfigurationError(str(exc)) from exc
