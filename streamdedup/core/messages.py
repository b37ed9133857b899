"""Messages between stages, and the outputs a stage emits (design §2).

Every message names the key it is routed by; :func:`route` says which stage receives it. Messages carry state,
not deltas: each holds the sender's current view with a sequence number or version, so a receiver can apply any
message twice, or an older one after a newer one, and end in the same state. The messages with optional parts (a
decision, a member's report, attributes alone) leave them out of their encoding when unused.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, Literal

import msgspec

from streamdedup.core import kernels
from streamdedup.core.model import AclEvent, DecisionEvent, DeleteEvent, Rank, SourceAttrs, UpsertEvent
from streamdedup.core.partitioning import partition_for

__all__ = [
    "BROADCAST",
    "CONTENT_ID_CHARS",
    "STAGES",
    "STAGE_OF",
    "BandAck",
    "BandJoin",
    "BandLeave",
    "BoilerplateUpdate",
    "Info",
    "LineDecision",
    "LineUpdate",
    "LineageMember",
    "LineageStatus",
    "MemberReport",
    "Message",
    "NeighborUpdate",
    "Output",
    "PairDecision",
    "PairMark",
    "RefUpdate",
    "SourceRef",
    "SourceRefs",
    "SourceStatuses",
    "VerifyRequest",
    "VerifyResult",
    "content_id",
    "route",
    "router",
    "split",
    "split_refs",
    "split_refs_in_python",
    "unpack_refs",
]

#: The stages in pipeline order: per source, per content hash, per LSH band key, per collection.
STAGES = ("source", "content", "band", "collection")

#: The routing key of a message that goes to every partition of its stage.
BROADCAST = "\x00*"

#: The hex characters of a content hash that name it in LSH buckets and route it (its first 8 bytes). Band
#: buckets hold these short ids, not whole hashes, and a candidate is asked by its id; the content stage's index
#: finds the contents (normally one) that carry it, so that two texts sharing an id only ever cost a verification.
CONTENT_ID_CHARS = 16


def content_id(content_hash: str) -> str:
    """Return the short id of a content hash: what band buckets hold and what the content stage is routed by."""
    return content_hash[:CONTENT_ID_CHARS]


Role = Literal["pending", "canonical", "member", "dead"]


class SourceRef(msgspec.Struct, frozen=True, array_like=True):
    """One source position of a content, with the source's attributes."""

    source_id: str
    position: int
    attrs: SourceAttrs


class Info(msgspec.Struct, frozen=True, array_like=True):
    """What a content tells its near neighbours about itself; ``seq`` orders the updates of one content."""

    seq: int
    role: Role
    rank: Rank | None = None
    readers: tuple[str, ...] = ()
    target: str = ""  # the canonical's content hash, when role is "member"


class PairMark(msgspec.Struct, frozen=True, array_like=True):
    """A reviewer's decision about a pair, as each side keeps and tells it: ``keep_separate``, ``merge``, ``reopen``.

    Of two marks about one pair the higher ``version`` is in force.
    """

    kind: str
    version: int


class MemberReport(msgspec.Struct, frozen=True, array_like=True):
    """What a near member tells its canonical: its similarity, rank and first source positions.

    ``refs`` are the member's first positions in the canonical policy's order (at most ``max_chunk_sources``),
    ``count`` all its live positions: what the canonical's chunk record lists and counts.
    """

    jaccard: float
    refs: tuple[SourceRef, ...]
    count: int = 0
    rank: Rank | None = None


class RefUpdate(msgspec.Struct, frozen=True, omit_defaults=True, tag="ref", tag_field="op"):
    """Source → content: the positions at which ``source_id`` (at ``version``) holds this content."""

    content_hash: str
    source_id: str
    version: int
    positions: tuple[int, ...]  # empty: the source no longer holds this content
    texts: tuple[str, ...] = ()  # the original chunk text at each position
    norm: str = ""
    attrs: SourceAttrs | None = None
    # Only the attributes changed (an ACL event, a preference): the positions are those of the previous version
    # and the content already has the texts, which sources do not keep.
    attrs_only: bool = False
    attrs_seq: int = 0  # orders changes of the attributes within one version (a reviewer's preference)


