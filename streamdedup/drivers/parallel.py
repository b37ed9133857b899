"""The parallel embedded driver: the engine's partitions spread over worker processes, each with a store of its own.

With ``workers`` > 1 (``streamdedup run --workers N``), the source, content and band stages have that many
partitions, and worker process ``w`` runs partition ``w`` of each, its state in ``STATE/shard-w``. The driver runs
the collection stage itself (one partition: most runs have few collections, and on a worker it would make that
worker the one all others wait for), and keeps its state, the run's totals, the view and the feed's position in
``STATE/db``.

A batch runs in rounds. The driver hands each worker the messages for its partitions; each worker runs each stage
once on them, with what its own partitions sent one another in the round before, and sends back its outputs and the
messages for other workers' partitions (MessagePack, one blob per destination), which the next round delivers in
the order of the workers that sent them, after the worker's own. So a stage's partition takes in one call all that
the round brings it from every worker, as in one process, and the same input and the same number of workers give
the same outputs in the same order.

A batch commits in three steps, so that a crash leaves every store with all of the batch or none of it:

1. *prepare*: each worker writes its batch's changes to one file beside its store;
2. *decide*: the driver commits the batch's number with the collection stage's changes, the run's totals, the
   view and the outputs' place;
3. *apply*: each worker writes its changes into its store and removes the file.

On opening, a worker whose file holds a batch the driver decided applies it, and drops a later one: that batch
was not committed, and the feed gives it again. As in the one-process driver, a failing event never takes its batch
with it: the batch is dropped in every worker and its events are applied one at a time, each in a transaction nested
in the batch's, and the one that fails is dead-lettered.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
from collections.abc import Iterable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import msgspec

from streamdedup.contract.codec import dead_letter, encode_for_dead_letter, event_key
from streamdedup.core import kernels
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Message, Output, router
from streamdedup.core.model import InputEvent
from streamdedup.core.params import DEFAULT_STATE_CACHE_MB, EngineParams
from streamdedup.drivers import shard_worker
from streamdedup.drivers.collector import BatchCollector
from streamdedup.drivers.embedded import COUNTERS_KEY, Origin, RunCounters, Runner, Sink
from streamdedup.drivers.shard_worker import message_decoder, message_encoder
from streamdedup.errors import StateError
from streamdedup.store.base import VIEW_FAMILY, Transaction, check_params
from streamdedup.store.rocksdb import RocksDBStore, shard_count

__all__ = ["ParallelRunner"]

logger = logging.getLogger(__name__)

_BATCH_KEY = "parallel-batch"  # in the driver's store: the number of the last batch decided


class _Carried(msgspec.Struct):
    """An output as it arrives from a worker: its value is left encoded (JSON ``null`` for a tombstone)."""

    topic: str
    key: str | None
    value: msgspec.Raw


_read_outputs: msgspec.json.Decoder[list[_Carried]] = msgspec.json.Decoder(list[_Carried])
_NULL = msgspec.Raw(b"null")


class _WorkerFailed(Exception):
    """A handler raised in a worker: the batch (or the event) is dropped, as the one-process driver does.

    It carries what the handler raised, as an exception of the same type name and message (for the dead letter).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.error: Exception = type(kind, (Exception,), {})(message)


