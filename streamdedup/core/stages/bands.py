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

A batch is applied by :func:`apply_in_python`, or by its compiled twin ``apply_bands`` (``native/src/bands.rs``)
where the kernels are compiled (:mod:`streamdedup.core.kernels`); the tests compare the two.

**By member.** A Kafka worker's stage (``band_members`` in its :class:`StageContext`) also keeps the same entries
turned around: under ``m:<content id>``, the bands of this partition holding that id, each with its epoch
(:func:`member_writes`). The worker's changelog carries those records only (:func:`logged`): one per content and
partition where a bucket record per band was one per band (21 with the default parameters), and recovery rebuilds
the buckets from them (:func:`buckets_of_members`). Both views follow the same rule for one entry (a join adds it
or raises its epoch, a leave removes it if its epoch is not above the leave's), so the buckets rebuilt are the
buckets kept.

>>> writes = member_writes([(True, "ab" * 32, 3, ("000k", "001k"))], lambda keys: [None] * len(keys))
>>> [(key, members(value)) for key, value in writes]
[('m:abababababababab', {'000k': 3, '001k': 3})]
>>> buckets = buckets_of_members([("abababababababab", None, writes[0][1])], lambda keys: [None] * len(keys))
>>> sorted(key for key, _ in buckets)
['000k', '001k']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from streamdedup.core import kernels
from streamdedup.core.messages import (
    CONTENT_ID_CHARS,
    BandAck,
    BandJoin,
    BandLeave,
    Message,
    Output,
    content_id,
)
from streamdedup.core.tables import PartitionState, reader, write_all

if TYPE_CHECKING:
    from streamdedup.core.stages.context import StageContext

__all__ = [
    "MEMBER_PREFIX",
    "BandStage",
    "apply_in_python",
    "buckets_of_members",
    "logged",
    "member_writes",
    "members",
]

_HASH = CONTENT_ID_CHARS // 2  # bytes of a member's content id
_ENTRY = _HASH + 4

#: A join (True) or a leave: content hash, epoch, band keys.
Op = tuple[bool, str, int, Sequence[str]]
Write = tuple[str, "bytes | None"]
Answer = tuple[str, int, tuple[str, ...], tuple[tuple[str, int], ...]]

MEMBER_PREFIX = "m:"  # band keys start with the band's number: no bucket key takes this prefix
_MEMBER_ENCODER = msgspec.msgpack.Encoder()
_MEMBER_DECODER = msgspec.msgpack.Decoder(list[tuple[str, int]])


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


class BandStage:
    """Handler of the ``band`` stage."""

    name = "band"

    def __init__(self, context: StageContext) -> None:
        self._limit = context.params.max_candidates
        self._members = context.band_members

    def handle(self, messages: Sequence[Message], state: PartitionState) -> list[Message | Output]:
        """Apply a batch of joins and leaves for one partition; answer every join."""
        ops: list[Op] = []
        for message in messages:
            if isinstance(message, (BandJoin, BandLeave)):
                ops.append(
                    (isinstance(message, BandJoin), message.content_hash, message.epoch, message.band_keys)
                )
            else:  # pragma: no cover - routing guarantees the types above
                raise TypeError(f"band stage cannot handle {type(message).__name__}")
        compiled = kernels.native()
        apply = apply_in_python if compiled is None else compiled.apply_bands
        read = reader(state)
        writes, answers = apply(ops, read, self._limit)
        if self._members:
            writes = [*writes, *member_writes(ops, read)]
        write_all(state, writes)
        return [BandAck(*answer) for answer in answers]


def apply_in_python(
    ops: Sequence[Op], read: Callable[[list[str]], Sequence[bytes | None]], limit: int
) -> tuple[list[Write], list[Answer]]:
    """The band stage's batch in Python (the compiled ``apply_bands``' twin, which the tests compare it with).

    It applies the joins and leaves of ``ops`` in order to the buckets of their keys, read with one call of
    ``read``, and returns the changed buckets in the order their keys were read (None once empty), and one answer
    per joining content and epoch: the bands it joined and its best candidates.
    """
    keys = list(dict.fromkeys(k for op in ops for k in op[3]))
    buckets: dict[str, bytes] = {key: raw or b"" for key, raw in zip(keys, read(keys), strict=True)}
    changed: set[str] = set()
    # One answer per joining content (and epoch) for all the bands it joined in this batch.
    answers: dict[tuple[str, int], tuple[list[str], dict[bytes, int]]] = {}
    for join, content_hash, epoch, band_keys in ops:
        member = bytes.fromhex(content_id(content_hash))
        if join:
            answered, counts = answers.setdefault((content_hash, epoch), ([], {}))
            entry = member + epoch.to_bytes(4, "big")
            for band_key in band_keys:
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
                _count_others(raw, member, limit, counts)
        else:
            for band_key in band_keys:
                raw = buckets[band_key]
                offset, present = _find(raw, member)
                if present and int.from_bytes(raw[offset + _HASH : offset + _ENTRY], "big") <= epoch:
                    buckets[band_key] = raw[:offset] + raw[offset + _ENTRY :]
                    changed.add(band_key)
    writes: list[Write] = [(key, buckets[key] or None) for key in keys if key in changed]
    return writes, [
        (content_hash, epoch, tuple(answered), _best(counts, limit))
        for (content_hash, epoch), (answered, counts) in answers.items()
    ]


def _best(counts: dict[bytes, int], limit: int) -> tuple[tuple[str, int], ...]:
    """Return the ``limit`` candidates sharing the most bands (then the lowest ids) as (hex content id, bands)."""
    chosen = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return tuple((other.hex(), count) for other, count in chosen)


def logged(key: str) -> bool:
    """Whether a Kafka worker's changelog carries ``key`` of the band stage: member records, not buckets."""
    return key.startswith(MEMBER_PREFIX)


def members(raw: bytes | None) -> dict[str, int]:
    """Decode a member record: the epoch of the member's entry in each band key of the partition."""
    return {} if raw is None else dict(_MEMBER_DECODER.decode(raw))


def _encode_members(entries: dict[str, int]) -> bytes | None:
    return _MEMBER_ENCODER.encode(sorted(entries.items())) if entries else None


def member_writes(ops: Sequence[Op], read: Callable[[list[str]], Sequence[bytes | None]]) -> list[Write]:
    """Return the member records that ``ops`` change, each entry changed by the rule the buckets follow."""
    ids = list(dict.fromkeys(content_id(op[1]) for op in ops))
    keys = [MEMBER_PREFIX + member for member in ids]
    records = {member: members(raw) for member, raw in zip(ids, read(keys), strict=True)}
    changed: set[str] = set()
    for join, content_hash, epoch, band_keys in ops:
        member = content_id(content_hash)
        entries = records[member]
        for band_key in band_keys:
            held = entries.get(band_key)
            if join and (held is None or held < epoch):
                entries[band_key] = epoch
                changed.add(member)
            elif not join and held is not None and held <= epoch:
                del entries[band_key]
                changed.add(member)
    return [(MEMBER_PREFIX + m, _encode_members(records[m])) for m in ids if m in changed]


def buckets_of_members(
    changes: Sequence[tuple[str, bytes | None, bytes | None]],
    read: Callable[[list[str]], Sequence[bytes | None]],
) -> list[Write]:
    """Return the bucket writes that bring buckets kept with member records ``before`` to member records ``after``.

    ``changes`` holds (content id, member record before, after); ``read`` reads buckets as they are with the
    records before. Every entry that changed leaves with its old epoch, then joins with its new one.
    """
    leaves: dict[tuple[str, int], list[str]] = {}
    joins: dict[tuple[str, int], list[str]] = {}
    for member, before_raw, after_raw in changes:
        before, after = members(before_raw), members(after_raw)
        for band_key, epoch in before.items():
            if after.get(band_key) != epoch:
                leaves.setdefault((member, epoch), []).append(band_key)
        for band_key, epoch in after.items():
            if before.get(band_key) != epoch:
                joins.setdefault((member, epoch), []).append(band_key)
    ops: list[Op] = [(False, m, e, tuple(k)) for (m, e), k in leaves.items()]
    ops += [(True, m, e, tuple(k)) for (m, e), k in joins.items()]
    if not ops:
        return []
    compiled = kernels.native()
    apply = apply_in_python if compiled is None else compiled.apply_bands
    writes, _ = apply(ops, read, 1)
    return list(writes)
