"""A reference model: the live sources an event sequence leaves, and the view the engine must converge to.

It computes the same semantics as the engine in the simplest centralized way, with no messages, partitions or
incremental state: apply the version rules, collect the live contents, find LSH candidate pairs, verify them,
and cluster the contents in canonical-policy order. Tests compare the engine's view, under any driver and any
interleaving, with this one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from streamdedup.core.clustering import decide
from streamdedup.core.engine import Engine
from streamdedup.core.facts import fact_conflict
from streamdedup.core.lineage import LineageRules
from streamdedup.core.messages import Info, MemberReport, SourceRef
from streamdedup.core.model import (
    AclEvent,
    DecisionEvent,
    DeleteEvent,
    InputEvent,
    Rank,
    SourceAttrs,
    format_timestamp,
    union_readers,
)
from streamdedup.core.normalize import normalize
from streamdedup.core.params import EngineParams
from streamdedup.core.records import chunk_value, mapped_attrs, mapping_value, review_key
from streamdedup.core.shingles import jaccard_of_sets, shingle_set
from streamdedup.core.stages.source_chunks import document_chunks
from streamdedup.core.state import MappingEntry, SourceRecord, source_texts

__all__ = [
    "LiveSource",
    "Reference",
    "decisions_in_force",
    "elect_lineages",
    "live_sources",
    "live_sources_in_store",
]


@dataclass(frozen=True)
class LiveSource:
    """A source that is live: its version, attributes, chunk texts and their normalized plain texts."""

    source_id: str
    version: int
    attrs: SourceAttrs
    texts: tuple[str, ...]
    norms: tuple[str, ...]
    collection: str = "default"
    lineage: str | None = None  # the upsert's own lineage and version, if it named one
    lineage_version: str | None = None

    @property
    def hashes(self) -> list[str]:
        """Return the content hash of every position."""
        return [hashlib.sha256(n.encode("utf-8")).hexdigest() for n in self.norms]


def live_sources(events: Iterable[InputEvent], params: EngineParams | None = None) -> dict[str, LiveSource]:
    """Apply the version rules of the contract and return the live sources (chunked without boilerplate).

    A reviewer's ``prefer``/``unprefer`` decision (the newest about a source) sets its attributes' ``preferred``;
    the lineage rules of ``params`` set ``outdated_by`` of every live source that is not its lineage's newest live
    member (:func:`elect_lineages`).
    """
    params = params or EngineParams()
    versions: dict[str, int] = {}
    preferences: dict[str, tuple[int, bool]] = {}
    live: dict[str, LiveSource] = {}
    for event in events:
        if isinstance(event, DecisionEvent):
            source_id = event.subject_source
            if source_id is None or event.version <= preferences.get(source_id, (-1, False))[0]:
                continue
            preferences[source_id] = (event.version, event.kind == "prefer")
            current = live.get(source_id)
            if current is not None:
                attrs = msgspec.structs.replace(current.attrs, preferred=event.kind == "prefer")
                live[source_id] = dataclasses.replace(current, attrs=attrs)
            continue
        if event.version <= versions.get(event.source_id, -1):
            continue
        versions[event.source_id] = event.version
        if isinstance(event, DeleteEvent):
            live.pop(event.source_id, None)
        elif isinstance(event, AclEvent):
            current = live.get(event.source_id)
            if current is not None:
                attrs = msgspec.structs.replace(current.attrs, acl=event.acl)  # keeps ``preferred``
                live[event.source_id] = dataclasses.replace(current, version=event.version, attrs=attrs)
        else:
            chunks = document_chunks(event, params)
            attrs = event.attrs
            if preferences.get(event.source_id, (-1, False))[1]:
                attrs = msgspec.structs.replace(attrs, preferred=True)
            live[event.source_id] = LiveSource(
                event.source_id,
                event.version,
                attrs,
                tuple(c.original for c in chunks),
                tuple(normalize(c.plain) for c in chunks),
                event.collection,
                event.lineage,
                event.lineage_version,
            )
    return elect_lineages(live, params)


def elect_lineages(live: dict[str, LiveSource], params: EngineParams) -> dict[str, LiveSource]:
    """Return ``live`` with each source's ``outdated_by``: empty for the newest live member of its lineage (the
    highest order key, then the highest source id) and for a source in no lineage, else that newest member."""
    rules = LineageRules.parse(json.loads(params.lineage_rules)) if params.lineage_rules else LineageRules()
    lineages: dict[tuple[str, str], list[tuple[Any, str]]] = {}
    for source in live.values():
        modified_at = format_timestamp(source.attrs.modified_at)
        found = rules.of_event(
            source.collection, source.source_id, modified_at, source.lineage, source.lineage_version
        )
        if found is not None:
            lineages.setdefault((source.collection, found.lineage), []).append(
                (found.order, source.source_id)
            )
    if not lineages:
        return live
    newest = {source_id: max(members)[1] for members in lineages.values() for _, source_id in members}
    return {
        source_id: dataclasses.replace(
            source,
            attrs=msgspec.structs.replace(source.attrs, outdated_by=_other(newest.get(source_id), source_id)),
        )
        for source_id, source in live.items()
    }


def _other(newest: str | None, source_id: str) -> str:
    return "" if newest is None or newest == source_id else newest


def decisions_in_force(events: Iterable[InputEvent]) -> dict[tuple[str, str], str]:
    """Return the reviewers' decision in force about each pair (the newest version): its kind."""
    newest: dict[tuple[str, str], tuple[int, str]] = {}
    for event in events:
        if (
            isinstance(event, DecisionEvent)
            and event.pair is not None
            and event.version > newest.get(event.pair, (-1, ""))[0]
        ):
            newest[event.pair] = (event.version, event.kind)
    return {pair: kind for pair, (_, kind) in newest.items()}


