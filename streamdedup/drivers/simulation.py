"""The simulation driver: every stage with P partitions, and seeded random interleavings of deliveries.

It models what a Kafka deployment may do to messages: each partition is a FIFO log, but which partition is
served next, how much of it one handler call takes, and when the next input event arrives are chosen by a seeded
random generator. It can also deliver messages again, as Kafka does after a consumer restarts before committing:

- ``rewind``: after a handler call, with this probability, the same batch is delivered again (its effects
  already applied);
- ``duplicate``: with this probability, a copy of some earlier message of the partition is queued again at a
  random place, arriving late and out of order (harsher than Kafka);
- ``cut``: after a handler call delivered what it produced, with this probability, its state changes are dropped,
  as a crash before its changelog drops them, and the partition's next call takes exactly the same messages
  again, as the Kafka worker does after such a crash (it finds the call's input from the record that opened it).

With ``checkpoint=k``, a partition's state changes are committed only every ``k`` of its calls, each call reading
the changes of the calls before it, as a worker that commits at checkpoints would; a cut then drops all the
changes since the partition's last checkpoint, after their calls delivered. ``again`` says how the input of a cut
is taken again: ``"whole"`` as one call, ``"singly"`` one message per call, each committed at once (the finest
split there is, so finer than any split the cut calls had).

With ``schedule="pipeline"`` nothing is random: each input event runs to quiescence before the next, and stages
take their whole queue in pipeline order, partition by partition. With one partition that is exactly what the
embedded driver does, so the two must produce the same output, byte for byte.

Messages are encoded to JSON and back on the way, as they would be on a topic.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import msgspec

from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGES, Message, Output
from streamdedup.core.model import InputEvent
from streamdedup.store.base import Transaction
from streamdedup.store.memory import MemoryStore

__all__ = ["SimulationDriver"]

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Message] = msgspec.json.Decoder(Message)


class SimulationDriver:
    """Run the engine's stages with ``partitions`` partitions each under a seeded random schedule."""

    def __init__(
        self,
        engine: Engine,
        *,
        partitions: int,
        seed: int,
        max_batch: int | None = None,
        input_rate: float | None = None,
        rewind: float = 0.0,
        duplicate: float = 0.0,
        cut: float = 0.0,
        checkpoint: int = 1,
        again: str = "whole",
        schedule: str = "random",
        max_steps: int = 2_000_000,
    ) -> None:
        if schedule not in ("random", "pipeline"):
            raise ValueError("schedule must be 'random' or 'pipeline'")
        if checkpoint < 1 or again not in ("whole", "singly"):
            raise ValueError("checkpoint must be at least 1, and again 'whole' or 'singly'")
        self.checkpoint = checkpoint
        self.again = again
        self.schedule = schedule
        self.engine = engine
        self.partitions = partitions
        self.rng = random.Random(seed)
        # Unless given, the pace of input against processing and the batch size are part of the random schedule:
        # from nearly one event at a time through the whole pipeline to bursts that pile up in every queue.
        self.max_batch = max_batch or self.rng.choice((1, 3, 8, 64))
        self.input_rate = input_rate if input_rate is not None else self.rng.choice((0.005, 0.05, 0.3, 0.9))
        self.rewind = rewind
        self.duplicate = duplicate
        self.cut = cut
        self.max_steps = max_steps
        self.store = MemoryStore()
        self.queues: dict[tuple[str, int], list[bytes]] = {
            (stage, p): [] for stage in STAGES for p in range(partitions)
        }
        self.history: dict[tuple[str, int], list[bytes]] = {address: [] for address in self.queues}
        self.outputs: list[Output] = []
        self.deliveries = 0
        self.redeliveries = 0
        self.cuts = 0
        self.cut_checkpoints = 0  # cuts that dropped the changes of more than one call
        # How many messages at a queue's head a cut left, to be taken again as one call ("whole") or one by one.
        self._again: dict[tuple[str, int], int] = {}
        # Per partition, the changes since its last checkpoint: the transaction, the messages, the calls.
        self._open: dict[tuple[str, int], tuple[Transaction, list[bytes], int]] = {}

    def _enqueue(self, message: Message) -> None:
        for stage, partition, part in self.engine.destinations(message, self.partitions):
            self.queues[(stage, partition)].append(_encoder.encode(part))

    def run(self, events: Sequence[InputEvent]) -> list[Output]:
        """Feed ``events`` in order while processing, until nothing is left; return the outputs of this run."""
        start = len(self.outputs)
        if self.schedule == "pipeline":
            for event in events:
                self._enqueue(event)
                while any(self.queues.values()):
                    for address, queue in self.queues.items():
                        if queue:
                            self._step(address, size=len(queue))
            return self.outputs[start:]
        pending = list(events)
        next_input = 0
        for _ in range(self.max_steps):
            busy = [address for address, queue in self.queues.items() if queue]
            if next_input < len(pending) and (not busy or self.rng.random() < self.input_rate):
                self._enqueue(pending[next_input])
                next_input += 1
                continue
            if not busy:
                for address in list(self._open):
                    self._close(address)
                return self.outputs[start:]
            self._step(self.rng.choice(busy))
        raise RuntimeError(f"the simulation did not settle within {self.max_steps} steps")

    def _step(self, address: tuple[str, int], size: int | None = None) -> None:
        stage, partition = address
        queue = self.queues[address]
        again = self._again.pop(address, None)
        if again is not None and self.again == "singly":
            if again > 1:
                self._again[address] = again - 1
            size, alone = 1, True
        else:
            size, alone = again or size or self.rng.randint(1, self.max_batch), again is not None
        raw, self.queues[address] = queue[:size], queue[size:]
        batch = [_decoder.decode(item) for item in raw]
        opened = self._open.pop(address, None)
        txn, taken, calls = opened if opened is not None else (Transaction(self.store), [], 0)
        produced = self.engine.handle(stage, batch, txn.partition(stage, partition))
        self.deliveries += len(batch)
        for item in produced:
            if isinstance(item, Output):
                self.outputs.append(item)
            else:
                self._enqueue(item)
        taken = taken + raw
        if self.cut and self.rng.random() < self.cut:
            # The changes since the last checkpoint are lost with the crash; their input is not.
            self.queues[address][:0] = taken
            self._again[address] = len(taken) + (self._again.pop(address, 0) if alone else 0)
            self.cuts += 1
            self.cut_checkpoints += calls > 0
            return
        self._open[address] = (txn, taken, calls + 1)
        if alone or calls + 1 >= self.checkpoint or self.schedule == "pipeline":
            self._close(address)

    def _close(self, address: tuple[str, int]) -> None:
        """Commit a partition's changes since its last checkpoint."""
        txn, raw, _ = self._open.pop(address)
        txn.commit()
        self.history[address].extend(raw)
        if self.rewind and self.rng.random() < self.rewind:
            self.queues[address][:0] = raw
            self.redeliveries += len(raw)
        if self.duplicate and self.rng.random() < self.duplicate:
            copy = self.rng.choice(self.history[address])
            target = self.queues[address]
            target.insert(self.rng.randint(0, len(target)), copy)
            self.redeliveries += 1
