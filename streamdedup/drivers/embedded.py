"""The embedded driver: every stage in one process, one partition each, state in a local store.

Input events are taken in batches. A batch runs to quiescence through in-process queues (each stage in turn
takes everything queued for it), its outputs are handed to the sink, and only then are its state changes
committed, together with the progress counters, in one atomic write. A crash therefore repeats at most one batch
on the next run, and repeating input is harmless (I4). The same input gives byte-identical output (I5).

A failing event never takes its batch with it: if a handler raises while the batch runs, the batch's changes are
dropped and its events are applied again one at a time, each in a transaction nested in the batch's; the event
that fails is dead-lettered with the error and where it came from, and every other one is applied.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from streamdedup.contract.codec import dead_letter, encode_for_dead_letter, event_key
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGE_OF, STAGES, Message, Output
from streamdedup.core.model import InputEvent
from streamdedup.drivers.collector import BatchCollector
from streamdedup.errors import StateError
from streamdedup.store.base import VIEW_FAMILY, Store, Transaction, check_params

__all__ = ["COUNTERS_KEY", "EmbeddedRunner", "Origin", "RunCounters", "Runner", "Sink"]

logger = logging.getLogger(__name__)

#: Where the run totals are kept in the store's metadata.
COUNTERS_KEY = "embedded-counters"

#: Takes a batch's outputs before its state commits; may return metadata to commit with the state.
Sink = Callable[[list[Output]], Mapping[str, bytes] | None]


@dataclass
class RunCounters:
    """Totals kept with the state: what the downstream view holds, and what has flowed through."""

    events: int = 0
    dead_letters: int = 0
    positions: int = 0
    exact: int = 0
    near: int = 0
    chunks: int = 0
    flags: dict[str, int] = field(default_factory=dict)

    @property
    def embedding_calls_saved(self) -> int:
        """Chunk positions that need no embedding of their own: every live position past one per chunk."""
        return self.positions - self.chunks

    def observe_all(self, outputs: Sequence[Output], txn: Transaction) -> None:
        """Update the totals with a batch's outputs.

        Each counted key (a source's mapping, a chunk) keeps what it contributed to the totals in the view family,
        so a record sent again replaces its earlier contribution. A batch reads those of its keys in one call and
        writes back only the ones that changed.
        """
        # A key sent twice in a batch contributes what its last record says: each record replaces the one before.
        latest: dict[str, Output] = {}
        for output in outputs:
            topic = output.topic
            if topic == "source-mappings":
                latest[f"m:{output.key}"] = output
            elif topic == "canonical-chunks":
                latest[f"c:{output.key}"] = output
            elif topic == "review" and output.value is not None:
                reason = (output.record() or {})["reason"]
                self.flags[reason] = self.flags.get(reason, 0) + 1
            elif topic == "dlq":
                self.dead_letters += 1
        if not latest:
            return
        keys = list(latest)
        view = txn.changes_of(VIEW_FAMILY, 0)
        positions = exact = near = chunks = 0
        for key, raw, output in zip(keys, txn.read_many(VIEW_FAMILY, 0, keys), latest.values(), strict=True):
            old = _parse_counts(raw)
            value = output.value
            if output.topic == "source-mappings":
                new = (0, 0, 0)
                if value is not None:
                    # As the source stage writes it, encoded: read only the relations back.
                    encoded = value if isinstance(value, msgspec.Raw) else msgspec.json.encode(value)
                    relations = [row.relation for row in _read_relations.decode(encoded).chunks]
                    new = (len(relations), relations.count("exact"), relations.count("near"))
                positions += new[0] - old[0]
                exact += new[1] - old[1]
                near += new[2] - old[2]
            else:
                new = (0, 0, 0) if value is None else (1, 0, 0)
                chunks += new[0] - old[0]
            if new != old:
                view[key] = _format_counts(new)
        self.positions += positions
        self.exact += exact
        self.near += near
        self.chunks += chunks

    def to_json(self) -> bytes:
        """Serialize for the store's metadata."""
        return json.dumps(self.__dict__, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes | None) -> RunCounters:
        """Read counters written by :meth:`to_json` (empty counters for None)."""
        return cls() if raw is None else cls(**json.loads(raw))


class _Relation(msgspec.Struct):
    relation: str


class _Relations(msgspec.Struct):
    """The part of a ``source-mappings`` value that the totals count: each position's relation."""

    chunks: list[_Relation]


_read_relations = msgspec.json.Decoder(_Relations)


def _parse_counts(raw: bytes | None) -> tuple[int, int, int]:
    if raw is None:
        return (0, 0, 0)
    a, b, c = map(int, raw.split(b","))
    return (a, b, c)


def _format_counts(counts: tuple[int, int, int]) -> bytes | None:
    return None if counts == (0, 0, 0) else b"%d,%d,%d" % counts


class Origin(NamedTuple):
    """Where an input event came from: its bytes as read (None when a connector built it) and its place."""

    raw: bytes | None
    where: dict[str, Any]


class Runner(ABC):
    """What runs a feed's batches: :class:`EmbeddedRunner`, or the parallel driver's runner.

    A batch runs with the cyclic garbage collector paused (see :mod:`.collector`).
    """

    #: The store that holds the run's totals and the metadata committed with them.
    store: Store
    counters: RunCounters
    #: Events the last :meth:`process` call applied (the others were dead-lettered).
    last_applied: int = 0
    _collector: BatchCollector

    def process(
        self,
        events: Sequence[InputEvent],
        sink: Sink,
        *,
        dead_letters: Iterable[Output] = (),
        meta: dict[str, bytes] | None = None,
        origins: Sequence[Origin] | None = None,
    ) -> list[Output]:
        """Run one batch of events to quiescence, hand its outputs to ``sink``, then commit its state.

        ``meta`` is committed with the state (a feed's position, for instance), and so is what ``sink`` returns
        (where its outputs end, for instance). ``origins``, one per event, is what a dead letter of an event that
        fails in a handler names; without it, the event's position in the batch.
        """
        with self._collector.batch():
            return self._process(events, sink, dead_letters, meta, origins)

    @abstractmethod
    def _process(
        self,
        events: Sequence[InputEvent],
        sink: Sink,
        dead_letters: Iterable[Output],
        meta: dict[str, bytes] | None,
        origins: Sequence[Origin] | None,
    ) -> list[Output]:
        """Run a batch with the collector paused: what :meth:`process` does."""


class EmbeddedRunner(Runner):
    """Run the engine over input events on one machine, with state in ``store``."""

    def __init__(self, engine: Engine, store: Store, *, where: str = "memory") -> None:
        check_params(store, engine.params, where=where)
        self.engine = engine
        self.store = store
        self.counters = RunCounters.from_json(store.get_meta(COUNTERS_KEY))
        self._collector = BatchCollector()

    def _process(
        self,
        events: Sequence[InputEvent],
        sink: Sink,
        dead_letters: Iterable[Output],
        meta: dict[str, bytes] | None,
        origins: Sequence[Origin] | None,
    ) -> list[Output]:
        txn = Transaction(self.store)
        outputs = list(dead_letters)
        try:
            outputs.extend(run_to_quiescence(self.engine, txn, events))
            applied = len(events)
        except StateError:
            raise  # the store failed, not the input
        except Exception as exc:
            logger.warning("a batch of %d events failed (%r); applying them one at a time", len(events), exc)
            txn = Transaction(self.store)
            produced, applied = self._one_at_a_time(txn, events, origins)
            outputs.extend(produced)
        self.counters.events += applied
        self.last_applied = applied
        self.counters.observe_all(outputs, txn)
        delivered = sink(outputs)
        txn.meta[COUNTERS_KEY] = self.counters.to_json()
        txn.meta.update(meta or {})
        txn.meta.update(delivered or {})
        txn.commit()
        return outputs

    def _one_at_a_time(
        self, txn: Transaction, events: Sequence[InputEvent], origins: Sequence[Origin] | None
    ) -> tuple[list[Output], int]:
        """Apply each event in a nested transaction; dead-letter those that raise. Return outputs and applied."""
        outputs: list[Output] = []
        applied = 0
        for index, event in enumerate(events):
            nested = txn.nested()
            try:
                produced = run_to_quiescence(self.engine, nested, [event])
            except StateError:
                raise
            except Exception as exc:
                origin = origins[index] if origins is not None else Origin(None, {"batch_index": index})
                logger.warning(
                    "dead-lettering the event of %r at %s: %r", event_key(event), origin.where, exc
                )
                raw = origin.raw if origin.raw is not None else encode_for_dead_letter(event)
                outputs.append(dead_letter(raw, exc, {**origin.where, "source_id": event_key(event)}))
                continue
            nested.commit()
            outputs.extend(produced)
            applied += 1
        return outputs, applied


def run_to_quiescence(engine: Engine, txn: Transaction, events: Sequence[Message]) -> list[Output]:
    """Deliver ``events`` and everything they cause, stage by stage, until no message is left."""
    queues: dict[str, deque[Message]] = {stage: deque() for stage in STAGES}
    queues["source"].extend(events)
    outputs: list[Output] = []
    # Where each kind of item goes, in one lookup: the five Django releases route some 985,000 messages and outputs.
    route: dict[type, Callable[[Any], None]] = {
        kind: queues[stage].append for kind, stage in STAGE_OF.items()
    }
    route[Output] = outputs.append
    while any(queues.values()):
        for stage in STAGES:
            queue = queues[stage]
            if not queue:
                continue
            batch = list(queue)
            queue.clear()
            for item in engine.handle(stage, batch, txn.partition(stage, 0)):
                route[type(item)](item)
    return outputs
