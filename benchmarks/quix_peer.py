"""Peer benchmark: exact-only deduplication written as a Quix Streams application, on our broker and our feed.

    python -m benchmarks.quix_peer --bootstrap 127.0.0.1:29092

Runs against a broker that already answers (it starts none). The feed is split into one message per chunk, keyed
by its source_id, with the value ``{"source_id", "position", "text"}``, on ``<prefix>quix-chunks``. The Quix
application is what a user picking Quix Streams for exact deduplication writes: it hashes each chunk (sha256 of
the lowercased text with its whitespace collapsed), re-keys the stream by that hash with ``group_by`` (a
repartition topic), and in a stateful step (RocksDB, changelog topic, Quix's defaults: at-least-once, commit every
5 s) keeps the first source of every hash; for every chunk it writes ``{content_hash, canonical, is_copy}`` to
``<prefix>quix-out``.

What is measured:

* ``produce_seconds``: producing all chunk messages (first send to last acknowledgement), before the
  application starts;
* ``seconds``: from launching the application's process (interpreter start, imports, topic checks and creation,
  group join, state recovery included) until ``<prefix>quix-out`` holds one record per input chunk, read from its
  end offsets every 0.1 s;
* ``cpu_seconds``: user plus system CPU of the application's process over the same span (librdkafka's threads
  included), so ``chunks_per_cpu_s`` holds whatever the number of cores;
* ``startup_seconds`` and ``startup_cpu_seconds``: the part of the above before the application's first record
  on its repartition topic was seen (topic creation, which Quix follows with a fixed one-second wait per batch,
  and the group join); ``processing_chunks_per_s`` and ``processing_chunks_per_cpu_s`` divide the chunks by the
  time and CPU after it, which is what a long-running application sees (on a small feed the startup is most of
  ``seconds``);
* ``output_records``, ``originals`` (outputs with ``is_copy`` false) and ``distinct`` (distinct normalized texts
  in the feed): with no failure they are the number of chunks, and ``originals == distinct``.

The application runs in its own process (``python`` may name another interpreter, e.g. a virtualenv that holds
quixstreams), is stopped with SIGTERM once done (killed if it does not exit in time), and every wait is bounded by
``timeout``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quixstreams.state import State

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = 6000
CHUNKS_PER_DOCUMENT = 5
DISTINCT_SENTENCES = 3000
PARTITIONS = 4
POLL_SECONDS = 0.1
STOP_SECONDS = 30.0
APP_CODE = "import sys; from benchmarks.quix_peer import run_app; run_app(*sys.argv[1:])"


def content_hash(text: str) -> str:
    """Return the sha256 hex digest of ``text`` lowercased with its whitespace collapsed."""
    return hashlib.sha256(" ".join(text.lower().split()).encode()).hexdigest()


def topic_names(prefix: str) -> tuple[str, str]:
    """Return the input and output topics of the peer for ``prefix``."""
    return f"{prefix}quix-chunks", f"{prefix}quix-out"


def group_name(prefix: str) -> str:
    """Return the consumer group of the Quix application for ``prefix``."""
    return f"{prefix}quix-dedup"


def first_source(value: dict[str, Any], state: State[str, Any]) -> dict[str, Any]:
    """Keep the first source of the chunk's content hash in ``state``; say whether this chunk is a copy of it."""
    source = {"source_id": value["source_id"], "position": value["position"]}
    canonical = state.get("canonical")
    if canonical is None:
        canonical = source
        state.set("canonical", canonical)
    return {"content_hash": value["content_hash"], "canonical": canonical, "is_copy": canonical != source}


def run_app(bootstrap: str, prefix: str, state_dir: str) -> None:
    """Run the Quix Streams deduplication application until SIGTERM or SIGINT."""
    from quixstreams import Application

    source, sink = topic_names(prefix)
    app = Application(
        broker_address=bootstrap,
        consumer_group=group_name(prefix),
        auto_offset_reset="earliest",
        state_dir=state_dir,
    )
    chunks = app.topic(source, key_deserializer="str", value_deserializer="json")
    out = app.topic(sink, key_serializer="str", value_serializer="json")

    sdf = app.dataframe(chunks)
    sdf["content_hash"] = sdf["text"].apply(content_hash)
    sdf = sdf[["source_id", "position", "content_hash"]]
    sdf = sdf.group_by("content_hash")
    sdf = sdf.apply(first_source, stateful=True)
    sdf.to_topic(out)
    app.run()