class SourceRefs(msgspec.Struct, frozen=True, tag="refs", tag_field="op"):
    """Source → content: what a new version of ``source_id`` tells the contents of one partition, packed.

    ``refs`` is MessagePack: an array of ``[content_hash, positions, texts, norm]`` arrays sorted by content hash,
    one per content that this version or the one before holds (the compiled ``source_refs`` writes it). Each
    stands for the :class:`RefUpdate` that :func:`unpack_refs` makes of it: ``attrs`` go with the contents the
    version holds, and a content it no longer holds has no positions, texts or ``norm``. A source's upsert sends
    one message, which drivers divide among the content partitions (:func:`split`), and the compiled content
    stage reads without a Python object per content.
    """

    source_id: str
    version: int
    attrs_seq: int
    attrs: SourceAttrs | None
    refs: bytes


_PackedRef = tuple[str, tuple[int, ...], tuple[str, ...], str]
_REFS = msgspec.msgpack.Decoder(list[_PackedRef])
_PACK = msgspec.msgpack.Encoder()


def unpack_refs(message: SourceRefs) -> list[RefUpdate]:
    """Return the reference updates a :class:`SourceRefs` stands for, in its order."""
    return [
        RefUpdate(
            content_hash,
            message.source_id,
            message.version,
            positions,
            texts,
            norm,
            message.attrs if positions else None,
            attrs_seq=message.attrs_seq,
        )
        for content_hash, positions, texts, norm in (_REFS.decode(message.refs) if message.refs else ())
    ]


def split_refs(refs: bytes, partitions: int) -> list[tuple[int, bytes]]:
    """Return ``(partition, refs)`` for each content partition that holds some of a packed list's contents, in the
    order of their first content: compiled where the kernels are, else :func:`split_refs_in_python`."""
    compiled = kernels.native()
    if compiled is None:
        return split_refs_in_python(refs, partitions)
    return compiled.split_refs(refs, partitions)  # type: ignore[no-any-return]


def split_refs_in_python(refs: bytes, partitions: int) -> list[tuple[int, bytes]]:
    """:func:`split_refs` in Python (the compiled kernel's twin, which the tests compare it with)."""
    groups: dict[int, list[_PackedRef]] = {}
    for entry in _REFS.decode(refs) if refs else ():
        groups.setdefault(partition_for(content_id(entry[0]), partitions), []).append(entry)
    return [(partition, _PACK.encode(entries)) for partition, entries in groups.items()]


class SourceStatuses(msgspec.Struct, frozen=True, tag="statuses", tag_field="op"):
    """Content → source: which chunk each content of a partition's batch that holds the source belongs to now.

    ``statuses`` is a packed status list (:func:`~streamdedup.core.state.pack_statuses`: MessagePack, one
    :class:`~streamdedup.core.state.StatusEntry` per content, sorted by content hash), what the source keeps
    too: a batch sends a source one message, which the source takes in with one compiled call.
    """

    source_id: str
    statuses: bytes


class BandJoin(msgspec.Struct, frozen=True, tag="join", tag_field="op"):
    """Content → band: add this content to the buckets of ``band_keys`` and tell it who else is there.

    A content sends one join with all its band keys; drivers deliver one join per band partition, holding the keys
    of that partition (:func:`split`).
    """

    content_hash: str
    epoch: int
    band_keys: tuple[str, ...]


class BandLeave(msgspec.Struct, frozen=True, tag="leave", tag_field="op"):
    """Content → band: the content is gone from the buckets of ``band_keys`` (delivered like :class:`BandJoin`)."""

    content_hash: str
    epoch: int
    band_keys: tuple[str, ...]


class BandAck(msgspec.Struct, frozen=True, tag="ack", tag_field="op"):
    """Band → content: the bands answered, and the other contents found in their buckets (candidates).

    Each candidate is named by its :func:`content_id` and comes with the number of those bands it shares with the
    content, an estimate of their Jaccard.
    """

    content_hash: str
    epoch: int
    bands: tuple[str, ...]
    candidates: tuple[tuple[str, int], ...] = ()  # (content id, bands shared)


class VerifyRequest(msgspec.Struct, frozen=True, omit_defaults=True, tag="verify", tag_field="op"):
    """Content → content: check whether the sender is a near copy of the receiver.

    ``content_hash`` is the receiver's whole hash, or its :func:`content_id` when a band named it as a candidate:
    every content carrying that id then answers.
    """

    content_hash: str
    sender: str
    epoch: int
    norm: str
    text: str
    info: Info
    decision: PairMark | None = None  # the sender's decision about the pair, if any
    report: MemberReport | None = None  # the sender's report, when the receiver is its canonical
    # The sender's sketch, when it asks a band candidate: one far below the threshold is dismissed unread.
    sketch: bytes = b""


