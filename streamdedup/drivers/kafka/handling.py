"""How a stage worker runs a handler on a call's messages and hands what it produced to the producer, and how a
call whose handler raised is applied again one message at a time, the message that fails dead-lettered.

:class:`Handling` is the part of :class:`~streamdedup.drivers.kafka.worker.StageWorker` that does it, beside its
:class:`~streamdedup.drivers.kafka.checkpoints.Checkpoints`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiokafka.errors import MessageSizeTooLargeError, RecordTooLargeError

from streamdedup.contract.codec import encode_for_dead_letter, event_key
from streamdedup.core.messages import Message
from streamdedup.core.model import InputEvent
from streamdedup.drivers.kafka.batches import encode_batches
from streamdedup.drivers.kafka.checkpoints import Checkpoints
from streamdedup.drivers.kafka.delivery import Sends, acknowledged
from streamdedup.drivers.kafka.topics import MAX_MESSAGE_BYTES
from streamdedup.errors import StateError
from streamdedup.store.base import Transaction

if TYPE_CHECKING:
    from aiokafka import TopicPartition

    from streamdedup.drivers.kafka.partitions import Checkpoint

__all__ = ["Handling", "InputFailure"]

logger = logging.getLogger(__name__)


class InputFailure(Exception):
    """A handler call failed because of what it was given (dead-letter it), not because Kafka failed."""

    def __init__(self, error: Exception) -> None:
        super().__init__(repr(error))
        self.error = error


class Handling(Checkpoints):
    """Run handlers and isolate the message that fails (a part of the worker)."""

    async def _apply(
        self,
        stage: str,
        partition: int,
        messages: list[Message],
        txn: Transaction,
        before_delivery: Callable[[], Awaitable[None]],
        pending: Checkpoint,
        alone: bool,
    ) -> int:
        """Run the handler in ``txn`` and hand what it produced to the producer (``alone``: and wait for Kafka);
        return how many output records it delivered.

        Raise :class:`InputFailure` for the input's faults (the handler raising, a record too large for Kafka),
        anything else as it is."""
        if not messages:
            return 0
        try:
            produced = self.engine.handle(stage, messages, txn.partition(stage, partition))
        except StateError:
            raise  # the store failed, not the input
        except Exception as exc:
            raise InputFailure(exc) from exc
        sends = self._sends()
        outputs = self._add_produced(sends, produced)
        if sends:
            await before_delivery()
        try:
            queued = await sends.queue()
            if alone:
                await acknowledged(queued)
        except (MessageSizeTooLargeError, RecordTooLargeError) as exc:
            raise InputFailure(exc) from exc
        pending.sent += queued
        self.metrics.observe_outputs(outputs)
        if stage == "source":
            self.metrics.events_processed.inc(sum(1 for m in messages if isinstance(m, InputEvent)))
        return len(outputs)

    async def _one_at_a_time(
        self,
        stage: str,
        tp: TopicPartition,
        carried: list[tuple[Any, Message]],
        txn: Transaction,
        letters: Sends,
        before_delivery: Callable[[], Awaitable[None]],
        pending: Checkpoint,
        alone: bool,
    ) -> int:
        """Apply each message in a nested transaction; dead-letter those that fail, with the error and origin.

        Return how many output records the messages that succeeded delivered."""
        self.metrics.isolated.labels(stage).inc(len(carried))
        delivered = 0
        for record, message in carried:
            nested = txn.nested()
            try:
                delivered += await self._apply(
                    stage, tp.partition, [message], nested, before_delivery, pending, alone
                )
            except InputFailure as failure:
                exc = failure.error
                error = f"processing failed in stage {stage} ({type(exc).__name__}: {exc})"
                logger.warning("dead-lettering a %s message: %s", stage, error)
                if isinstance(message, InputEvent):
                    value, key, reason = (
                        encode_for_dead_letter(message),
                        event_key(message).encode(),
                        "failed",
                    )
                else:
                    value = next(encode_batches([message], max_bytes=MAX_MESSAGE_BYTES))
                    key, reason = None, "stage"
                self._dead_letter(letters, tp, record, error, reason, value, key)
                continue
            nested.commit()
        return delivered