def chunk_messages(documents: list[bytes]) -> list[tuple[bytes, bytes]]:
    """Split JSON input events into one (key, value) message per chunk."""
    messages = []
    for document in documents:
        event = json.loads(document)
        key = event["source_id"].encode()
        for position, text in enumerate(event["chunks"]):
            value = {"source_id": event["source_id"], "position": position, "text": text}
            messages.append((key, json.dumps(value, separators=(",", ":")).encode()))
    return messages


async def _create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    finally:
        await admin.close()


async def _produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> float:
    """Produce ``messages`` to ``topic``; return the seconds from the first send until all are acknowledged."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    try:
        await producer.partitions_for(topic)
        started = time.perf_counter()
        pending = [await producer.send(topic, value, key=key) for key, value in messages]
        await asyncio.gather(*pending)
        return time.perf_counter() - started
    finally:
        await producer.stop()


async def _read_output(bootstrap: str, topic: str, expected: int, timeout: float) -> list[dict[str, Any]]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(records) < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=5000)
            records.extend(json.loads(r.value) for batch in batches.values() for r in batch)
    finally:
        await consumer.stop()
    return records


async def _topics(bootstrap: str) -> set[str]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        return set(await consumer.topics())
    finally:
        await consumer.stop()


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_SECONDS)


def _cpu_seconds(pid: int) -> float:
    try:
        import psutil
    except ImportError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _rate(count: int, seconds: float | None) -> float | None:
    return round(count / seconds, 1) if seconds else None


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


async def run_quix_peer(
    bootstrap: str,
    prefix: str,
    documents: list[bytes],
    partitions: int,
    workdir: Path,
    timeout: float = 600.0,
    python: str | None = None,
) -> dict[str, Any]:
    """Deduplicate ``documents`` with the Quix Streams application and return its throughput and CPU use.

    ``documents`` are JSON input events (``source_id``, ``chunks`` and fields not used here). The topics
    ``<prefix>quix-chunks`` and ``<prefix>quix-out`` are created with ``partitions`` partitions; the application's
    RocksDB state and log go under ``workdir``. ``python`` is the interpreter that runs the application (default:
    this one); it must import quixstreams and this module. Raises ``TimeoutError`` if the application has not
    written one output per chunk within ``timeout`` seconds, ``RuntimeError`` if it exits before that.
    """
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    source, sink = topic_names(prefix)
    messages = chunk_messages(documents)
    distinct = len({content_hash(json.loads(value)["text"]) for _, value in messages})
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "quix-app.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    partitions_in = [TopicPartition(source, p) for p in range(partitions)]
    partitions_out = [TopicPartition(sink, p) for p in range(partitions)]

    await _create_topics(bootstrap, [source, sink], partitions)
    offsets = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    await offsets.start()
    try:
        await offsets.end_offsets(partitions_in + partitions_out)
        produce_seconds = await asyncio.wait_for(_produce(bootstrap, source, messages), timeout)
        with log_path.open("wb") as log:
            launched = time.perf_counter()
            process = subprocess.Popen(
                [python or sys.executable, "-c", APP_CODE, bootstrap, prefix, str(workdir / "state")],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir,
            )  # fmt: skip
        try:
            repartition: list[TopicPartition] = []
            deadline = launched + timeout
            working: float | None = None
            working_cpu = 0.0
            written = 0
            while True:
                if working is None:
                    if not repartition:
                        repartition = [
                            TopicPartition(topic, p)
                            for topic in await offsets.topics()
                            if topic.startswith(f"repartition__{group_name(prefix)}--")
                            for p in range(partitions)
                        ]
                    if repartition and sum((await offsets.end_offsets(repartition)).values()):
                        working, working_cpu = time.perf_counter(), _cpu_seconds(process.pid)
                written = sum((await offsets.end_offsets(partitions_out)).values())
                now = time.perf_counter()
                if written >= len(messages):
                    cpu_seconds = _cpu_seconds(process.pid)
                    seconds = now - launched
                    break
                if process.poll() is not None:
                    raise RuntimeError(
                        f"the Quix application exited with {process.returncode} after {written} of "
                        f"{len(messages)} outputs:\n{_log_tail(log_path)}"
                    )
                if now > deadline:
                    raise TimeoutError(
                        f"the Quix application wrote {written} of {len(messages)} outputs in {timeout} s:\n"
                        f"{_log_tail(log_path)}"
                    )
                await asyncio.sleep(POLL_SECONDS)
        finally:
            await asyncio.to_thread(_stop, process)
    finally:
        await offsets.stop()

    records = await _read_output(bootstrap, sink, written, timeout)
    group = group_name(prefix)
    internal = sorted(t for t in await _topics(bootstrap) if f"__{group}--" in t)
    startup = None if working is None else working - launched
    return {
        "chunks": len(messages),
        "produce_seconds": round(produce_seconds, 3),
        "seconds": round(seconds, 3),
        "chunks_per_s": round(len(messages) / seconds, 1),
        "cpu_seconds": round(cpu_seconds, 3),
        "chunks_per_cpu_s": round(len(messages) / cpu_seconds, 1),
        "startup_seconds": None if startup is None else round(startup, 3),
        "startup_cpu_seconds": None if startup is None else round(working_cpu, 3),
        "processing_chunks_per_s": _rate(len(messages), None if startup is None else seconds - startup),
        "processing_chunks_per_cpu_s": _rate(
            len(messages), None if startup is None else cpu_seconds - working_cpu
        ),
        "output_records": written,
        "originals": sum(not record["is_copy"] for record in records),
        "distinct": distinct,
        "internal_topics": internal,
        "app_exit_code": process.returncode,
    }


def synthetic_documents(
    prefix: str,
    documents: int = DOCUMENTS,
    chunks: int = CHUNKS_PER_DOCUMENT,
    distinct: int = DISTINCT_SENTENCES,
) -> list[bytes]:
    """Return JSON input events of ``chunks`` sentences each, drawn from ``distinct`` English-like sentences."""
    rng = random.Random(3)
    words = (
        "the a an of to in for on with by from at as into over under after before between through about data "
        "stream broker message record topic partition offset consumer producer group state store table window "
        "event source chunk document page section index query search answer model vector token user service "
        "request response cache memory disk file log commit replica leader follower cluster node server client "
        "is are was were be has have had will can may should must does not only also then when while because "
        "quickly slowly often rarely always never every each some many few most all new old first last next "
        "large small fast slow simple complex stable recent exact near same different early late public private"
    ).split()
    pool: set[str] = set()
    while len(pool) < distinct:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(8, 24)))
        pool.add(sentence[0].upper() + sentence[1:] + ".")
    sentences = sorted(pool)
    return [
        json.dumps(
            {"source_id": f"{prefix}doc-{i:06d}", "version": 1, "chunks": rng.choices(sentences, k=chunks)}
        ).encode()
        for i in range(documents)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:29092", help="a broker that already runs")
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parser.add_argument("--documents", type=int, default=DOCUMENTS)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--python", default=None, help="interpreter for the Quix application (default: this one)"
    )
    args = parser.parse_args()

    prefix = f"bench-quix-{uuid.uuid4().hex[:6]}."
    documents = synthetic_documents(prefix, args.documents)
    with tempfile.TemporaryDirectory(prefix="quix-peer-") as workdir:
        try:
            result = asyncio.run(
                run_quix_peer(
                    args.bootstrap,
                    prefix,
                    documents,
                    args.partitions,
                    Path(workdir),
                    args.timeout,
                    args.python,
                )
            )
        except (RuntimeError, TimeoutError, asyncio.TimeoutError) as error:
            raise SystemExit(str(error)) from error
    print(json.dumps({"prefix": prefix, "partitions": args.partitions, **result}, indent=2))


if __name__ == "__main__":
    main()
