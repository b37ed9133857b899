"""Prometheus metrics of a worker, served on its web port at ``/metrics``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from streamdedup.core.messages import Output

if TYPE_CHECKING:
    from streamdedup.store.record_cache import RecordCache

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """Every metric of one worker, in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.events_in = Counter(
            "streamdedup_events_in", "Records read from the input topics (documents and feeds).", registry=r
        )
        self.events_processed = Counter(
            "streamdedup_events_processed", "Input events the source stage applied.", registry=r
        )
        self.isolated = Counter(
            "streamdedup_isolated_messages",
            "Stage messages applied again one at a time because their batch failed in a handler.",
            ["stage"],
            registry=r,
        )
        self.dead_letters = Counter(
            "streamdedup_dead_letters", "Messages written to the dlq topic.", ["reason"], registry=r
        )
        self.merges = Counter(
            "streamdedup_merges",
            "Merges into a chunk (audit merge; exact ones only with STREAMDEDUP_AUDIT_EXACT_COPIES).",
            ["kind"],
            registry=r,
        )
        self.canonical_changes = Counter(
            "streamdedup_canonical_changes", "Changes of a chunk's canonical (audit swap).", registry=r
        )
        self.splits = Counter("streamdedup_splits", "Members that left a chunk (audit split).", registry=r)
        self.flags = Counter("streamdedup_review_flags", "Review flags raised.", ["reason"], registry=r)
        self.decisions = Counter(
            "streamdedup_decisions",
            "Reviewers' decisions applied (audit decision), and merges the permission guard refused.",
            ["decision"],
            registry=r,
        )
        self.outputs = Counter(
            "streamdedup_outputs", "Records written to output topics.", ["topic"], registry=r
        )
        self.batch_seconds = Histogram(
            "streamdedup_batch_seconds",
            "Time to handle one batch and deliver what it caused, per stage.",
            ["stage"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.event_age_seconds = Histogram(
            "streamdedup_event_age_seconds",
            "Age of an input event (now minus its Kafka timestamp) when the worker reads it.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.sends = Counter(
            "streamdedup_kafka_sends",
            "Record batches sent to Kafka (one send each), by what they carry.",
            ["kind"],
            registry=r,
        )
        self.changelog_records = Counter(
            "streamdedup_changelog_records", "Key writes sent to the stages' changelogs.", registry=r
        )
        self.skipped = Counter(
            "streamdedup_skipped_messages",
            "Stage topic messages read again after a restart and dropped: their partition store had applied them.",
            registry=r,
        )
        self.recovery_seconds = Histogram(
            "streamdedup_recovery_seconds",
            "Time to bring the partition stores of an assignment up to their changelogs' ends.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.recovered_records = Counter(
            "streamdedup_recovered_records", "Changelog records replayed into partition stores.", registry=r
        )
        self.commit_repairs = Counter(
            "streamdedup_commit_repairs",
            "Offsets committed again because the committed offset stayed behind the applied one.",
            registry=r,
        )
        self.lag = Gauge(
            "streamdedup_consumer_lag",
            "Messages not yet processed, per topic partition.",
            ["topic", "partition"],
            registry=r,
        )

    def observe_outputs(self, outputs: Iterable[Output]) -> None:
        """Count what a batch emitted."""
        for output in outputs:
            self.outputs.labels(output.topic).inc()
            value = output.record()
            if value is None:
                continue
            if output.topic == "audit":
                action = value["action"]
                if action == "merge":
                    self.merges.labels(value["reason"]).inc()
                elif action == "swap":
                    self.canonical_changes.inc()
                elif action == "split":
                    self.splits.inc()
                elif action == "decision":
                    self.decisions.labels(value["reason"]).inc()
                elif action == "decision_refused":
                    self.decisions.labels("refused").inc()
            elif output.topic == "review":
                self.flags.labels(value["reason"]).inc()

    def watch_state_cache(self, cache: RecordCache) -> None:
        """Report the record cache of the worker's partition stores (read when the metrics are)."""
        self.registry.register(_StateCacheCollector(cache))

    def render(self) -> bytes:
        """Return the metrics in the Prometheus text format."""
        return generate_latest(self.registry)


class _StateCacheCollector(Collector):
    """The record cache's size and reads, as its own totals say at each scrape."""

    def __init__(self, cache: RecordCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        cache = self._cache
        yield GaugeMetricFamily(
            "streamdedup_state_cache_bytes",
            "Bytes the record cache's entries are counted at.",
            value=cache.used,
        )
        yield GaugeMetricFamily(
            "streamdedup_state_cache_capacity_bytes",
            "The record cache's bound (STATE_CACHE_MB).",
            value=cache.capacity,
        )
        hits, misses = cache.counts
        reads = CounterMetricFamily(
            "streamdedup_state_cache_reads",
            "Content-stage keys read through the record cache, by where they were found.",
            labels=["from"],
        )
        reads.add_metric(["cache"], hits)
        reads.add_metric(["store"], misses)
        yield reads
