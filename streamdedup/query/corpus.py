"""The corpus a calibration measures: the distinct normalized texts of a state, or of a run over some input.

Each text comes with its live positions, its readers and its rank under the canonical policy. A state's corpus is
read from its content stage's records (:func:`corpus_from_contents`); an input's is what the engine's ``source`` and
``collection`` stages would leave after a run over it (:func:`corpus_from_events`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec

from streamdedup.core.messages import Message, Output, SourceRefs, route, unpack_refs
from streamdedup.core.model import InputEvent, Rank, SourceAttrs, union_readers
from streamdedup.core.params import EngineParams
from streamdedup.core.policy import CanonicalPolicy
from streamdedup.core.stages import CollectionStage, SourceStage
from streamdedup.core.stages.context import StageContext
from streamdedup.core.state import ContentRecord, SourceRecord
from streamdedup.store.base import Transaction
from streamdedup.store.memory import MemoryStore

__all__ = ["Corpus", "CorpusText", "corpus_from_contents", "corpus_from_events"]


@dataclass(frozen=True, slots=True)
class CorpusText:
    """One distinct normalized text: its display text, live positions, readers and canonical rank."""

    content_hash: str
    text: str  # the original text of the first source that held it
    norm: str
    positions: int
    readers: tuple[str, ...]
    rank: Rank


@dataclass(frozen=True, slots=True)
class Corpus:
    """The distinct texts of a corpus, in content-hash order."""

    texts: tuple[CorpusText, ...]

    @property
    def positions(self) -> int:
        """Live chunk positions: every copy of every text."""
        return sum(t.positions for t in self.texts)


def corpus_from_contents(records: Iterable[tuple[str, ContentRecord]], policy: CanonicalPolicy) -> Corpus:
    """Return the corpus of the live contents of a state's content stage: ``(content hash, record)`` pairs.

    A content's texts are stored once, in its record (the refs of its sources keep only texts that differ); its
    rank is that of its first position in the policy's order, the one the record keeps first.
    """
    texts = []
    for content_hash, record in records:
        if not record.alive or not record.has_text or not record.top:
            continue
        best = record.top[0]
        rank = policy.rank_of(content_hash, record.length, (best.source_id, best.position, best.attrs))
        texts.append(
            CorpusText(content_hash, record.text, record.norm, record.positions, record.readers(), rank)
        )
    return Corpus(tuple(sorted(texts, key=lambda t: t.content_hash)))


# The calibration runs the stages that decide what texts a source holds; the others are left out.
_STAGES = ("source", "collection")


def corpus_from_events(batches: Iterable[Sequence[InputEvent]], params: EngineParams) -> Corpus:
    """Return the corpus a run over these batches of input events would leave in its state.

    The engine's ``source`` and ``collection`` stages apply the events in a memory store, batch by batch as the
    embedded runner does (so boilerplate learned in one batch is stripped from the next, as in a run): versions,
    deletions, ACL changes, markup, boilerplate and chunking are the engine's own. A batch that fails is applied
    again one event at a time, and the events that fail are left out, as a run dead-letters them.
    """
    context = StageContext.of(params)
    stages: dict[str, SourceStage | CollectionStage] = {
        "source": SourceStage(context),
        "collection": CollectionStage(context),
    }
    store = MemoryStore()
    texts: dict[str, tuple[str, str]] = {}
    for batch in batches:
        txn = Transaction(store)
        found: dict[str, tuple[str, str]] = {}
        try:
            _quiesce(stages, txn, batch, found)
        except Exception:
            txn, found = Transaction(store), {}
            for event in batch:
                nested = txn.nested()
                own: dict[str, tuple[str, str]] = {}
                try:
                    _quiesce(stages, nested, [event], own)
                except Exception:
                    continue  # an event a run would dead-letter
                nested.commit()
                found.update((h, t) for h, t in own.items() if h not in found)
        txn.commit()
        for content_hash, pair in found.items():
            texts.setdefault(content_hash, pair)  # a content keeps the text it first came with
    return _corpus_of_sources(store, texts, CanonicalPolicy(params.canonical_policy))


def _quiesce(
    stages: dict[str, SourceStage | CollectionStage],
    txn: Transaction,
    events: Sequence[InputEvent],
    texts: dict[str, tuple[str, str]],
) -> None:
    """Deliver ``events`` and what they cause among the calibration's stages; note each content's first text."""
    queues: dict[str, list[Message]] = {stage: [] for stage in _STAGES}
    queues["source"].extend(events)
    while any(queues.values()):
        for stage in _STAGES:
            batch, queues[stage] = queues[stage], []
            if not batch:
                continue
            for item in stages[stage].handle(batch, txn.partition(stage, 0)):
                if isinstance(item, Output):
                    continue
                if isinstance(item, SourceRefs):
                    for ref in unpack_refs(item):
                        if ref.texts and ref.content_hash not in texts:
                            texts[ref.content_hash] = (ref.texts[0], ref.norm)
                target = route(item)[0]
                if target in queues:
                    queues[target].append(item)


def _corpus_of_sources(
    store: MemoryStore, texts: dict[str, tuple[str, str]], policy: CanonicalPolicy
) -> Corpus:
    """Gather each content's live positions and readers from the source records a run would keep."""
    decoder = msgspec.msgpack.Decoder(SourceRecord)
    refs: dict[str, list[tuple[str, int, SourceAttrs]]] = {}
    for partition, source_id in store.keys("source"):
        if source_id.startswith("\x00"):
            continue  # the stage's own keys (boilerplate lists); source ids hold no control characters
        record = decoder.decode(store.get("source", partition, source_id) or b"")
        if record.deleted or record.attrs is None:
            continue
        for position, content_hash in enumerate(record.chunks):
            refs.setdefault(content_hash, []).append((source_id, position, record.attrs))
    corpus = []
    for content_hash, held in sorted(refs.items()):
        text, norm = texts[content_hash]
        readers = union_readers(list(dict.fromkeys(attrs.acl for _, _, attrs in held)))
        rank = policy.rank(content_hash, len(norm), held)
        corpus.append(CorpusText(content_hash, text, norm, len(held), readers, rank))
    return Corpus(tuple(corpus))
