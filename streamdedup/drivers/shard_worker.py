"""A worker process of the parallel embedded driver (:mod:`streamdedup.drivers.parallel`).

The driver starts each as a new interpreter (``python -m streamdedup.drivers.shard_worker FD``) on one end of a socket
pair. A worker runs one partition of the source, content and band stages, with a store of its own, at the driver's
command: it runs a batch's rounds, prepares the batch's changes in a file beside its store, applies them once the
driver decided the batch, and on opening applies or drops a batch it prepared before it stopped.
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import msgspec

from streamdedup.core import kernels
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGE_OF, STAGES, Message, Output, router
from streamdedup.drivers.embedded import RunCounters
from streamdedup.errors import StateError
from streamdedup.store.base import Transaction, check_params
from streamdedup.store.rocksdb import RocksDBStore, record_cache

__all__ = ["message_decoder", "message_encoder", "output_encoder"]

logger = logging.getLogger(__name__)

_THAW_EVERY = 64  # batches between two collections of the objects a worker froze (see drivers.collector)

#: The messages a worker sends another (or the driver), and reads: MessagePack, one blob per destination.
message_encoder = msgspec.msgpack.Encoder()
message_decoder: msgspec.msgpack.Decoder[list[Message]] = msgspec.msgpack.Decoder(list[Message])
#: The outputs a worker sends the driver: JSON.
output_encoder = msgspec.json.Encoder()

#: A prepared batch: its number and its changes, (stage, partition, writes) each.
_PENDING_TYPE = tuple[int, list[tuple[str, int, dict[str, bytes | None]]]]


def _worker_main(conn: Connection) -> None:
    """A worker: one partition of the source, content and band stages, with a store of its own, at the driver's
    command."""
    index, workers, path, params, options, where, state_cache_mb, kind = conn.recv()
    kernels.use(kind)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver stops the workers when it is interrupted
    gc.disable()  # a batch's objects are freed by reference counting; see drivers.collector
    try:
        engine = Engine(params, **options)  # the driver's engine options: audit_exact_copies, fault_source_id
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
            for message in message_decoder.decode(blob):
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
        sent = [message_encoder.encode(r) if r else b"" for r in remote]
        return sent, output_encoder.encode(outputs), counts.__dict__, any(self.kept.values())

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
