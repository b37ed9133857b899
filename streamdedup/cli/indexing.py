"""``streamdedup index --into lancedb://DIR``: keep a vector database in step with the outputs.

The outputs are the deployment's ``canonical-chunks`` and ``source-mappings`` topics, or an embedded run's JSONL
output file (``--from FILE``). :class:`~streamdedup.index.writer.IndexWriter` does the work: one row per live
chunk, each distinct text embedded once, metadata-only updates for ACL and source changes, rows deleted with the
chunk's last source, and ``semantic`` review flags for new texts close to an indexed one. The flags of a batch are
delivered before the batch is committed (to the ``review`` topic, or appended to ``--reviews FILE``, by default
the output file itself), so a crash repeats a flag rather than losing it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from rich.console import Console
from rich.progress import DownloadColumn
from rich.table import Table

from streamdedup.cli.materialize import materialize_topics, read_file
from streamdedup.cli.progress import progress_bar
from streamdedup.contract.codec import encode_output_lines, encode_output_value
from streamdedup.core.messages import Output
from streamdedup.core.output_view import COMPACTED_TOPICS
from streamdedup.drivers.kafka.admin import KafkaUnavailableError
from streamdedup.drivers.kafka.delivery import FaultPoints
from streamdedup.drivers.kafka.topics import TopicNames
from streamdedup.errors import ConfigurationError
from streamdedup.index import open_sink
from streamdedup.index.embeddings import embedder_from_spec
from streamdedup.index.writer import IndexCounters, IndexWriter
from streamdedup.query.live_view import Record
from streamdedup.query.output_file import OutputFile
from streamdedup.settings import Settings

__all__ = ["IndexMetrics", "index_command", "index_summary", "writer_directory"]

Deliver = Callable[[Sequence[Output]], None]


def writer_directory(into: str, state: Path | None) -> Path:
    """Return the writer's own directory: ``state``, or ``_writer`` inside the index directory."""
    if state is not None:
        return state
    _, separator, rest = into.partition("://")
    if not separator or not rest:
        raise ConfigurationError(f"unsupported index {into!r}: expected lancedb://DIR")
    return Path(rest).expanduser() / "_writer"


class IndexMetrics:
    """The writer's Prometheus metrics, served on ``port`` when one is given."""

    def __init__(self, port: int | None) -> None:
        self.registry = CollectorRegistry()
        self.embedded = Counter(
            "streamdedup_index_embedding_calls", "Texts sent to the embedder.", registry=self.registry
        )
        self.saved = Gauge(
            "streamdedup_index_embedding_calls_saved",
            "Live source positions the index serves without an embedding of their own.",
            registry=self.registry,
        )
        self.metadata = Counter(
            "streamdedup_index_metadata_updates",
            "Rows updated without embedding again.",
            registry=self.registry,
        )
        self.written = Counter(
            "streamdedup_index_rows_written", "Rows written with a vector.", registry=self.registry
        )
        self.deleted = Counter("streamdedup_index_rows_deleted", "Rows deleted.", registry=self.registry)
        self.flags = Counter(
            "streamdedup_index_review_flags", "Semantic flags raised.", registry=self.registry
        )
        self.rows = Gauge("streamdedup_index_rows", "Rows in the index.", registry=self.registry)
        if port is not None:
            start_http_server(port, registry=self.registry)

    def observe(self, before: IndexCounters, after: IndexCounters) -> None:
        """Count what one batch did."""
        self.embedded.inc(after.embedded - before.embedded)
        self.metadata.inc(after.metadata_updates - before.metadata_updates)
        self.written.inc(after.rows_written - before.rows_written)
        self.deleted.inc(after.rows_deleted - before.rows_deleted)
        self.flags.inc(after.review_flags - before.review_flags)
        self.saved.set(after.embedding_calls_saved)
        self.rows.set(after.rows)


class _FileApplier:
    """Applies records from a file; flags go to ``reviews`` (appended, made durable) before each commit."""

    def __init__(
        self, writer: IndexWriter, reviews: Path, metrics: IndexMetrics, faults: FaultPoints
    ) -> None:
        self.writer, self.reviews, self.metrics, self.faults = writer, reviews, metrics, faults

    def progress(self, where: str) -> bytes | None:
        return self.writer.progress(where)

    def apply(self, records: Sequence[Record], progress: dict[str, bytes]) -> object:
        before = self.writer.totals
        report = self.writer.apply(records, progress, deliver=self._deliver)
        self.metrics.observe(before, report.totals)
        return report

    def _deliver(self, reviews: Sequence[Output]) -> None:
        if reviews:
            with self.reviews.open("ab") as handle:
                handle.write(encode_output_lines(reviews))
                handle.flush()
        self.faults.passed("index-sink-written")


