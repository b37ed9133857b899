"""The engine: the stage handlers built from one set of parameters, and how messages find their partition.

Drivers (embedded, simulation, Kafka) hold an :class:`Engine`, hand each stage a batch of messages for one of its
partitions with that partition's state, and deliver what comes back: messages to the stage and partition that
:meth:`Engine.destinations` names, outputs to their topics.

>>> from streamdedup.core.params import EngineParams
>>> engine = Engine(EngineParams())
>>> sorted(engine.stages)
['band', 'collection', 'content', 'source']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from streamdedup.core.messages import Message, Output, split
from streamdedup.core.model import InputEvent
from streamdedup.core.params import EngineParams
from streamdedup.core.policy import CanonicalPolicy
from streamdedup.core.signatures import SignatureScheme
from streamdedup.core.stages import BandStage, CollectionStage, ContentStage, SourceStage
from streamdedup.core.stages.context import StageContext
from streamdedup.core.tables import PartitionState

__all__ = ["Engine", "InjectedFault", "StageHandler"]


class StageHandler(Protocol):
    """A stage: a batch of messages for one partition and its state in, messages and outputs out."""

    name: str

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply ``messages`` (all routed to this partition) and return what they cause."""
        ...


class InjectedFault(RuntimeError):
    """Raised by the source stage on an event of the fault source (tests of failure isolation only)."""


class Engine:
    """The stage handlers for one set of :class:`EngineParams`.

    ``audit_exact_copies`` (``STREAMDEDUP_AUDIT_EXACT_COPIES``) has the source stage emit an ``audit``
    ``merge``/``exact`` record for each position that holds a copy of a known text; by default it emits none (the
    mapping says ``exact`` all the same). It is not a parameter: the state does not record it.

    ``fault_source_id`` is for tests only: the source stage then raises :class:`InjectedFault` on any batch holding
    an input event of that source, as a handler with a bug would, so tests can show that drivers isolate it.
    ``band_members``: the band stage also keeps each member's buckets (:mod:`streamdedup.core.stages.bands`), as
    a Kafka worker logs them.
    """

    def __init__(
        self,
        params: EngineParams,
        *,
        audit_exact_copies: bool = False,
        fault_source_id: str | None = None,
        band_members: bool = False,
    ) -> None:
        self.params = params
        self.audit_exact_copies = audit_exact_copies
        self.fault_source_id = fault_source_id
        self.context = StageContext.of(
            params, audit_exact_copies=audit_exact_copies, band_members=band_members
        )
        self.policy: CanonicalPolicy = self.context.policy
        self.scheme: SignatureScheme = self.context.scheme
        self.stages: dict[str, StageHandler] = {
            "source": SourceStage(self.context),
            "content": ContentStage(self.context),
            "band": BandStage(self.context),
            "collection": CollectionStage(self.context),
        }

    def handle(
        self, stage: str, messages: Sequence[Message], state: PartitionState
    ) -> list[Message | Output]:
        """Run one stage on a batch of messages for one of its partitions."""
        if self.fault_source_id is not None and stage == "source":
            for message in messages:
                if isinstance(message, InputEvent) and message.source_id == self.fault_source_id:
                    raise InjectedFault(f"injected fault on an event of {message.source_id!r}")
        return self.stages[stage].handle(messages, state)

    @staticmethod
    def destinations(message: Message, partitions: int) -> list[tuple[str, int, Message]]:
        """Return each stage partition (among ``partitions``) that receives ``message``, with what it receives."""
        return split(message, partitions)