class VerifyResult(msgspec.Struct, frozen=True, omit_defaults=True, tag="verified", tag_field="op"):
    """Content → content: the verified similarity, and whether the pair may merge.

    ``conflict`` holds the sender's fact tokens when the pair is above the threshold but states different facts
    and the receiver is the one to flag it (``text`` is then the sender's original text).
    """

    content_hash: str
    sender: str
    epoch: int
    jaccard: float
    edge: bool
    info: Info
    conflict: tuple[str, ...] | None = None  # the sender's fact tokens, when the facts differ
    text: str = ""
    decision: PairMark | None = None  # the decision about the pair the answer was computed under
    report: MemberReport | None = None  # the sender's report, when the receiver is its canonical


class NeighborUpdate(msgspec.Struct, frozen=True, tag="neighbor", tag_field="op"):
    """Content → content: the sender's new state; a report when the receiver is the sender's canonical."""

    content_hash: str
    sender: str
    info: Info
    report: MemberReport | None = None


class LineUpdate(msgspec.Struct, frozen=True, tag="lines", tag_field="op"):
    """Source → collection: the lines a source's new version adds to and removes from its collection's counts."""

    collection: str
    source_id: str
    version: int
    counted: bool  # whether the source counts as a document of the collection after this version
    # Packed (state.pack_added): a MessagePack array of [line hash, normalized line], sorted by hash.
    added: bytes = b""
    removed: tuple[str, ...] = ()


class PairDecision(msgspec.Struct, frozen=True, tag="pair", tag_field="op"):
    """Source (the decision ledger) → content: a reviewer's decision about this content and ``other``."""

    content_hash: str
    other: str
    mark: PairMark


class LineDecision(msgspec.Struct, frozen=True, tag="line", tag_field="op"):
    """Source (the decision ledger) → collection: a reviewer's decision about a normalized line."""

    collection: str
    line: str  # normalized
    kind: str  # "allow", "strip" or "auto"
    version: int


class BoilerplateUpdate(msgspec.Struct, frozen=True, tag="boilerplate", tag_field="op"):
    """Collection → every source partition: the collection's current boilerplate lines."""

    collection: str
    seq: int
    lines: dict[str, str]  # line hash -> normalized line


class LineageMember(msgspec.Struct, frozen=True, tag="lineage_member", tag_field="op"):
    """Source → collection: ``source_id``, at ``version``, belongs to ``lineage`` of ``collection`` with ``order``
    (its place there, :mod:`streamdedup.core.lineage`); ``order`` None: it does not any more (deleted, or moved to
    another lineage or none)."""

    collection: str
    lineage: str
    source_id: str
    version: int
    order: tuple[Any, ...] | None = None


class LineageStatus(msgspec.Struct, frozen=True, tag="lineage_status", tag_field="op"):
    """Collection → source: after change ``seq`` of ``lineage``, ``source_id`` at ``version`` is its newest live
    member (``outdated_by`` empty) or outdated by the newest, ``outdated_by``."""

    source_id: str
    version: int
    collection: str
    lineage: str
    seq: int
    outdated_by: str = ""


Message = (
    UpsertEvent
    | DeleteEvent
    | AclEvent
    | SourceStatuses
    | RefUpdate
    | SourceRefs
    | BandAck
    | VerifyRequest
    | VerifyResult
    | NeighborUpdate
    | BandJoin
    | BandLeave
    | LineUpdate
    | BoilerplateUpdate
    | DecisionEvent
    | PairDecision
    | LineDecision
    | LineageMember
    | LineageStatus
)


class Output(msgspec.Struct, frozen=True):
    """A record for an output topic; ``value`` None is a tombstone.

    A value is the record's JSON object, or that object already encoded (``msgspec.Raw``: the compiled stages
    write their ``canonical-chunks`` and ``source-mappings`` values so, the parallel driver hands over its
    workers' outputs so, and a JSON encoder writes both alike). Read a value with :meth:`record`.
    """

    topic: str
    key: str | None
    value: dict[str, Any] | msgspec.Raw | None

    def record(self) -> dict[str, Any] | None:
        """Return the value as its JSON object (decoded, if it came encoded), or None for a tombstone."""
        value = self.value
        if isinstance(value, msgspec.Raw):
            decoded: dict[str, Any] = msgspec.json.decode(value)
            return decoded
        return value


