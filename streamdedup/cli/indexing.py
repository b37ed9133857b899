"""``streamdedup index --into lancedb://DIR``: keep a vector database in step with the outputs.

The outputs are the deployment's ``canonical-chunks`` and ``source-mappings`` topics, or an embedded run's JSONL
output file (``--from FILE``). :class:`~streamdedup.index.writer.IndexWriter` does the work: one row per live
chunk, each distinct text embedded once, metadata-only updates for ACL and source changes, rows deleted with the
chunk's last source, and ``semantic`` review flags for new texts close to an indexed one (versions of one lineage
are recorded in ``audit`` as resolved instead). The flags of a batch are delivered before the batch is committed
(to the ``review`` topic, or appended to ``--reviews FILE``, by default the output file itself), so a crash
repeats a flag rather than losing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from aiokafka import AIOKafkaProducer, TopicPartition
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
from streamdedup.drivers.kafka.admin import KafkaUnavailableError, partitions_of, start_reader
from streamdedup.drivers.kafka.delivery import FaultPoints
from streamdedup.drivers.kafka.generations import read_registry
from streamdedup.drivers.kafka.topics import TopicNames
from streamdedup.errors import ConfigurationError
from streamdedup.index import open_sink
from streamdedup.index.catalog import read_catalog, updating
from streamdedup.index.embeddings import Embedder, embedder_from_spec
from streamdedup.index.lancedb import drop_table
from streamdedup.index.sink import Sink
from streamdedup.index.writer import IndexCounters, IndexWriter
from streamdedup.query.live_view import Record
from streamdedup.query.output_file import OutputFile
from streamdedup.settings import Settings

__all__ = ["IndexMetrics", "index_command", "index_summary", "writer_directory"]

Deliver = Callable[[Sequence[Output]], None]


#: Lines of an output file applied as one batch: the model embeds a batch's new texts in one call, and calls of a few
#: hundred texts took 6-8% more model time than calls of thousands (the index benchmark's sample).
FILE_BATCH_LINES = 5000


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
    """Applies records from the topics in a thread; flags (and lineage audits) are sent before each commit."""

    def __init__(
        self,
        writer: IndexWriter,
        producer: AIOKafkaProducer,
        topic: Callable[[str], str],
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
                self.topic(r.topic),
                key=None if r.key is None else r.key.encode(),
                value=encode_output_value(r),
            )
            for r in reviews
        ]
        await asyncio.gather(*sent)


@dataclass
class _Build:
    """One table of the index being kept up to date: a generation's outputs, embedded by this process's model."""

    generation: int
    table: str
    writer: IndexWriter
    sink: Sink
    task: asyncio.Task[None] | None = None


class _Builds:
    """The tables this process keeps, one per generation it reads, with the serving one chosen in the catalog."""

    def __init__(
        self, settings: Settings, into: str, state: Path | None, embedder: Embedder, console: Console
    ) -> None:
        self.settings, self.into, self.state, self.embedder, self.console = (
            settings,
            into,
            state,
            embedder,
            console,
        )
        self.directory = index_directory(into)
        self.builds: dict[int, _Build] = {}

    def open(self, generation: int, params: dict[str, object] | None = None) -> _Build:
        """Open (creating it in the catalog) the table of ``generation``'s outputs for this process's model."""
        found = self.builds.get(generation)
        if found is not None:
            return found
        with updating(self.directory) as catalog:
            table = catalog.table_for(generation, self.embedder.model_id)
            entry = catalog.tables[table]
        writer_dir = self._writer_directory(table, entry.writer)
        sink = open_sink(self.into, self.embedder.dimensions, model=self.embedder.model_id, table=table)
        settings = self.settings if params is None else self.settings.with_params(params)
        try:
            writer = IndexWriter(
                writer_dir,
                sink,
                self.embedder,
                semantic_threshold=settings.semantic_threshold,
                params=settings.engine_params(),
                vector_source=functools.partial(self._borrow, generation),
                lineages=settings.lineages(),
            )
        except BaseException:
            sink.close()
            raise
        build = self.builds[generation] = _Build(generation, table, writer, sink)
        return build

    def _writer_directory(self, table: str, relative: str) -> Path:
        if self.state is None:
            return self.directory / relative
        return self.state if table == "chunks" else self.state.with_name(f"{self.state.name}-{table}")

    def _borrow(self, generation: int, hashes: Sequence[str]) -> dict[str, bytes]:
        """Vectors another generation's table of the same model already has (a text is embedded once, ever)."""
        found: dict[str, bytes] = {}
        for other in self.builds.values():
            if other.generation != generation and len(found) < len(hashes):
                found.update(other.writer.cached_vectors([h for h in hashes if h not in found]))
        return found

    def serve(self, build: _Build) -> None:
        """Name ``build``'s table in the catalog as the one readers query (never an older table over a newer)."""
        if read_catalog(self.directory).serving == build.table:
            return
        with updating(self.directory) as catalog:
            before = catalog.serving
            serving = catalog.serve(build.table)
        if serving and before != build.table:
            self.console.print(f"readers now query table {build.table} (generation {build.generation})")

    def retire(self, generation: int) -> None:
        """Drop a retired generation's table and writer directory (unless its table still serves)."""
        build = self.builds.pop(generation)
        build.writer.close()
        build.sink.close()
        with updating(self.directory) as catalog:
            if catalog.serving == build.table:
                return
            entry = catalog.tables.pop(build.table)
        drop_table(self.directory, build.table)
        shutil.rmtree(self._writer_directory(build.table, entry.writer), ignore_errors=True)
        self.console.print(f"generation {generation} retired: table {build.table} dropped")

    def close(self) -> None:
        for build in self.builds.values():
            build.writer.close()
            build.sink.close()

    @property
    def totals(self) -> IndexCounters:
        """The counters of every table, added up."""
        found = [b.writer.totals for b in self.builds.values()]
        return IndexCounters(
            **{f.name: sum(getattr(t, f.name) for t in found) for f in fields(IndexCounters)}
        )


