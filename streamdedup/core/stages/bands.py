"""Stage ``band``, keyed by LSH band key: the bucket of contents whose signatures agree on one band.

A joining content is answered with everyone else in the bucket: its near-duplicate candidates. Of two contents
that share a bucket, whichever joins second hears of the first, so every colliding pair is found in any order.

A content verifies at most ``max_candidates`` others, and a dense neighbourhood must not make every join cost the
size of its buckets: a join reads at most that many others per band (the lowest content ids), and its answer
names at most that many candidates, those sharing the most of its bands (then the lowest ids).

A bucket is stored as fixed-width entries sorted by content id, 8 bytes of id (the hash's first 8 bytes,
:func:`~streamdedup.core.messages.content_id`) and 4 bytes of epoch each, and is searched and changed in place: most
buckets hold one content, and a crowded one costs a binary search. Buckets are most of the state, so they hold ids,
not whole hashes. Two texts sharing an id (among 10^8 texts, the chance that any two do is about 3 in 10,000)
share an entry where their bands meet, which can cost a candidate but never a wrong merge: every candidate is
verified against its text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamdedup.core.messages import (
    CONTENT_ID_CHARS,
    BandAck,
    BandJoin,
    BandLeave,
    Message,
    Output,
    content_id,
)
from streamdedup.core.state import PartitionState

if TYPE_CHECKING:
    from streamdedup.core.stages.context import StageContext

__all__ = ["BandStage"]

_HASH = CONTENT_ID_CHARS // 2  # bytes of a member's content id
_ENTRY = _HASH + 4


def _find(raw: bytes, member: bytes) -> tuple[int, bool]:
    """Return the offset at which ``member`` is or would be inserted in a bucket, and whether it is there."""
    low, high = 0, len(raw) // _ENTRY
    while low < high:
        middle = (low + high) // 2
        start = middle * _ENTRY
        if raw[start : start + _HASH] < member:
            low = middle + 1
        else:
            high = middle
    offset = low * _ENTRY
    return offset, raw[offset : offset + _HASH] == member


def _count_others(raw: bytes, member: bytes, limit: int, counts: dict[bytes, int]) -> None:
    """Count one shared band for each of the first ``limit`` content ids of a bucket other than ``member``."""
    if len(raw) == _ENTRY:
        return
    seen = 0
    for start in range(0, min(len(raw), (limit + 1) * _ENTRY), _ENTRY):
        other = raw[start : start + _HASH]
        if other != member and seen < limit:
            counts[other] = counts.get(other, 0) + 1
            seen += 1


def _best(counts: dict[bytes, int], limit: int) -> tuple[tuple[str, int], ...]:
    """Return the ``limit`` candidates sharing the most bands (then the lowest ids) as (hex content id, bands)."""
    chosen = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return tuple((other.hex(), count) for other, count in chosen)


class BandStage:
    """Handler of the ``band`` stage."""

    name = "band"

    def __init__(self, context: StageContext) -> None:
        self._limit = context.params.max_candidates

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of joins and leaves for one partition; answer every join."""
        keys = list(
            dict.fromkeys(k for m in messages if isinstance(m, (BandJoin, BandLeave)) for k in m.band_keys)
        )
        get_many = getattr(state, "get_many", None)
        raws = get_many(keys) if get_many is not None else [state.get(k) for k in keys]
        buckets: dict[str, bytes] = {key: raw or b"" for key, raw in zip(keys, raws, strict=True)}
        changed: set[str] = set()
        # One answer per joining content (and epoch) for all the bands it joined in this batch.
        answers: dict[tuple[str, int], tuple[list[str], dict[bytes, int]]] = {}
        for message in messages:
            content_hash, epoch = message.content_hash, message.epoch  # type: ignore[union-attr]
            member = bytes.fromhex(content_id(content_hash))
            if isinstance(message, BandJoin):
                answered, counts = answers.setdefault((content_hash, epoch), ([], {}))
                entry = member + epoch.to_bytes(4, "big")
                for band_key in message.band_keys:
                    raw = buckets[band_key]
                    if not raw:  # the common case: a bucket nobody else is in
                        buckets[band_key] = entry
                        changed.add(band_key)
                        answered.append(band_key)
                        continue
                    offset, present = _find(raw, member)
                    if not present:
                        raw = raw[:offset] + entry + raw[offset:]
                    elif int.from_bytes(raw[offset + _HASH : offset + _ENTRY], "big") < epoch:
                        raw = raw[:offset] + entry + raw[offset + _ENTRY :]
                    if raw is not buckets[band_key]:
                        buckets[band_key] = raw
                        changed.add(band_key)
                    answered.append(band_key)
                    _count_others(raw, member, self._limit, counts)
            elif isinstance(message, BandLeave):
                for band_key in message.band_keys:
                    raw = buckets[band_key]
                    offset, present = _find(raw, member)
                    if present and int.from_bytes(raw[offset + _HASH : offset + _ENTRY], "big") <= epoch:
                        buckets[band_key] = raw[:offset] + raw[offset + _ENTRY :]
                        changed.add(band_key)
            else:  # pragma: no cover - routing guarantees the types above
                raise TypeError(f"band stage cannot handle {type(message).__name__}")
        for key in sorted(changed):
            raw = buckets[key]
            if raw:
                state.put(key, raw)
            else:
                state.delete(key)
        return [
            BandAck(content_hash, epoch, tuple(answered), _best(counts, self._limit))
            for (content_hash, epoch), (answered, counts) in answers.items()
        ]
