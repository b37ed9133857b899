"""Generations of a deployment on Kafka: a second engine under other parameters, built beside the serving one from
the retained record, with no event sent again (docs/generations.md).

The registry is the deployment's compacted ``<prefix>engine-params`` topic. Key ``params`` holds generation 1's
parameters, as it always did; ``generation/N`` holds generation N's record (:class:`Generation`); ``serving``
names the generation readers read. Generation N has its own stage topics, changelogs, output topics and consumer
group (:class:`~streamdedup.drivers.kafka.topics.TopicNames`), and its workers their own stores.

Creating generation N from the serving generation S (:func:`create_generation`) takes a *cut*, in this order:

1. ``X``: S's committed offsets on the input topics (documents and feeds). Everything before them was ingested:
   S committed them only after sending their events to its source stage.
2. ``E``: the end offsets of S's source stage topic. Every event before ``X`` is in it, before ``E``.
3. Wait until S's committed offsets on that topic reach ``E``: S commits a stage partition only after the calls
   before it wrote their changelog records, so S's source changelog now reflects every event before ``X``.
4. Read S's source changelog (the closed calls only, as recovery reads it) and keep the retained entries
   (:mod:`streamdedup.core.retained`): a record of every event before ``X``, and maybe of some after it.
5. Send them to N's source stage topic (the *seed*), then commit ``X`` as N's offsets on the input topics, and mark
   N ``building``: its workers start, apply the seed, then every input event from ``X`` on.

An event after ``X`` that the record already reflects is applied again on top of it, which changes nothing: the
source's version is already at or past it (I4). So N's view is the view of every event under N's parameters. A
crash of N's workers is recovered as any worker's; a crash of this command before step 5 ends leaves N
``seeding`` (its workers refuse to start) and running it again sends the seed again, which is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from streamdedup.contract.cdc import load_feeds
from streamdedup.core.messages import STAGES, Message
from streamdedup.core.params import EngineParams, describe_mismatch
from streamdedup.core.partitioning import partition_for
from streamdedup.core.retained import RETAINED_PREFIX, retained_events
from streamdedup.drivers.kafka.admin import KafkaUnavailableError, ensure_topics, partitions_of, read_to_end
from streamdedup.drivers.kafka.batches import encode_batches
from streamdedup.drivers.kafka.changelog import Replay
from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES, TopicNames
from streamdedup.errors import ConfigurationError, StateError
from streamdedup.settings import Settings

__all__ = [
    "Generation",
    "GenerationStatus",
    "Registry",
    "create_generation",
    "generation_settings",
    "generation_status",
    "read_registry",
    "reader_names",
    "retire_generation",
    "switch_generation",
]

logger = logging.getLogger(__name__)
_RETAINED = RETAINED_PREFIX.encode()


class Generation(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A generation's record in the registry."""

    generation: int
    params: dict[str, Any]
    #: ``seeding`` (being created: its workers refuse to start), ``building`` (its workers run), ``retired``.
    status: str
    created_at: str = ""
    built_from: int | None = None
    #: The input offsets it reads from (topic -> partition -> offset), and the retained events of its seed.
    cut: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)
    seeded: int = 0


class Registry(msgspec.Struct, kw_only=True):
    """What the registry topic holds: every generation's record, and which one serves."""

    generations: dict[int, Generation]
    serving: int = 1

    def live(self) -> list[Generation]:
        """The generations not retired, in order."""
        return [g for _, g in sorted(self.generations.items()) if g.status != "retired"]


class GenerationStatus(msgspec.Struct, kw_only=True):
    """How far a generation's workers are: messages of its topics done and still to do (its group's lag)."""

    generation: int
    status: str
    serving: bool
    params: dict[str, Any]
    done: int
    lag: int  # -1: cannot tell yet (its topics or group do not exist yet)


_encode = msgspec.json.Encoder().encode
_decode_generation = msgspec.json.Decoder(Generation).decode


async def read_registry(settings: Settings) -> Registry:
    """Read the registry (generation 1 alone, serving, where nothing more was recorded)."""
    names = TopicNames(settings.topic_prefix)
    generations: dict[int, Generation] = {}
    serving = 1
    async for _, _, _, key, value, _ in read_to_end(settings, [names.registry]):
        if key is None or value is None:
            continue
        if key == b"params":
            generations[1] = Generation(generation=1, params=json.loads(value), status="building")
        elif key == b"serving":
            serving = int(json.loads(value)["generation"])
        elif key.startswith(b"generation/"):
            found = _decode_generation(value)
            if (
                found.generation == 1 and 1 in generations
            ):  # generation 1's status; its params stay at "params"
                found = msgspec.structs.replace(found, params=generations[1].params)
            generations[found.generation] = found
    return Registry(generations=generations, serving=serving)


