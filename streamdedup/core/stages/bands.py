"""Stage ``band``, keyed by LSH band key: the bucket of contents whose signatures agree on one band.

A joining content is answered with everyone else in the bucket: its near-duplicate candidates. Of two contents
that share a bucket, whichever joins second hears of the first, so every colliding pair is found in any order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamdedup.core.messages import BandAck, BandJoin, BandLeave, Message, Output
from streamdedup.core.state import BandRecord, PartitionState, Table

if TYPE_CHECKING:
    from streamdedup.core.engine import Engine

__all__ = ["BandStage"]


class BandStage:
    """Handler of the ``band`` stage."""

    name = "band"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of joins and leaves for one partition; answer every join."""
        table = Table(state, BandRecord)
        out: list[Message | Output] = []
        for message in messages:
            if isinstance(message, BandJoin):
                record = table.get_or_new(message.band_key)
                known = record.members.get(message.content_hash)
                if known is None or known < message.epoch:
                    record.members[message.content_hash] = message.epoch
                    table.mark(message.band_key)
                others = tuple(sorted(h for h in record.members if h != message.content_hash))
                out.append(BandAck(message.content_hash, message.band_key, message.epoch, others))
            elif isinstance(message, BandLeave):
                found = table.get(message.band_key)
                if found is None:
                    continue
                known = found.members.get(message.content_hash)
                if known is not None and known <= message.epoch:
                    del found.members[message.content_hash]
                    if found.members:
                        table.mark(message.band_key)
                    else:
                        table.delete(message.band_key)
            else:  # pragma: no cover - routing guarantees the types above
                raise TypeError(f"band stage cannot handle {type(message).__name__}")
        table.flush()
        return out