def index_directory(into: str) -> Path:
    """The directory an index URI names."""
    _, separator, rest = into.partition("://")
    if not separator or not rest:
        raise ConfigurationError(f"unsupported index {into!r}: expected lancedb://DIR")
    return Path(rest).expanduser()


_READ = (*COMPACTED_TOPICS, "audit", "review")


async def _index_lag(settings: Settings, writer: IndexWriter) -> int:
    """Records of a generation's output topics the writer has not applied yet."""
    names = settings.topic_names()
    topics = [names.output(t) for t in _READ]
    found = await partitions_of(settings, topics)
    partitions = [TopicPartition(t, p) for t, parts in found.items() for p in parts]
    consumer = await start_reader(settings)
    try:
        ends = await consumer.end_offsets(partitions) if partitions else {}
    finally:
        await consumer.stop()
    return sum(
        max(0, end - int(writer.progress(f"kafka:{tp.topic}:{tp.partition}") or b"0"))
        for tp, end in ends.items()
    )


class _TopicIndexer:
    """Keeps a table per generation the deployment has (or the one STREAMDEDUP_GENERATION names), each reading its
    own output topics; the serving generation's table serves once it has applied its topics to their end.
    Following, a new generation gets its table as it appears, and a retired one's table is dropped."""

    def __init__(
        self,
        settings: Settings,
        builds: _Builds,
        producer: AIOKafkaProducer,
        metrics: IndexMetrics,
        shown: Callable[[int], None],
    ) -> None:
        self.settings, self.builds, self.producer, self.metrics, self.shown = (
            settings,
            builds,
            producer,
            metrics,
            shown,
        )
        self.stop = asyncio.Event()
        self.faults = FaultPoints(settings.fault_kill_at)

    def start(self, generation: int, params: dict[str, object] | None, follow: bool) -> None:
        build = self.builds.open(generation, params)
        names = TopicNames(self.settings.topic_prefix, generation)
        own = self.settings.model_copy(update={"generation": generation})
        applier = _TopicApplier(build.writer, self.producer, names.output, self.metrics, self.faults)
        # audit too: the reviewers' decisions, so that a pair kept separate is never flagged again.
        build.task = asyncio.create_task(
            materialize_topics(own, applier, follow=follow, on_batch=self.shown, topics=_READ, stop=self.stop)
        )

    async def wanted(self) -> tuple[dict[int, dict[str, object] | None], int]:
        """The generations to index (with their parameters; None: the settings') and the serving one."""
        if self.settings.generation is not None:
            return {self.settings.generation: None}, self.settings.generation
        registry = await read_registry(self.settings)
        live = {g.generation: (None if g.generation == 1 else g.params) for g in registry.live()}
        return (live or {1: None}), registry.serving

    async def once(self) -> None:
        """Index every generation's topics to their end; then the serving one's table serves."""
        generations, serving = await self.wanted()
        for generation, params in sorted(generations.items()):
            self.start(generation, params, follow=False)
        await asyncio.gather(*(b.task for b in self.builds.builds.values() if b.task is not None))
        if serving in self.builds.builds:
            self.builds.serve(self.builds.builds[serving])

    async def follow(self) -> None:
        """Keep every generation's table up to date until stopped (SIGTERM, Ctrl-C)."""
        generations, _ = await self.wanted()
        for generation, params in sorted(generations.items()):
            self.start(generation, params, follow=True)
        while not self.stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), timeout=1.0)
            await self.step()

    async def step(self) -> None:
        """Start the tables of new generations, drop those of retired ones, and serve the serving one's at lag 0."""
        for build in self.builds.builds.values():
            if build.task is not None and build.task.done() and not build.task.cancelled():
                failure = build.task.exception()
                if failure is not None:
                    raise failure
        generations, serving = await self.wanted()
        for generation, params in sorted(generations.items()):
            if generation not in self.builds.builds:
                self.start(generation, params, follow=True)
        for generation in [g for g in self.builds.builds if g not in generations]:
            task = self.builds.builds[generation].task
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.builds.retire(generation)
        current = self.builds.builds.get(serving)
        if current is not None:
            own = self.settings.model_copy(update={"generation": serving})
            if await _index_lag(own, current.writer) == 0:
                self.builds.serve(current)

    async def close(self) -> None:
        self.stop.set()
        for build in self.builds.builds.values():
            if build.task is not None and not build.task.done():
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await build.task


