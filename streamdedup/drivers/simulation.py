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
        schedule: str = "random",
        max_steps: int = 2_000_000,
    ) -> None:
        if schedule not in ("random", "pipeline"):
            raise ValueError("schedule must be 'random' or 'pipeline'")
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
        # How many messages at a queue's head a cut call left, to be taken again as one call.
        self._again: dict[tuple[str, int], int] = {}

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
                return self.outputs[start:]
            self._step(self.rng.choice(busy))
        raise RuntimeError(f"the simulation did not settle within {self.max_steps} steps")

    def _step(self, address: tuple[str, int], size: int | None = None) -> None:
        stage, partition = address
        queue = self.queues[address]
        size = self._again.pop(address, None) or size or self.rng.randint(1, self.max_batch)
        raw, self.queues[address] = queue[:size], queue[size:]
        batch = [_decoder.decode(item) for item in raw]
        txn = Transaction(self.store)
        produced = self.engine.handle(stage, batch, txn.partition(stage, partition))
        self.deliveries += len(batch)
        for item in produced:
            if isinstance(item, Output):
                self.outputs.append(item)
            else:
                self._enqueue(item)
        if self.cut and self.rng.random() < self.cut:
            self.queues[address][:0] = raw  # the state changes are lost with the crash; the input is not
            self._again[address] = len(raw)
            self.cuts += 1
            return
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
