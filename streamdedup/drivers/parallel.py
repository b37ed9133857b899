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
import gc
import logging
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import msgspec

from streamdedup.contract.codec import dead_letter, encode_for_dead_letter, event_key
from streamdedup.core import kernels
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGE_OF, STAGES, Message, Output, router
from streamdedup.core.model import InputEvent
from streamdedup.core.params import DEFAULT_STATE_CACHE_MB, EngineParams
from streamdedup.drivers.collector import BatchCollector
from streamdedup.drivers.embedded import COUNTERS_KEY, Origin, RunCounters, Runner, Sink
from streamdedup.errors import StateError
from streamdedup.store.base import VIEW_FAMILY, Transaction, check_params
from streamdedup.store.rocksdb import RocksDBStore, record_cache, shard_count

__all__ = ["ParallelRunner"]

logger = logging.getLogger(__name__)

_BATCH_KEY = "parallel-batch"  # in the driver's store: the number of the last batch decided
_THAW_EVERY = 64  # batches between two collections of the objects a worker froze (see drivers.collector)

_messages = msgspec.msgpack.Encoder()
_read_messages: msgspec.msgpack.Decoder[list[Message]] = msgspec.msgpack.Decoder(list[Message])
_outputs = msgspec.json.Encoder()


class _Carried(msgspec.Struct):
    """An output as it arrives from a worker: its value is left encoded (JSON ``null`` for a tombstone)."""

    topic: str
    key: str | None
    value: msgspec.Raw