async def _index_topics(
    settings: Settings, builds: _Builds, follow: bool, metrics: IndexMetrics, shown: Callable[[int], None]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    try:
        await producer.start()
    except KafkaError as exc:
        raise KafkaUnavailableError(f"cannot reach Kafka at {settings.broker}: {exc}") from exc
    indexer = _TopicIndexer(settings, builds, producer, metrics, shown)
    try:
        await (indexer.follow() if follow else indexer.once())
    finally:
        await indexer.close()
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
    metrics = IndexMetrics(settings.index_port if follow else None)
    builds = _Builds(settings, into, state, embedder, console)
    try:
        if source is not None:
            build = builds.open(settings.generation or 1)
            writer = build.writer
            first = writer.totals

            def described(records: int) -> str:
                done = writer.totals
                return f"{records:,} records, {done.embedded - first.embedded:,} texts embedded, {done.rows:,} rows"

            faults = FaultPoints(settings.fault_kill_at)
            reader = OutputFile(
                source, _FileApplier(writer, reviews or source, metrics, faults), batch_lines=FILE_BATCH_LINES
            )
            with progress_bar(console, DownloadColumn(), label="index") as bar:
                task = bar.add_task(source.name, total=source.stat().st_size, completed=reader.position())

                def moved(records: int) -> None:
                    bar.update(
                        task,
                        completed=reader.position(),
                        total=max(source.stat().st_size, reader.position()),
                        description=described(records),
                    )

                read_file(reader, False, moved, console, into)
                builds.serve(build)  # the file read to its end: the table is complete
                if follow:
                    read_file(reader, True, moved, console, into)
            totals = writer.totals
        else:
            first = builds.totals

            def counted(records: int) -> str:
                done = builds.totals
                return f"{records:,} records, {done.embedded - first.embedded:,} texts embedded, {done.rows:,} rows"

            with console.status("indexing") as status:
                asyncio.run(
                    _index_topics(
                        settings, builds, follow, metrics, lambda n: status.update(f"indexing: {counted(n)}")
                    )
                )
            totals = builds.totals
    finally:
        builds.close()
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
        ("vectors reused from another table", "reused"),
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
