"""Talking to Kafka outside the worker: creating topics, guarding engine parameters, reading and writing topics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from streamdedup.contract.cdc import load_feeds
from streamdedup.contract.codec import encode_event, event_key
from streamdedup.core.messages import STAGES
from streamdedup.core.model import InputEvent
from streamdedup.core.output_view import OUTPUT_TOPICS
from streamdedup.core.params import describe_mismatch
from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES, topic_config
from streamdedup.errors import ConfigurationError, StateMismatchError, StreamDedupError
from streamdedup.settings import Settings

__all__ = [
    "KafkaUnavailableError",
    "check_engine_params",
    "consumer_lag",
    "ensure_topics",
    "partitions_of",
    "produce_events",
    "read_to_end",
    "start_reader",
]

logger = logging.getLogger(__name__)


class KafkaUnavailableError(StreamDedupError):
    """The broker cannot be reached or refused a request."""


def _wanted_topics(settings: Settings) -> dict[str, tuple[int, dict[str, str]]]:
    names = settings.topic_names()
    wanted: dict[str, tuple[int, dict[str, str]]] = {
        names.documents: (settings.partitions, {"max.message.bytes": str(MAX_MESSAGE_BYTES)}),
        names.registry: (1, {"cleanup.policy": "compact"}),
    }
    for stage in STAGES:
        wanted[names.stage(stage)] = (settings.partitions, {"max.message.bytes": str(MAX_MESSAGE_BYTES)})
        # Every topic, the changelogs included, exists with its partition count checked before a worker consumes.
        wanted[names.changelog(stage)] = (
            settings.partitions,
            {"cleanup.policy": "compact", "max.message.bytes": str(MAX_MESSAGE_BYTES)},
        )
    for topic in OUTPUT_TOPICS:
        wanted[names.output(topic)] = (settings.partitions, topic_config(topic))
    return wanted


async def ensure_topics(settings: Settings) -> None:
    """Create every topic of the deployment that does not exist; check the internal ones' partitions."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, request_timeout_ms=15000)
    try:
        await admin.start()
    except KafkaError as exc:
        raise KafkaUnavailableError(f"cannot reach Kafka at {settings.broker}: {exc}") from exc
    try:
        wanted = _wanted_topics(settings)
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(
                name, num_partitions=parts, replication_factor=settings.replication_factor, topic_configs=cfg
            )
            for name, (parts, cfg) in wanted.items()
            if name not in existing
        ]
        if settings.feeds is not None:
            for topic in load_feeds(settings.feeds, settings.event_limits()).topics:
                if topic in wanted:  # every topic of the deployment, its changelogs included
                    raise ConfigurationError(
                        f"the feeds file names {topic}, a topic of the deployment itself; a feed reads a "
                        "connector's topic"
                    )
                if topic not in existing:
                    logger.warning(
                        "feed topic %s does not exist yet; it is read once its connector creates it", topic
                    )
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):  # another worker created them first
                await admin.create_topics(missing)
            logger.info("created topics %s", ", ".join(t.name for t in missing))
            await _wait_for_leaders(admin, [t.name for t in missing])
        names = settings.topic_names()
        internal = [topic for stage in STAGES for topic in (names.stage(stage), names.changelog(stage))]
        for description in await admin.describe_topics(internal):
            count = len(description.get("partitions", []))
            if count and count != settings.partitions:
                raise ConfigurationError(
                    f"topic {description['topic']} has {count} partitions but STREAMDEDUP_PARTITIONS is "
                    f"{settings.partitions}; the state is partitioned by it, so use {count} or a new topic prefix"
                )
    finally:
        await admin.close()


async def _wait_for_leaders(admin: AIOKafkaAdminClient, topics: list[str], timeout: float = 15.0) -> None:
    """Wait until every partition of new topics has a leader, so the first reads and writes succeed."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        descriptions = await admin.describe_topics(topics)
        if all(
            d.get("partitions") and all(p.get("leader", -1) >= 0 for p in d["partitions"])
            for d in descriptions
        ):
            return
        await asyncio.sleep(0.2)


async def partitions_of(settings: Settings, topics: Iterable[str]) -> dict[str, list[int]]:
    """Return the partition numbers of each topic that exists (a missing topic is left out)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    try:
        await admin.start()
    except KafkaError as exc:
        raise KafkaUnavailableError(f"cannot reach Kafka at {settings.broker}: {exc}") from exc
    try:
        found = {}
        for description in await admin.describe_topics(list(topics)):
            parts = sorted(p["partition"] for p in description.get("partitions", []))
            if parts and not description.get("error_code"):
                found[description["topic"]] = parts
        return found
    finally:
        await admin.close()