class ParallelRunner(Runner):
    """Run the engine over input events in ``workers`` processes, with state under the directory ``state``."""

    def __init__(
        self,
        params: EngineParams,
        state: Path,
        *,
        workers: int,
        audit_exact_copies: bool = False,
        fault_source_id: str | None = None,
        state_cache_mb: int = DEFAULT_STATE_CACHE_MB,
    ) -> None:
        if workers < 2:
            raise ValueError("a parallel run needs at least two workers")
        self.workers = workers
        where = str(state)
        found = shard_count(state)
        if found and found != workers:
            raise StateError(
                f"the state at {state} is spread over {found} workers; run it with --workers {found}"
            )
        if not found and (state / "db").is_dir():
            raise StateError(
                f"the state at {state} was written by a run in one process; run it without --workers "
                "or use a new state directory"
            )
        # Each worker is a new interpreter (python -m streamdedup.drivers.shard_worker FD) over a socket pair: a fork of
        # a process that has opened RocksDB would inherit its thread pools without their threads.
        self._conns: list[Connection] = []
        self._processes: list[subprocess.Popen[bytes]] = []
        self._lost: list[StateError] = []  # workers found gone while sending, reported by the next _gather
        try:
            for index in range(workers):
                ours, theirs = socket.socketpair()
                with ours, theirs:
                    process = subprocess.Popen(
                        [sys.executable, "-m", shard_worker.__name__, str(theirs.fileno())],
                        pass_fds=[theirs.fileno()],
                    )
                    self._processes.append(process)
                    self._conns.append(Connection(ours.detach()))
                self._conns[-1].send(
                    (
                        index,
                        workers,
                        state / f"shard-{index}",
                        params,
                        {"audit_exact_copies": audit_exact_copies, "fault_source_id": fault_source_id},
                        where,
                        state_cache_mb and max(1, state_cache_mb // workers),  # 0 stays none
                        kernels.kind(),  # the driver's kernels, whatever chose them
                    ),
                )
            self._gather(range(workers))  # each opened its store
            self.store = RocksDBStore(state, families=("collection", VIEW_FAMILY), records=None)
        except BaseException:
            self._stop()
            raise
        try:
            check_params(self.store, params, where=where)
            self._decided = int(self.store.get_meta(_BATCH_KEY) or b"0")
            self._all("recover", self._decided)
        except BaseException:
            self.close()
            raise
        self.counters = RunCounters.from_json(self.store.get_meta(COUNTERS_KEY))
        self._route = router(workers)
        self._engine = Engine(params, audit_exact_copies=audit_exact_copies, fault_source_id=fault_source_id)
        self._collector = BatchCollector()

    def _process(
        self,
        events: Sequence[InputEvent],
        sink: Sink,
        dead_letters: Iterable[Output],
        meta: dict[str, bytes] | None,
        origins: Sequence[Origin] | None,
    ) -> list[Output]:
        outputs = list(dead_letters)
        counts = RunCounters()
        txn = Transaction(self.store)
        self._all("begin")
        try:
            outputs.extend(self._rounds(events, counts, txn))
            applied = len(events)
        except _WorkerFailed as exc:
            logger.warning("a batch of %d events failed (%s); applying them one at a time", len(events), exc)
            self._all("begin")
            counts, txn = RunCounters(), Transaction(self.store)
            produced, applied = self._one_at_a_time(events, origins, counts, txn)
            outputs.extend(produced)
        self.counters.events += applied
        self.last_applied = applied
        _add(self.counters, counts.__dict__)
        # The workers counted their outputs; the dead letters, made here, are counted here.
        self.counters.observe_all([o for o in outputs if o.topic == "dlq"], txn)
        delivered = sink(outputs)
        batch = self._decided + 1
        self._all("prepare", batch)
        txn.meta[COUNTERS_KEY] = self.counters.to_json()
        txn.meta.update(meta or {})
        txn.meta.update(delivered or {})
        txn.meta[_BATCH_KEY] = str(batch).encode()
        txn.commit()
        self._decided = batch
        self._all("apply")
        return outputs

    def close(self) -> None:
        """Stop the workers (each closes its store) and close the driver's store."""
        try:
            self._stop()
        finally:
            store = getattr(self, "store", None)
            if store is not None:
                store.close()

    def _one_at_a_time(
        self,
        events: Sequence[InputEvent],
        origins: Sequence[Origin] | None,
        counts: RunCounters,
        txn: Transaction,
    ) -> tuple[list[Output], int]:
        outputs: list[Output] = []
        applied = 0
        for index, event in enumerate(events):
            self._all("nest")
            added, nested = RunCounters(), txn.nested()
            try:
                produced = self._rounds([event], added, nested)
            except _WorkerFailed as exc:
                self._all("drop")
                origin = origins[index] if origins is not None else Origin(None, {"batch_index": index})
                logger.warning(
                    "dead-lettering the event of %r at %s: %s", event_key(event), origin.where, exc
                )
                raw = origin.raw if origin.raw is not None else encode_for_dead_letter(event)
                outputs.append(dead_letter(raw, exc.error, {**origin.where, "source_id": event_key(event)}))
                continue
            self._all("keep")
            nested.commit()
            _add(counts, added.__dict__)
            outputs.extend(produced)
            applied += 1
        return outputs, applied

    def _rounds(self, events: Sequence[Message], counts: RunCounters, txn: Transaction) -> list[Output]:
        """Deliver ``events`` and everything they cause, round after round, until no message is left.

        The collection stage runs here, in its one partition, with its state in the driver's store (``txn``):
        a collection's documents all report their lines to it, and most runs have few collections, so on any
        worker it would make that worker the one all others wait for; here it runs while the workers do.
        Return the outputs, values encoded; add what they change in the run's totals to ``counts``.
        """
        parcels: list[list[Message]] = [[] for _ in range(self.workers)]
        collection: list[Message] = []
        for event in events:
            self._deliver(event, parcels, collection)
        outputs: list[Output] = []
        inbound: list[list[bytes]] = [[] for _ in range(self.workers)]
        waiting: set[int] = set()  # workers that kept messages of their own for the next round
        while any(parcels) or any(inbound) or collection or waiting:
            for partition, parcel in enumerate(parcels):
                if parcel:
                    inbound[partition].append(message_encoder.encode(parcel))
            active = self._send(
                {w: ("run", inbound[w]) for w in range(self.workers) if inbound[w] or w in waiting}
            )
            waiting = set()
            inbound = [[] for _ in range(self.workers)]
            parcels = [[] for _ in range(self.workers)]
            mine, collection = collection, []
            produced_here = self._collect(mine, active, txn, parcels, collection)
            for w, (sent, produced_there, added, kept) in zip(active, self._gather(active), strict=True):
                if kept:
                    waiting.add(w)
                outputs.extend(
                    Output(o.topic, o.key, None if o.value == _NULL else o.value)
                    for o in _read_outputs.decode(produced_there)
                )
                _add(counts, added)
                for partition, blob in enumerate(sent[: self.workers]):
                    if blob:
                        inbound[partition].append(blob)
                if sent[self.workers]:
                    collection.extend(message_decoder.decode(sent[self.workers]))
            if produced_here:
                counts.observe_all(produced_here, txn)
                outputs.extend(produced_here)
        return outputs

    def _collect(
        self,
        messages: list[Message],
        active: list[int],
        txn: Transaction,
        parcels: list[list[Message]],
        collection: list[Message],
    ) -> list[Output]:
        """Run the collection stage on ``messages`` while the ``active`` workers run theirs; deliver what it sends
        (to ``parcels``, or to ``collection`` for the next round) and return its outputs."""
        produced_here: list[Output] = []
        if not messages:
            return produced_here
        try:
            produced = self._engine.handle("collection", messages, txn.partition("collection", 0))
        except Exception as exc:
            self._gather(active)  # the workers' answers first, so that the next command finds them
            raise _WorkerFailed(type(exc).__name__, str(exc)) from exc
        for item in produced:
            if isinstance(item, Output):
                produced_here.append(item)
            else:
                self._deliver(item, parcels, collection)
        return produced_here

    def _deliver(self, message: Message, parcels: list[list[Message]], collection: list[Message]) -> None:
        """Put ``message`` in the parcel of each worker that receives it, or with this process's collection stage."""
        for stage, partition, part in self._route(message):
            if stage == "collection":
                collection.append(part)
            else:
                parcels[partition].append(part)

    def _all(self, command: str, argument: object = None) -> None:
        self._gather(self._send({w: (command, argument) for w in range(self.workers)}))

    def _send(self, messages: dict[int, tuple[str, object]]) -> list[int]:
        """Send each worker its message; return the workers that got it, for :meth:`_gather`.

        A worker that is gone fails the run, once the others have answered (a worker never reads a message
        before it answered the one before).
        """
        sent: list[int] = []
        for w, message in messages.items():
            try:
                self._conns[w].send(message)
            except OSError as exc:
                self._lost.append(StateError(f"worker {w} stopped unexpectedly ({exc!r})"))
            else:
                sent.append(w)
        return sent

    def _gather(self, workers: Iterable[int]) -> list[Any]:
        """Return each worker's answer, in order; raise the first failure once every worker has answered."""
        answers: list[Any] = []
        failure: BaseException | None = self._lost.pop() if self._lost else None
        self._lost.clear()
        for w in workers:
            try:
                status, value = self._conns[w].recv()
            except (EOFError, OSError) as exc:
                failure = failure or StateError(f"worker {w} stopped unexpectedly ({exc!r})")
                continue
            if status == "ok":
                answers.append(value)
            elif status == "state":
                failure = failure or StateError(value)
            else:
                failure = failure or _WorkerFailed(*value)
        if failure is not None:
            raise failure
        return answers

    def _stop(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(("stop", None))
        for process in self._processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for conn in self._conns:
            conn.close()
        self._conns, self._processes = [], []


def _add(counters: RunCounters, added: dict[str, Any]) -> None:
    """Add totals (a :class:`RunCounters`' fields) to ``counters``."""
    for name, value in added.items():
        if name == "flags":
            for reason, count in value.items():
                counters.flags[reason] = counters.flags.get(reason, 0) + count
        else:
            setattr(counters, name, getattr(counters, name) + value)