class _TopicApplier:
    """Applies records from the topics in a thread; flags are sent to the review topic before each commit."""

    def __init__(
        self,
        writer: IndexWriter,
        producer: AIOKafkaProducer,
        topic: str,
        metrics: IndexMetrics,
        faults: FaultPoints,
    ) -> None:
        self.writer, self.producer, self.topic, self.metrics = writer, producer, topic, metrics
        self.faults = faults

    def progress(self, where: str) -> bytes | None:
        return self.writer.progress(where)

    async def apply(self, records: Sequence[Record], progress: dict[str, bytes]) -> object:
        loop = asyncio.get_running_loop()

        def deliver(reviews: Sequence[Output]) -> None:
            if reviews:
                asyncio.run_coroutine_threadsafe(self._send(reviews), loop).result()
            self.faults.passed("index-sink-written")

        before = self.writer.totals
        report = await asyncio.to_thread(self.writer.apply, records, progress, deliver=deliver)
        self.metrics.observe(before, report.totals)
        return report

    async def _send(self, reviews: Sequence[Output]) -> None:
        sent = [
            await self.producer.send(
                self.topic,
                key=None if r.key is None else r.key.encode(),
                value=encode_output_value(r),
            )
            for r in reviews
        ]
        await asyncio.gather(*sent)


async def _index_topics(
    settings: Settings, writer: IndexWriter, follow: bool, metrics: IndexMetrics, shown: Callable[[int], None]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    try:
        await producer.start()
    except KafkaError as exc:
        raise KafkaUnavailableError(f"cannot reach Kafka at {settings.broker}: {exc}") from exc
    try:
        review = TopicNames(settings.topic_prefix).output("review")
        applier = _TopicApplier(writer, producer, review, metrics, FaultPoints(settings.fault_kill_at))
        # audit too: the reviewers' decisions, so that a pair kept separate is never flagged again.
        await materialize_topics(
            settings, applier, follow=follow, on_batch=shown, topics=(*COMPACTED_TOPICS, "audit")
        )
    finally:
        await producer.stop()


def index_command(
    settings: Settings,
    into: str,
    state: Path | None,
    source: Path | None,
    follow: bool,
    reviews: Path | None,
    console: Console,
) -> IndexCounters:
    """Bring the index ``into`` up to date with ``source`` (an output file) or the deployment's topics."""
    started = time.monotonic()
    with console.status("loading the embedding model"):
        embedder = embedder_from_spec(settings.embedder, threads=settings.embedder_threads or None)
    sink = open_sink(into, embedder.dimensions, model=embedder.model_id)
    metrics = IndexMetrics(settings.index_port if follow else None)
    try:
        with IndexWriter(
            writer_directory(into, state),
            sink,
            embedder,
            semantic_threshold=settings.semantic_threshold,
            params=settings.engine_params(),
        ) as writer:
            first = writer.totals

            def described(records: int) -> str:
                done = writer.totals
                return f"{records:,} records, {done.embedded - first.embedded:,} texts embedded, {done.rows:,} rows"

            if source is not None:
                faults = FaultPoints(settings.fault_kill_at)
                reader = OutputFile(source, _FileApplier(writer, reviews or source, metrics, faults))
                with progress_bar(console, DownloadColumn(), label="index") as bar:
                    task = bar.add_task(source.name, total=source.stat().st_size, completed=reader.position())

                    def moved(records: int) -> None:
                        bar.update(
                            task,
                            completed=reader.position(),
                            total=max(source.stat().st_size, reader.position()),
                            description=described(records),
                        )

                    read_file(reader, follow, moved, console, into)
            else:
                with console.status("indexing") as status:
                    asyncio.run(
                        _index_topics(
                            settings,
                            writer,
                            follow,
                            metrics,
                            lambda n: status.update(f"indexing: {described(n)}"),
                        )
                    )
            totals = writer.totals
    finally:
        sink.close()
    console.print(index_summary(first, totals, time.monotonic() - started))
    return totals


def index_summary(first: IndexCounters, totals: IndexCounters, seconds: float) -> Table:
    """Return the summary table of an index run: this run's work, and what the index holds."""
    table = Table(title=f"streamdedup index ({seconds:.1f} s)", show_header=True)
    table.add_column("")
    table.add_column("this run", justify="right")
    table.add_column("all runs", justify="right")
    for label, name in (
        ("embedding calls made", "embedded"),
        ("rows written", "rows_written"),
        ("metadata-only updates", "metadata_updates"),
        ("rows deleted", "rows_deleted"),
        ("semantic flags", "review_flags"),
    ):
        now, then = getattr(totals, name), getattr(first, name)
        table.add_row(label, f"{now - then:,}", f"{now:,}")
    table.add_row("embedding calls saved by dedup", "", f"{totals.embedding_calls_saved:,}")
    table.add_row("rows in the index", "", f"{totals.rows:,}")
    return table