_ROUTES: dict[type, tuple[str, str]] = {
    UpsertEvent: ("source", "source_id"),
    DeleteEvent: ("source", "source_id"),
    AclEvent: ("source", "source_id"),
    DecisionEvent: ("source", "source_id"),
    PairDecision: ("content", "content_hash"),
    LineDecision: ("collection", "collection"),
    SourceStatuses: ("source", "source_id"),
    LineUpdate: ("collection", "collection"),
    LineageMember: ("collection", "collection"),
    LineageStatus: ("source", "source_id"),
    RefUpdate: ("content", "content_hash"),
    BandAck: ("content", "content_hash"),
    VerifyRequest: ("content", "content_hash"),
    VerifyResult: ("content", "content_hash"),
    NeighborUpdate: ("content", "content_hash"),
}


#: The stage that handles each kind of message (what :func:`route` says, without the key).
STAGE_OF: dict[type, str] = {
    **{kind: stage for kind, (stage, _) in _ROUTES.items()},
    BoilerplateUpdate: "source",
    SourceRefs: "content",
    BandJoin: "band",
    BandLeave: "band",
}


def route(message: Message) -> tuple[str, str]:
    """Return the stage that handles ``message`` and the key it is partitioned by (:data:`BROADCAST`: all).

    A band message is partitioned by each of its band keys, and a :class:`SourceRefs` by each of its contents:
    this returns the first; :func:`split` divides them. A content is partitioned by its :func:`content_id`, so
    that a request naming a candidate by its id reaches it.
    """
    if isinstance(message, BoilerplateUpdate):
        return "source", BROADCAST
    if isinstance(message, (BandJoin, BandLeave)):
        return "band", message.band_keys[0]
    if isinstance(message, SourceRefs):
        return "content", content_id(_REFS.decode(message.refs)[0][0]) if message.refs else ""
    stage, attribute = _ROUTES[type(message)]
    key: str = getattr(message, attribute)
    return stage, content_id(key) if stage == "content" else key


def split(message: Message, partitions: int) -> list[tuple[str, int, Message]]:
    """Return each (stage, partition, message) that delivering ``message`` among ``partitions`` takes.

    A band message becomes one message per band partition that its keys fall in, each holding those keys in their
    original order, and a :class:`SourceRefs` one per content partition its contents fall in (compiled:
    ``split_refs``); a broadcast goes to every partition; any other message goes to the partition of its key.
    """
    if isinstance(message, (BandJoin, BandLeave)):
        if partitions == 1:
            return [("band", 0, message)]
        groups: dict[int, list[str]] = {}
        for band_key in message.band_keys:
            groups.setdefault(partition_for(band_key, partitions), []).append(band_key)
        return [
            ("band", partition, msgspec.structs.replace(message, band_keys=tuple(keys)))
            for partition, keys in groups.items()
        ]
    if isinstance(message, SourceRefs):
        if partitions == 1:
            return [("content", 0, message)] if message.refs else []
        return [
            ("content", partition, msgspec.structs.replace(message, refs=refs))
            for partition, refs in split_refs(message.refs, partitions)
        ]
    stage, key = route(message)
    if key == BROADCAST:
        return [(stage, p, message) for p in range(partitions)]
    return [(stage, partition_for(key, partitions), message)]


def router(partitions: int) -> Callable[[Message], list[tuple[str, int, Message]]]:
    """Return :func:`split` among ``partitions``, faster for the messages that go to one partition of their key.

    A driver that spreads partitions over processes routes every message a handler returns; most of them name
    their partition by one attribute (a content status, a reference update).
    """
    keyed = {
        kind: (stage, attrgetter(attribute), stage == "content")
        for kind, (stage, attribute) in _ROUTES.items()
    }

    def destinations(message: Message) -> list[tuple[str, int, Message]]:
        found = keyed.get(type(message))
        if found is None:  # a band message or a broadcast
            return split(message, partitions)
        stage, key_of, by_id = found
        key: str = key_of(message)
        return [(stage, partition_for(key[:CONTENT_ID_CHARS] if by_id else key, partitions), message)]

    return destinations