def live_sources_in_store(store: Any) -> dict[str, LiveSource]:
    """Return the live sources as the engine chunked them, read from a store's ``source`` stage."""
    decoder = msgspec.msgpack.Decoder(SourceRecord)
    live = {}
    where = {key: partition for partition, key in store.keys("content")}

    def read(key: str) -> bytes | None:
        return store.get("content", where[key], key) if key in where else None

    for partition, key in store.keys("source"):
        if key.startswith("\x00"):
            continue  # not a source: a partition's copy of a boilerplate list
        raw = store.get("source", partition, key)
        record = decoder.decode(raw)
        if record.deleted or record.attrs is None:
            continue
        texts = source_texts(read, key, record.chunks)
        live[key] = LiveSource(
            key, record.version, record.attrs, tuple(t for t, _ in texts), tuple(n for _, n in texts)
        )
    return live


@dataclass
class _Content:
    norm: str
    refs: list[tuple[str, int, SourceAttrs, str]]
    rank: Rank
    readers: tuple[str, ...]
    long: bool
    band_keys: list[str]


class Reference:
    """The expected outcome for a set of live sources under one engine's parameters."""

    def __init__(
        self,
        engine: Engine,
        sources: dict[str, LiveSource],
        decisions: dict[tuple[str, str], str] | None = None,
    ) -> None:
        """``decisions``: the reviewers' decisions in force about pairs (:func:`decisions_in_force`)."""
        self.engine = engine
        self.sources = sources
        self.decisions = decisions or {}
        params = engine.params
        self.contents = self._contents()
        self.edges: dict[str, dict[str, float]] = {h: {} for h in self.contents}
        self.fact_conflicts: set[str] = set()
        size = params.shingle_size
        for a, b in self._candidate_pairs():
            if self.decisions.get((a, b)) in ("keep_separate", "merge"):
                continue  # decided below
            ca, cb = self.contents[a], self.contents[b]
            similarity = jaccard_of_sets(shingle_set(ca.norm, size), shingle_set(cb.norm, size))
            if similarity < params.threshold:
                continue
            if fact_conflict(ca.norm, cb.norm):
                self.fact_conflicts.add(review_key(a, b))
                continue
            self.edges[a][b] = self.edges[b][a] = similarity
        # A reviewer's merge is an edge whatever the Jaccard and the facts (both texts live).
        for (a, b), kind in sorted(self.decisions.items()):
            if kind == "merge" and a in self.contents and b in self.contents:
                ca, cb = self.contents[a], self.contents[b]
                similarity = jaccard_of_sets(shingle_set(ca.norm, size), shingle_set(cb.norm, size))
                self.edges[a][b] = self.edges[b][a] = similarity
        self.role: dict[str, tuple[str, str, float]] = {}
        self.acl_boundaries: set[str] = set()
        self._cluster()

    def _contents(self) -> dict[str, _Content]:
        params, policy = self.engine.params, self.engine.policy
        refs: dict[str, list[tuple[str, int, SourceAttrs, str]]] = {}
        norms: dict[str, str] = {}
        for source in self.sources.values():
            for position, (text, norm) in enumerate(zip(source.texts, source.norms, strict=True)):
                content_hash = hashlib.sha256(norm.encode("utf-8")).hexdigest()
                refs.setdefault(content_hash, []).append((source.source_id, position, source.attrs, text))
                norms[content_hash] = norm
        contents = {}
        for content_hash, content_refs in refs.items():
            content_refs.sort(key=lambda r: (r[0], r[1]))
            norm = norms[content_hash]
            signatures, distinct = self.engine.scheme.signatures([norm])
            long = bool(distinct[0] >= params.min_shingles)
            keys: list[str] = []
            if long:
                keys = self.engine.scheme.band_keys(signatures[0], params.bands, params.rows)
            contents[content_hash] = _Content(
                norm=norm,
                refs=content_refs,
                rank=policy.rank(content_hash, len(norm), [(s, p, a) for s, p, a, _ in content_refs]),
                readers=union_readers([a.acl for _, _, a, _ in content_refs]),
                long=long,
                band_keys=keys,
            )
        return contents

    def _candidate_pairs(self) -> set[tuple[str, str]]:
        buckets: dict[str, list[str]] = {}
        for content_hash, content in self.contents.items():
            for key in content.band_keys:
                buckets.setdefault(key, []).append(content_hash)
        pairs = set()
        for members in buckets.values():
            for i, a in enumerate(members):
                for b in members[i + 1 :]:
                    pairs.add((min(a, b), max(a, b)))
        return pairs

    def _cluster(self) -> None:
        """Decide every content in policy order, again until nothing changes (a reviewer's merge may make a content
        join a worse-ranked one, decided after it)."""
        policy = self.engine.policy
        order = sorted(self.contents, key=lambda h: policy.sort_key(self.contents[h].rank))
        merged: dict[str, set[str]] = {}
        for (a, b), kind in self.decisions.items():
            if kind == "merge":
                merged.setdefault(a, set()).add(b)
                merged.setdefault(b, set()).add(a)
        for _ in range(len(order) + 1):
            changed = False
            self.acl_boundaries = set()
            for content_hash in order:
                content = self.contents[content_hash]
                neighbors = []
                for other, similarity in sorted(self.edges[content_hash].items()):
                    o = self.contents[other]
                    role, target, _ = self.role.get(other, ("pending", "", 1.0))
                    neighbors.append((other, similarity, Info(0, role, o.rank, o.readers, target)))  # type: ignore[arg-type]
                decision = decide(
                    content.rank,
                    content.readers,
                    neighbors,
                    policy,
                    first=False,
                    merged=merged.get(content_hash, ()),
                )
                assert decision is not None
                for other in decision.refused:
                    self.acl_boundaries.add(review_key(content_hash, other))
                placed = (decision.role, decision.target, decision.jaccard)
                changed |= self.role.get(content_hash) != placed
                self.role[content_hash] = placed
            if not changed:
                return
        raise AssertionError("the clustering did not settle")  # pragma: no cover - see clustering's docs

    def chunks(self) -> dict[str, dict[str, Any]]:
        """Return the expected ``canonical-chunks`` view, without revisions."""
        members: dict[str, dict[str, MemberReport]] = {}
        for content_hash, (role, target, similarity) in self.role.items():
            if role == "member":
                member = self.contents[content_hash]
                refs = tuple(SourceRef(s, p, a) for s, p, a, _ in member.refs)
                members.setdefault(target, {})[content_hash] = MemberReport(
                    similarity, refs, len(refs), member.rank
                )
        out = {}
        for content_hash, (role, _, _) in self.role.items():
            if role != "canonical":
                continue
            content = self.contents[content_hash]
            source_id, position, _ = self.engine.policy.best_ref([(s, p, a) for s, p, a, _ in content.refs])
            text = next(t for s, p, _, t in content.refs if (s, p) == (source_id, position))
            out[content_hash] = chunk_value(
                content_hash=content_hash,
                text=text,
                canonical=(source_id, position),
                readers=content.readers,
                own_refs=sorted(
                    (SourceRef(s, p, a) for s, p, a, _ in content.refs),
                    key=lambda r: self.engine.policy.ref_order(r.source_id, r.position, r.attrs),
                ),
                own_count=len(content.refs),
                members=members.get(content_hash, {}),
                policy=self.engine.policy,
                max_sources=self.engine.params.max_chunk_sources,
            )
        return out

    def mappings(self) -> dict[str, dict[str, Any]]:
        """Return the expected ``source-mappings`` view."""
        out = {}
        for source in self.sources.values():
            entries = []
            for position, content_hash in enumerate(source.hashes):
                role, target, similarity = self.role[content_hash]
                if role == "member":
                    entries.append(MappingEntry(position, content_hash, target, "near", similarity))
                    continue
                content = self.contents[content_hash]
                best = self.engine.policy.best_ref([(s, p, a) for s, p, a, _ in content.refs])
                is_canonical = best[:2] == (source.source_id, position)
                relation: Literal["canonical", "exact"] = "canonical" if is_canonical else "exact"
                entries.append(MappingEntry(position, content_hash, content_hash, relation, 1.0))
            out[source.source_id] = mapping_value(
                source.source_id, source.version, mapped_attrs(source.attrs), entries
            )
        return out

    def compacted(self) -> bytes:
        """Return the expected compacted view in the form of :meth:`View.compacted` without revisions."""
        return msgspec.json.encode(
            {"canonical-chunks": self.chunks(), "source-mappings": self.mappings()}, order="sorted"
        )
