"""Partition-local state: the records each stage keeps, and the packed lists they hold.

The records are encoded as MessagePack by msgspec (never pickle); a handler reaches them through
:mod:`streamdedup.core.tables` (:class:`~streamdedup.core.tables.PartitionState`, the typed
:class:`~streamdedup.core.tables.Table`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any, Literal

import msgspec

from streamdedup.core.messages import Info, MemberReport, PairMark
from streamdedup.core.model import EVERYONE, DecisionEvent, DeleteEvent, Rank, SourceAttrs, UpsertEvent
from streamdedup.core.normalize import normalize

__all__ = [
    "BoilerplateSnapshot",
    "ChunkStatus",
    "CollectionMember",
    "CollectionRecord",
    "Conflict",
    "ContentIds",
    "ContentRecord",
    "DecisionRecord",
    "LineMark",
    "LineRecord",
    "LineageMemberRecord",
    "LineageRecord",
    "MappingEntry",
    "NeighborEntry",
    "RefEntry",
    "Retained",
    "SourceRecord",
    "StatusEntry",
    "TopRef",
    "id_key",
    "pack_added",
    "pack_lines",
    "pack_statuses",
    "ref_key",
    "ref_prefix",
    "source_texts",
    "unpack_added",
    "unpack_lines",
    "unpack_statuses",
]


class MappingEntry(msgspec.Struct, frozen=True, array_like=True):
    """One position of a source mapping (design §4, ``source-mappings``)."""

    position: int
    content_hash: str
    chunk_id: str
    relation: Literal["canonical", "exact", "near"]
    jaccard: float


class StatusEntry(msgspec.Struct, frozen=True, array_like=True):
    """What one content last told a source (an entry of a packed status list: :func:`pack_statuses`)."""

    content_hash: str
    seq: int
    version: int
    chunk_id: str  # empty while the content is undecided or gone; the content's own hash is kept as "="
    relation: Literal["canonical", "near"]
    jaccard: float
    canonical_position: int  # the canonical position if it is in this source, else -1


def pack_statuses(entries: Iterable[StatusEntry]) -> bytes:
    """Return the packed status list of ``entries`` (one per content): MessagePack, sorted by content hash.

    A source keeps its statuses so, and the content stage sends them so (``SourceStatuses``); the compiled
    ``merge_statuses`` and ``source_mapping`` read them without a Python object per entry.
    """
    return _ENCODER.encode(sorted(entries, key=attrgetter("content_hash")))


def pack_lines(hashes: Sequence[str]) -> bytes:
    """Return the packed list of line hashes (a MessagePack array of strings; empty bytes for none)."""
    return _ENCODER.encode(hashes) if hashes else b""


def unpack_lines(packed: bytes) -> tuple[str, ...]:
    """Return the hashes of a packed line hash list."""
    return _LINE_HASHES.decode(packed) if packed else ()


def pack_added(lines: Sequence[tuple[str, str]]) -> bytes:
    """Return the packed ``(line hash, normalized line)`` pairs of a line update (``LineUpdate.added``)."""
    return _ENCODER.encode(lines) if lines else b""


def unpack_added(packed: bytes) -> tuple[tuple[str, str], ...]:
    """Return the ``(line hash, normalized line)`` pairs of a packed ``LineUpdate.added``."""
    return _ADDED.decode(packed) if packed else ()


def unpack_statuses(packed: bytes) -> dict[str, StatusEntry]:
    """Return the entries of a packed status list by content hash (empty bytes: none)."""
    if not packed:
        return {}
    return {entry.content_hash: entry for entry in _STATUSES.decode(packed)}


class SourceRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """State of the ``source`` stage for one source_id."""

    version: int = -1
    deleted: bool = False
    attrs: SourceAttrs | None = None
    collection: str = "default"
    # The content hash at each position (the texts are the content stage's).
    chunks: list[str] = msgspec.field(default_factory=list)
    lines: bytes = b""  # the line hashes counted in lines_collection, sorted and packed (pack_lines)
    lines_collection: str = ""
    statuses: bytes = b""  # what its contents last told it: a packed status list (pack_statuses)
    mapped: bytes = b""  # a fingerprint per position of the last mapping sent (what changes in the next)
    mapped_version: int = -1  # the version the last mapping sent was for (-1: none was sent)
    # A reviewer's prefer/unprefer decision in force (its version; -1: none), kept across versions and deletes.
    preferred: bool = False
    preferred_version: int = -1
    # Counts changes of the attributes that are not a new version (a preference): contents order updates by
    # (version, attrs_seq).
    attrs_seq: int = 0
    # The lineage the source's live version joined (docs/lineages.md; '' for none), in lineage_collection, at
    # lineage_version; the highest status number heard from it for that version (attrs.outdated_by is what it said).
    lineage: str = ""
    lineage_collection: str = ""
    lineage_version: int = -1
    lineage_seq: int = 0


class DecisionRecord(msgspec.Struct, kw_only=True, array_like=True):
    """The version of the decision in force about one pair or line (the source stage's ledger of decisions)."""

    version: int = -1


class Retained(msgspec.Struct, array_like=True):
    """The event that rebuilds what the source stage holds of a source or a decision (:mod:`streamdedup.core.retained`):
    a source's latest upsert (its ACL and version those of the latest ``acl`` event), or its delete; a decision."""

    event: UpsertEvent | DeleteEvent | DecisionEvent | None = None


class LineMark(msgspec.Struct, frozen=True, array_like=True):
    """A decision about a line of a collection: ``allow`` or ``strip`` (``auto``: the counts decide)."""

    kind: str
    version: int
    text: str


class BoilerplateSnapshot(msgspec.Struct, kw_only=True):
    """A source partition's copy of one collection's boilerplate lines (line hash -> normalized line)."""

    seq: int = 0
    lines: dict[str, str] = msgspec.field(default_factory=dict)


class CollectionRecord(msgspec.Struct, kw_only=True):
    """State of the ``collection`` stage for one collection: document count and current boilerplate."""

    docs: int = 0
    seq: int = 0
    boilerplate: dict[str, str] = msgspec.field(default_factory=dict)
    decided: dict[str, LineMark] = msgspec.field(default_factory=dict)  # line hash -> a reviewer's decision


class LineRecord(msgspec.Struct, kw_only=True, array_like=True):
    """How many documents of a collection contain one normalized line."""

    count: int = 0
    text: str = ""


class CollectionMember(msgspec.Struct, kw_only=True, array_like=True):
    """The last version of a source the collection counted (older line updates are ignored)."""

    version: int = -1
    counted: bool = False


class RefEntry(msgspec.Struct, kw_only=True, array_like=True, omit_defaults=True):
    """The positions one source holds a content at; empty positions are a tombstone of that version.

    Stored under :func:`ref_key`, one key per (content, source), so a copy costs the same however many a text has.
    """

    version: int = -1
    positions: tuple[int, ...] = ()
    texts: tuple[str, ...] = ()  # empty when every original text equals the content's display text
    attrs: SourceAttrs | None = None
    attrs_seq: int = 0  # orders attribute changes within a version (see SourceRecord.attrs_seq)


class NeighborEntry(msgspec.Struct, kw_only=True, array_like=True):
    """A verified near copy: exact Jaccard (at least the threshold, no fact conflict) and its last known state."""

    jaccard: float
    info: Info


class Conflict(msgspec.Struct, frozen=True, array_like=True):
    """A better-ranked text above the threshold that states different facts: what a ``fact_conflict`` names."""

    content_hash: str
    jaccard: float
    rank: Rank
    text: str
    facts: tuple[str, ...]  # its fact tokens


class ChunkStatus(msgspec.Struct, frozen=True, array_like=True):
    """What a content last told its sources: its chunk, how it relates to it, and the canonical position."""

    chunk_id: str
    relation: Literal["canonical", "near"]
    jaccard: float
    canonical_ref: tuple[str, int] | None


class TopRef(msgspec.Struct, frozen=True, array_like=True):
    """A live source position among a content's first ones in the canonical policy's order."""

    source_id: str
    position: int
    attrs: SourceAttrs
    text: str = ""  # the original chunk text, when it differs from the content's text


class ContentIds(msgspec.Struct, kw_only=True, array_like=True):
    """The contents of a partition whose hash begins with one content id: normally one.

    Band buckets name candidates by content id (:func:`~streamdedup.core.messages.content_id`); a verify request
    addressed by id reaches every content listed here. Written when a content first joins its bands, kept after.
    """

    hashes: list[str] = msgspec.field(default_factory=list)
    # Each content's sketch (:mod:`streamdedup.core.sketches`), in the order of ``hashes``; empty where unknown.
    sketches: list[bytes] = msgspec.field(default_factory=list)


def id_key(content_id: str) -> str:
    """Return the key of the :class:`ContentIds` of one content id."""
    return f"i\x00{content_id}"


def ref_prefix(content_hash: str) -> str:
    """Return the prefix of the keys of a content's :class:`RefEntry` records."""
    return f"r\x00{content_hash}\x00"


def ref_key(content_hash: str, source_id: str) -> str:
    """Return the key of the :class:`RefEntry` of one source of a content."""
    return f"r\x00{content_hash}\x00{source_id}"


class ContentRecord(msgspec.Struct, kw_only=True, dict=True, omit_defaults=True):
    """State of the ``content`` stage for one content hash (one distinct normalized text).

    Its sources are separate :class:`RefEntry` records; the record keeps what is needed per copy in O(1): the
    number of live positions, how many live sources each principal reads, and the first ``max_chunk_sources``
    live positions in the canonical policy's order (``top``; the best one is the canonical position).
    """

    seq: int = 0
    epoch: int = 0
    alive: bool = False
    has_text: bool = False
    # The original text of the first source and its normalized form, stored once per text; the normalized form
    # is stored only where it is not normalize(text) (markup stripped), and ``norm`` always holds it.
    norm_stored: str = msgspec.field(default="", name="norm")
    text: str = ""
    length: int = 0  # of the normalized text (the canonical policy's "length")
    # Joined its LSH bands in this epoch (its signature is computed again from the text to leave them).
    indexed: bool = False
    positions: int = 0
    principals: dict[str, int] = msgspec.field(default_factory=dict)
    top: list[TopRef] = msgspec.field(default_factory=list)
    # Discovery of near copies for the current epoch.
    pending_bands: list[str] = msgspec.field(default_factory=list)
    candidates: dict[str, int] = msgspec.field(default_factory=dict)  # bands shared, while bands are pending
    sketch: bytes = b""  # its signature's sketch, until its band candidates are asked to verify the pair
    pending_verify: list[str] = msgspec.field(default_factory=list)
    checked: list[str] = msgspec.field(default_factory=list)
    neighbors: dict[str, NeighborEntry] = msgspec.field(default_factory=dict)
    # The decision and what was last told to others.
    role: Literal["pending", "canonical", "member", "dead"] = "pending"
    target: str = ""
    jaccard: float = 1.0
    canonical_ref: tuple[str, int] | None = None
    members: dict[str, MemberReport] = msgspec.field(default_factory=dict)
    sent_info: Info | None = None
    sent_report: MemberReport | None = None
    sent_status: ChunkStatus | None = None
    record_digest: str = ""
    revision: int = 0
    flagged: list[str] = msgspec.field(default_factory=list)
    # A text raises at most one fact_conflict flag per life: against the better-ranked conflicting text it would
    # otherwise have joined (the best known, kept here until its own discovery is complete).
    conflicted: bool = False
    conflict: Conflict | None = None
    flag_partner: str = ""  # the text this life's fact_conflict flag names, until a decision resolves it
    # The other side of every flag this content raised (in any life) that no decision has resolved yet.
    raised: list[str] = msgspec.field(default_factory=list)
    # Reviewers' decisions about pairs with this content (other content hash -> the decision in force).
    decisions: dict[str, PairMark] = msgspec.field(default_factory=dict)

    @property
    def norm(self) -> str:
        """The normalized text (derived from the original text on first use where it is not stored)."""
        found: str | None = self.__dict__.get("_norm")
        if found is None:
            found = self.__dict__["_norm"] = self.norm_stored or (
                normalize(self.text) if self.has_text else ""
            )
        return found

    def set_texts(self, text: str, norm: str) -> None:
        """Keep a content's original and normalized text (the latter stored only if it is not derived)."""
        self.text, self.has_text, self.length = text, True, len(norm)
        # Pre-chunked input is often normalized already: then the text is its own normal form (normalization is
        # idempotent), and normalizing it again only to find that out costs about 10 us a new content.
        self.norm_stored = "" if text == norm or normalize(text) == norm else norm
        self.__dict__["_norm"] = norm

    def readers(self) -> tuple[str, ...]:
        """Return the union of the ACLs of the live sources (``("*",)`` if one admits everyone)."""
        if EVERYONE in self.principals:
            return (EVERYONE,)
        return tuple(sorted(self.principals))


def source_texts(
    read: Callable[[str], bytes | None], source_id: str, hashes: list[str]
) -> list[tuple[str, str]]:
    """Return the (original, normalized) text of each position of a source, from its contents' records.

    ``read`` returns a key of the content stage partition that holds the content (sources keep hashes only).
    """
    contents = msgspec.msgpack.Decoder(ContentRecord)
    refs = msgspec.msgpack.Decoder(RefEntry)
    out = []
    for position, content_hash in enumerate(hashes):
        raw = read(content_hash)
        if raw is None:
            out.append(("", ""))
            continue
        record = contents.decode(raw)
        raw_ref = read(ref_key(content_hash, source_id))
        text = record.text
        if raw_ref is not None:
            entry = refs.decode(raw_ref)
            if entry.texts and position in entry.positions:
                text = entry.texts[entry.positions.index(position)]
        out.append((text, record.norm))
    return out


_ENCODER = msgspec.msgpack.Encoder()
_STATUSES = msgspec.msgpack.Decoder(list[StatusEntry])
_LINE_HASHES = msgspec.msgpack.Decoder(tuple[str, ...])
_ADDED = msgspec.msgpack.Decoder(tuple[tuple[str, str], ...])


class LineageMemberRecord(msgspec.Struct, array_like=True):
    """A source's last version seen by its lineage, and its order key (None: it left)."""

    version: int
    order: Any = None


class LineageRecord(msgspec.Struct, kw_only=True):
    """State of one lineage: its members (live and left), the last change's number, what each member was told."""

    members: dict[str, LineageMemberRecord] = msgspec.field(default_factory=dict)
    seq: int = 0
    #: What each live member was last told, at which of its versions: source id -> (version, outdated_by).
    told: dict[str, tuple[int, str]] = msgspec.field(default_factory=dict)