async def consumer_lag(settings: Settings, topics: Iterable[str]) -> int:
    """Return how many messages of ``topics`` the worker group has not yet committed (-1: cannot tell yet)."""
    names = settings.topic_names()
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        try:
            committed = await admin.list_consumer_group_offsets(names.group)
        except KafkaError:
            return -1  # the group coordinator is not ready yet
        wanted = list(topics)
        found = await partitions_of(settings, wanted)
        if set(found) != set(wanted):
            return -1  # not created yet
        partitions = [TopicPartition(topic, p) for topic in wanted for p in found[topic]]
        ends = await consumer.end_offsets(partitions) if partitions else {}
        lag = 0
        for tp in partitions:
            done = committed.get(tp)
            lag += ends[tp] - (done.offset if done is not None and done.offset >= 0 else 0)
        return lag
    finally:
        await consumer.stop()
        await admin.close()


async def start_reader(settings: Settings, *, group_id: str | None = None) -> AIOKafkaConsumer:
    """Return a started consumer that reads from the earliest offset and commits nothing by itself."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
        fetch_max_bytes=4 * MAX_MESSAGE_BYTES,
    )
    try:
        await consumer.start()
    except KafkaError as exc:
        raise KafkaUnavailableError(f"cannot reach Kafka at {settings.broker}: {exc}") from exc
    return consumer


async def produce_events(settings: Settings, events: Sequence[InputEvent]) -> None:
    """Send input events to the documents topic (keyed as ``produce`` keys them) and wait until the broker has them."""
    await ensure_topics(settings)
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, acks="all", max_request_size=MAX_MESSAGE_BYTES
    )
    try:
        await producer.start()
    except KafkaError as exc:
        raise KafkaUnavailableError(f"cannot reach Kafka at {settings.broker}: {exc}") from exc
    try:
        topic = settings.topic_names().documents
        sent = [await producer.send(topic, encode_event(e), key=event_key(e).encode("utf-8")) for e in events]
        await asyncio.gather(*sent)
    except KafkaError as exc:
        raise KafkaUnavailableError(f"Kafka at {settings.broker} refused the events: {exc}") from exc
    finally:
        await producer.stop()


async def read_to_end(
    settings: Settings, topics: Iterable[str], *, group_id: str | None = None
) -> AsyncIterator[tuple[str, int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """Yield ``(topic, partition, offset, key, value, headers)`` from the start of each topic to its current end."""
    consumer = await start_reader(settings, group_id=group_id)
    try:
        found = await partitions_of(settings, topics)
        partitions = [TopicPartition(topic, p) for topic, parts in found.items() for p in parts]
        if not partitions:
            return
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        remaining = {tp for tp in partitions if ends[tp] > 0}
        while remaining:
            batches = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, records in batches.items():
                for record in records:
                    if record.offset < ends[tp]:
                        yield (
                            tp.topic,
                            tp.partition,
                            record.offset,
                            record.key,
                            record.value,
                            list(record.headers),
                        )
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()


async def check_engine_params(settings: Settings) -> None:
    """Record the engine parameters of a deployment, or refuse to run under different ones."""
    topic = settings.topic_names().registry
    wanted = settings.engine_params().fingerprint()
    stored: dict[str, Any] | None = None
    async for _, _, _, _, value, _ in read_to_end(settings, [topic]):
        if value is not None:
            stored = json.loads(value)
    if stored is None:
        producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic, json.dumps(wanted, sort_keys=True).encode(), key=b"params")
        finally:
            await producer.stop()
        return
    diffs = describe_mismatch(stored, wanted)
    if diffs is not None:
        raise StateMismatchError(
            f"the deployment with topic prefix {settings.topic_prefix!r} was built with {diffs}; "
            "use those settings or a new topic prefix"
        )


def run(coro: Any) -> Any:
    """Run a coroutine to completion in a fresh event loop."""
    return asyncio.run(coro)