async def _write(settings: Settings, records: dict[bytes, bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    try:
        await producer.start()
    except KafkaError as exc:
        raise KafkaUnavailableError(f"cannot reach Kafka at {settings.broker}: {exc}") from exc
    try:
        topic = TopicNames(settings.topic_prefix).registry
        for key, value in records.items():
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


async def _put(settings: Settings, generation: Generation) -> None:
    await _write(settings, {f"generation/{generation.generation}".encode(): _encode(generation)})


async def reader_names(settings: Settings) -> TopicNames:
    """The topics a reader of the outputs reads: the generation the settings name, else the serving one."""
    if settings.generation is not None:
        return settings.topic_names()
    registry = await read_registry(settings)
    return TopicNames(settings.topic_prefix, registry.serving)


async def generation_settings(settings: Settings) -> Settings:
    """The settings of a worker of the generation ``settings`` name: a generation after the first runs under the
    parameters recorded when it was created, whatever the engine settings say."""
    generation = settings.generation or 1
    registry = await read_registry(settings)
    found = registry.generations.get(generation)
    if found is not None and found.status == "retired":
        raise ConfigurationError(f"generation {generation} was retired; its topics and state are gone")
    if generation == 1:
        return settings
    if found is None:
        raise ConfigurationError(
            f"generation {generation} does not exist; create it with 'streamdedup generations create'"
        )
    if found.status == "seeding":
        raise ConfigurationError(
            f"generation {generation} is still being created: run 'streamdedup generations create' to its end first"
        )
    return settings.with_params(found.params)


def _input_topics(settings: Settings) -> list[str]:
    topics = [TopicNames(settings.topic_prefix).documents]
    if settings.feeds is not None:
        topics += load_feeds(settings.feeds, settings.event_limits()).topics
    return topics


class _Kafka:
    """An admin client and a plain consumer, for offsets."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.admin = AIOKafkaAdminClient(
            bootstrap_servers=settings.bootstrap_servers, request_timeout_ms=15000
        )
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False
        )

    async def __aenter__(self) -> _Kafka:
        try:
            await self.admin.start()
            await self.consumer.start()
        except KafkaError as exc:
            await self.__aexit__()
            raise KafkaUnavailableError(f"cannot reach Kafka at {self.settings.broker}: {exc}") from exc
        return self

    async def __aexit__(self, *_: object) -> None:
        with contextlib.suppress(Exception):
            await self.consumer.stop()
        with contextlib.suppress(Exception):
            await self.admin.close()

    async def partitions(self, topics: list[str]) -> list[TopicPartition]:
        found = await partitions_of(self.settings, topics)
        return [TopicPartition(topic, p) for topic in topics for p in found.get(topic, [])]

    async def committed(self, group: str) -> dict[TopicPartition, int]:
        offsets = await self.admin.list_consumer_group_offsets(group)
        return {tp: meta.offset for tp, meta in offsets.items() if meta is not None and meta.offset >= 0}

    async def ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict(await self.consumer.end_offsets(partitions)) if partitions else {}

    async def starts(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict(await self.consumer.beginning_offsets(partitions)) if partitions else {}


async def create_generation(
    settings: Settings,
    params: EngineParams,
    *,
    say: Callable[[str], None] = lambda text: None,
    timeout: float = 600.0,
) -> Generation:
    """Create a generation under ``params`` from the serving one's retained record (the module's steps)."""
    registry = await read_registry(settings)
    old = registry.serving
    if old not in registry.generations:
        raise StateError(
            "the deployment has no serving generation yet: start its workers (generation 1) before building another"
        )
    fingerprint = params.fingerprint()
    pending = [g for g in registry.live() if g.status == "seeding"]
    if pending and describe_mismatch(pending[0].params, fingerprint) is not None:
        raise ConfigurationError(
            f"generation {pending[0].generation} is being created under other parameters; run its creation to its "
            "end with those, or retire it"
        )
    number = pending[0].generation if pending else max(registry.generations) + 1
    generation = Generation(
        generation=number,
        params=fingerprint,
        status="seeding",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        built_from=old,
    )
    await _put(settings, generation)
    new_settings = settings.model_copy(update={"generation": number}).with_params(fingerprint)
    await ensure_topics(new_settings)
    source, target = TopicNames(settings.topic_prefix, old), new_settings.topic_names()
    async with _Kafka(settings) as kafka:
        inputs = await kafka.partitions(_input_topics(settings))
        committed = await kafka.committed(source.group)
        starts = await kafka.starts(inputs)
        cut = {tp: committed.get(tp, starts[tp]) for tp in inputs}
        stage = await kafka.partitions([source.stage("source")])
        ends = await kafka.ends(stage)
        say(f"cut taken; waiting for generation {old}'s workers to apply what came before it")
        deadline = time.monotonic() + timeout
        while True:
            done = await kafka.committed(source.group)
            behind = {tp: end for tp, end in ends.items() if end > 0 and done.get(tp, 0) < end}
            if not behind:
                break
            if time.monotonic() > deadline:
                raise StateError(
                    f"generation {old}'s workers did not apply their source stage up to the cut within {timeout:.0f} s "
                    "(are they running?); nothing was built yet, so run this again when they are"
                )
            await asyncio.sleep(0.5)
    say(f"reading generation {old}'s retained record")
    seed = await _retained_record(settings, source.changelog("source"))
    say(f"sending {len(seed):,} retained events to generation {number}")
    await _send_seed(new_settings, target, seed)
    await _commit(settings, target.group, cut)
    recorded: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(cut.items()):
        recorded.setdefault(tp.topic, {})[str(tp.partition)] = offset
    generation = msgspec.structs.replace(generation, status="building", cut=recorded, seeded=len(seed))
    await _put(settings, generation)
    return generation


async def _retained_record(settings: Settings, changelog: str) -> list[Message]:
    """The retained events of a source stage changelog: the closed calls' latest value of each retained key."""
    replays: dict[int, Replay] = {}
    latest: dict[bytes, bytes | None] = {}
    async for _, partition, offset, key, value, headers in read_to_end(settings, [changelog]):
        replay = replays.setdefault(partition, Replay())
        replay.feed(offset, key or b"", value, headers)
        for call in replay.take():
            for raw, written in call.writes.items():
                if raw.startswith(_RETAINED):
                    latest[raw] = written
    entries = [(k.decode("utf-8", "surrogateescape"), v) for k, v in sorted(latest.items()) if v is not None]
    return list(retained_events(entries))


async def _send_seed(settings: Settings, names: TopicNames, seed: list[Message]) -> None:
    routed: dict[int, list[Message]] = {}
    for event in seed:
        routed.setdefault(partition_for(event.source_id, settings.partitions), []).append(event)  # type: ignore[union-attr]
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        acks="all",
        enable_idempotence=True,
        max_request_size=MAX_MESSAGE_BYTES,
    )
    await producer.start()
    try:
        topic = names.stage("source")
        sent = []
        for partition, batch in sorted(routed.items()):
            for data in encode_batches(batch, max_bytes=settings.max_batch_bytes):
                sent.append(await producer.send(topic, data, partition=partition))
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _commit(settings: Settings, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Commit ``offsets`` for ``group`` (no member of it runs yet)."""
    if not offsets:
        return
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(dict(offsets))
    finally:
        await consumer.stop()


async def generation_status(settings: Settings) -> list[GenerationStatus]:
    """Every generation not retired, with its group's progress over its topics: input and stage topics."""
    registry = await read_registry(settings)
    found: list[GenerationStatus] = []
    async with _Kafka(settings) as kafka:
        inputs = await kafka.partitions(_input_topics(settings))
        for generation in registry.live():
            names = TopicNames(settings.topic_prefix, generation.generation)
            partitions = inputs + await kafka.partitions([names.stage(s) for s in STAGES])
            try:
                committed = await kafka.committed(names.group)
            except KafkaError:
                committed = {}
            ends, starts = await kafka.ends(partitions), await kafka.starts(partitions)
            done = sum(committed.get(tp, starts[tp]) - starts[tp] for tp in partitions)
            lag = sum(ends[tp] - committed.get(tp, starts[tp]) for tp in partitions)
            if generation.status == "seeding":
                lag = -1  # its input offsets are not committed yet: no lag to tell
            found.append(
                GenerationStatus(
                    generation=generation.generation,
                    status=generation.status,
                    serving=generation.generation == registry.serving,
                    params=generation.params,
                    done=done,
                    lag=lag,
                )
            )
    return found


async def switch_generation(settings: Settings, number: int, *, force: bool = False) -> None:
    """Make ``number`` the serving generation; refused unless its lag is 0 (or ``force``)."""
    registry = await read_registry(settings)
    found = registry.generations.get(number)
    if found is None or found.status != "building":
        raise ConfigurationError(f"generation {number} is not a running generation")
    if not force:
        status = {s.generation: s for s in await generation_status(settings)}[number]
        if status.lag != 0:
            raise ConfigurationError(
                f"generation {number} is {status.lag:,} messages behind; readers switch only at lag 0 "
                "('streamdedup generations status --watch' follows it; --force switches anyway)"
            )
    await _write(settings, {b"serving": json.dumps({"generation": number}).encode()})


async def _members(settings: Settings, group: str) -> int:
    """How many consumers the group has now."""
    async with _Kafka(settings) as kafka:
        (response,) = await kafka.admin.describe_consumer_groups([group])
        groups = response.to_object()["groups"]
        return len(groups[0]["members"]) if groups else 0


async def retire_generation(settings: Settings, number: int) -> list[str]:
    """Retire a generation that neither serves nor runs: mark it retired (its workers refuse to start again) and
    delete its topics; return the topics deleted."""
    registry = await read_registry(settings)
    found = registry.generations.get(number)
    if found is None or found.status == "retired":
        raise ConfigurationError(f"generation {number} is not a generation that can be retired")
    if number == registry.serving:
        raise ConfigurationError(
            f"generation {number} serves the readers: switch them to another first ('streamdedup generations switch')"
        )
    names = TopicNames(settings.topic_prefix, number)
    running = await _members(settings, names.group)
    if running:
        raise ConfigurationError(
            f"generation {number} still has {running} worker(s) running: stop them first (their data directories "
            "can then be removed)"
        )
    await _put(settings, msgspec.structs.replace(found, status="retired"))
    existing = await partitions_of(settings, names.own())
    if existing:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, request_timeout_ms=15000)
        await admin.start()
        try:
            await admin.delete_topics(sorted(existing))
        finally:
            await admin.close()
    return sorted(existing)
