"""Stage ``band``, keyed by LSH band key: the bucket of contents whose signatures agree on one band.

A joining content is answered with everyone else in the bucket: its near-duplicate candidates. Of two contents
that share a bucket, whichever joins second hears of the first, so every colliding pair is found in any order.

A bucket is stored as fixed-width entries, 32 bytes of content hash and 4 bytes of epoch each: most buckets
hold one content, and every new content touches one bucket per band, so this stage avoids any per-entry parsing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamdedup.core.messages import BandAck, BandJoin, BandLeave, Message, Output
from streamdedup.core.state import PartitionState

if TYPE_CHECKING:
    from streamdedup.core.engine import Engine

__all__ = ["BandStage", "decode_bucket", "encode_bucket"]

_ENTRY = 36


def decode_bucket(raw: bytes | None) -> dict[str, int]:
    """Return the members of a stored bucket: content hash -> epoch it joined under."""
    if not raw:
        return {}
    return {
        raw[i : i + 32].hex(): int.from_bytes(raw[i + 32 : i + _ENTRY], "big")
        for i in range(0, len(raw), _ENTRY)
    }


def encode_bucket(members: dict[str, int]) -> bytes:
    """Serialize a bucket's members, sorted by content hash."""
    return b"".join(bytes.fromhex(h) + epoch.to_bytes(4, "big") for h, epoch in sorted(members.items()))


class BandStage:
    """Handler of the ``band`` stage."""

    name = "band"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of joins and leaves for one partition; answer every join."""
        keys = list(
            dict.fromkeys(k for m in messages if isinstance(m, (BandJoin, BandLeave)) for k in m.band_keys)
        )
        get_many = getattr(state, "get_many", None)
        raws = get_many(keys) if get_many is not None else [state.get(k) for k in keys]
        buckets = {key: decode_bucket(raw) for key, raw in zip(keys, raws, strict=True)}
        changed: set[str] = set()
        # One answer per joining content (and epoch) for all the bands it joined in this batch.
        answers: dict[tuple[str, int], list[tuple[str, tuple[str, ...]]]] = {}
        for message in messages:
            content_hash, epoch = message.content_hash, message.epoch  # type: ignore[union-attr]
            if isinstance(message, BandJoin):
                answer = answers.setdefault((content_hash, epoch), [])
                for band_key in message.band_keys:
                    members = buckets[band_key]
                    known = members.get(content_hash)
                    if known is None or known < epoch:
                        members[content_hash] = epoch
                        changed.add(band_key)
                    others = (
                        () if len(members) == 1 else tuple(sorted(h for h in members if h != content_hash))
                    )
                    answer.append((band_key, others))
            elif isinstance(message, BandLeave):
                for band_key in message.band_keys:
                    members = buckets[band_key]
                    known = members.get(content_hash)
                    if known is not None and known <= epoch:
                        del members[content_hash]
                        changed.add(band_key)
            else:  # pragma: no cover - routing guarantees the types above
                raise TypeError(f"band stage cannot handle {type(message).__name__}")
        for key in sorted(changed):
            members = buckets[key]
            if members:
                state.put(key, encode_bucket(members))
            else:
                state.delete(key)
        return [
            BandAck(content_hash, epoch, tuple(bands)) for (content_hash, epoch), bands in answers.items()
        ]