_read_outputs: msgspec.json.Decoder[list[_Carried]] = msgspec.json.Decoder(list[_Carried])
_NULL = msgspec.Raw(b"null")
#: A prepared batch: its number and its changes, (stage, partition, writes) each.
_PENDING_TYPE = tuple[int, list[tuple[str, int, dict[str, bytes | None]]]]


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
        # Each worker is a new interpreter (python -m streamdedup.drivers.parallel FD) over a socket pair: a fork of
        # a process that has opened RocksDB would inherit its thread pools without their threads.
        self._conns: list[Connection] = []
        self._processes: list[subprocess.Popen[bytes]] = []
        self._lost: list[StateError] = []  # workers found gone while sending, reported by the next _gather
        try:
            for index in range(workers):
                ours, theirs = socket.socketpair()
                with ours, theirs:
                    process = subprocess.Popen(
                        [sys.executable, "-m", __name__, str(theirs.fileno())], pass_fds=[theirs.fileno()]
                    )
                    self._processes.append(process)
                    self._conns.append(Connection(ours.detach()))
                self._conns[-1].send(
                    (
                        index,
                        workers,
                        state / f"shard-{index}",
                        params,
                        fault_source_id,
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
        self._engine = Engine(params, fault_source_id=fault_source_id)
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
                    inbound[partition].append(_messages.encode(parcel))
            active = self._send(
                {w: ("run", inbound[w]) for w in range(self.workers) if inbound[w] or w in waiting}
            )
            waiting = set()
            inbound = [[] for _ in range(self.workers)]
            parcels = [[] for _ in range(self.workers)]
            mine, collection = collection, []
            produced_here: list[Output] = []
            if mine:
                try:
                    produced = self._engine.handle("collection", mine, txn.partition("collection", 0))
                except Exception as exc:
                    self._gather(active)  # the workers' answers first, so that the next command finds them
                    raise _WorkerFailed(type(exc).__name__, str(exc)) from exc
                for item in produced:
                    if isinstance(item, Output):
                        produced_here.append(item)
                    else:
                        self._deliver(item, parcels, collection)
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
                    collection.extend(_read_messages.decode(sent[self.workers]))
            if produced_here:
                counts.observe_all(produced_here, txn)
                outputs.extend(produced_here)
        return outputs

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


def _worker_main(conn: Connection) -> None:
    """A worker: one partition of the source, content and band stages, with a store of its own, at the driver's
    command."""
    index, workers, path, params, fault_source_id, where, state_cache_mb, kind = conn.recv()
    kernels.use(kind)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver stops the workers when it is interrupted
    gc.disable()  # a batch's objects are freed by reference counting; see drivers.collector
    try:
        engine = Engine(params, fault_source_id=fault_source_id)
        store = RocksDBStore(path, records=record_cache(state_cache_mb))
    except Exception as exc:
        conn.send(("state", f"cannot open worker {index}'s state at {path}: {exc}"))
        return
    worker = _Worker(index, workers, engine, store)
    try:
        try:
            check_params(store, params, where=where)
        except Exception as exc:
            conn.send(("state", str(exc)))
            return
        conn.send(("ok", None))
        while True:
            try:
                command, argument = conn.recv()
            except EOFError:
                return  # the driver is gone
            if command == "stop":
                return
            try:
                conn.send(("ok", worker.do(command, argument)))
            except StateError as exc:
                conn.send(("state", str(exc)))
            except Exception as exc:
                conn.send(("error", (type(exc).__name__, str(exc))))
    finally:
        store.close()


class _Worker:
    """What a worker process holds: its engine, its store, and the transactions of the batch that runs."""

    def __init__(self, index: int, workers: int, engine: Engine, store: RocksDBStore) -> None:
        self.index, self.workers = index, workers
        self.engine, self.store = engine, store
        self.prepared = store.path / "prepared"  # the batch this worker prepared, until it applies it
        self.route = router(workers)
        self.batch: Transaction | None = None
        self.nested: Transaction | None = None
        self.batches = 0
        # What this worker's partitions sent one another in the last round, for the next (see run).
        self.kept: dict[str, list[Message]] = {stage: [] for stage in STAGES}

    def do(self, command: str, argument: Any) -> Any:
        if command == "run":
            txn = self.nested or self.batch
            assert txn is not None
            return self.run(txn, argument)
        # A new batch, or an event of a failed batch applied alone, starts with nothing kept from before.
        if command in ("begin", "nest", "drop"):
            self.kept = {stage: [] for stage in STAGES}
        if command == "begin":
            self.batch, self.nested = Transaction(self.store), None
        elif command == "nest":
            assert self.batch is not None
            self.nested = self.batch.nested()
        elif command == "keep":
            assert self.nested is not None
            self.nested.commit()
            self.nested = None
        elif command == "drop":
            self.nested = None
        elif command == "prepare":
            assert self.batch is not None
            changes = [
                (stage, partition, writes) for (stage, partition), writes in self.batch.changes.items()
            ]
            # A file beside the store, replaced whole: written into the store, a batch's changes would fill its
            # memtables twice over.
            draft = self.prepared.with_suffix(".draft")
            draft.write_bytes(msgspec.msgpack.encode((argument, changes)))
            draft.replace(self.prepared)
        elif command == "apply":
            assert self.batch is not None
            self.batch.commit()
            self.batch = None
            self.prepared.unlink()
            self.collect()
        elif command == "recover":
            self.recover(argument)
        else:  # pragma: no cover - the driver sends only the commands above
            raise ValueError(f"unknown command {command!r}")
        return None

    def run(self, txn: Transaction, blobs: list[bytes]) -> tuple[list[bytes], bytes, dict[str, Any], bool]:
        """Run each stage once on what its partition here received, and return what that caused.

        A stage takes, in one call, what this worker's partitions sent it in the last round and what arrived from
        the others for this one: a text that copies from several workers' sources hold is then settled, stored and
        emitted once, as in one process, instead of once for the local copies and again for the remote ones.
        What it sends a partition here waits for the next round, with what arrives then.

        Return the messages for each other worker (MessagePack, empty for none), the outputs (JSON), what they add
        to the run's totals (this worker keeps the view of the keys its partitions emit: a source's mapping comes
        from its source partition, a chunk from its content partition), and whether it kept messages for the next
        round.
        """
        arrived, self.kept = self.kept, {stage: [] for stage in STAGES}
        for blob in blobs:
            for message in _read_messages.decode(blob):
                arrived[STAGE_OF[type(message)]].append(message)
        # For each other worker, and last for the driver (the collection stage).
        remote: list[list[Message]] = [[] for _ in range(self.workers + 1)]
        outputs: list[Output] = []
        here = self.index
        route: Callable[[Message], list[tuple[str, int, Message]]] = self.route
        for stage in STAGES:
            if not arrived[stage]:
                continue
            for item in self.engine.handle(stage, arrived[stage], txn.partition(stage, here)):
                if isinstance(item, Output):
                    outputs.append(item)
                    continue
                for to_stage, partition, message in route(item):
                    if to_stage == "collection":
                        remote[-1].append(message)
                    elif partition == here:
                        self.kept[to_stage].append(message)
                    else:
                        remote[partition].append(message)
        counts = RunCounters()
        counts.observe_all(outputs, txn)
        sent = [_messages.encode(r) if r else b"" for r in remote]
        return sent, _outputs.encode(outputs), counts.__dict__, any(self.kept.values())

    def recover(self, decided: int) -> None:
        """Apply a prepared batch that the driver decided; drop one it did not."""
        if not self.prepared.exists():
            return
        batch, changes = msgspec.msgpack.decode(self.prepared.read_bytes(), type=_PENDING_TYPE)
        if batch <= decided:
            logger.info(
                "worker %d applies batch %d, which the run committed before it stopped", self.index, batch
            )
            self.store.commit({(stage, partition): writes for stage, partition, writes in changes}, {})
        self.prepared.unlink()

    def collect(self) -> None:
        """Freeze what the batch left alive, or every few batches let the collector see it again."""
        self.batches += 1
        if self.batches % _THAW_EVERY == 0:
            gc.unfreeze()
            gc.collect()
        gc.freeze()


if __name__ == "__main__":
    _worker_main(Connection(int(sys.argv[1])))
