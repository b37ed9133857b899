"""Read what the console needs from a state directory, opened read-only for one call and closed again.

The console never holds the state between requests: ``streamdedup run``, ``inspect`` and the decisions the console
applies open it while the console runs. A read-only open takes no lock, so it also works while a run holds the
state; it sees the state as it was when it was opened.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import msgspec
import rocksdict
from rich.console import Console

from streamdedup.cli.calibrate import read_state_corpus
from streamdedup.core.params import EngineParams
from streamdedup.core.policy import CanonicalPolicy
from streamdedup.core.stages.collection import collection_key, line_hash, line_key
from streamdedup.core.state import CollectionRecord, ContentRecord, LineRecord
from streamdedup.query.calibration import VerifiedPair, candidate_pairs, verify_pairs
from streamdedup.query.corpus import Corpus
from streamdedup.store.rocksdb import read_only

__all__ = ["BoilerplateLine", "CollectionLines", "StateReader"]

_PARTITION = (0).to_bytes(2, "big")  # the embedded runner keeps every stage in partition 0


@dataclass(frozen=True, slots=True)
class BoilerplateLine:
    """A normalized line of a collection: how many documents hold it, and whether it is boilerplate now."""

    text: str
    documents: int
    boilerplate: bool


@dataclass(frozen=True, slots=True)
class CollectionLines:
    """A collection's document count, its boilerplate lines, and its most frequent other lines."""

    name: str
    documents: int
    boilerplate: tuple[BoilerplateLine, ...]
    frequent: tuple[BoilerplateLine, ...]


class StateReader:
    """Read-only access to a state directory written by ``streamdedup run``, one open per call."""

    def __init__(self, state: Path, params: EngineParams) -> None:
        self.state = state
        self.params = params

    def _opened(self, families: Sequence[str]) -> AbstractContextManager[rocksdict.Rdict]:
        return read_only(self.state, families)

    def texts(self, hashes: Sequence[str]) -> dict[str, str]:
        """Return the display text of each content hash the content stage holds (others are left out)."""
        if not hashes:
            return {}
        decoder = msgspec.msgpack.Decoder(ContentRecord)
        found: dict[str, str] = {}
        with self._opened(["content"]) as rdict:
            family = rdict.get_column_family("content")
            for content_hash in hashes:
                raw = family.get(_PARTITION + content_hash.encode("utf-8"))
                if isinstance(raw, bytes):
                    record = decoder.decode(raw)
                    if record.has_text:
                        found[content_hash] = record.text
        return found

    def calibration_pairs(self) -> tuple[Corpus, list[VerifiedPair]]:
        """Return the state's live texts and their verified candidate pairs, as ``streamdedup calibrate`` finds them."""
        corpus = read_state_corpus(self.state, self.params, Console(stderr=True))
        policy = CanonicalPolicy(self.params.canonical_policy)
        candidates = candidate_pairs(corpus.texts, self.params)
        return corpus, verify_pairs(corpus.texts, candidates, self.params, policy)

    def collections(self, *, top: int, decided: Mapping[str, Sequence[str]]) -> list[CollectionLines]:
        """Return every collection's lines: the boilerplate ones, then the ``top`` most frequent others.

        Lines named in ``decided`` (collection -> normalized lines a reviewer decided on) are shown among the
        others even when they are not frequent, so that every decision can be seen and undone.
        """
        line_decoder = msgspec.msgpack.Decoder(LineRecord)
        record_decoder = msgspec.msgpack.Decoder(CollectionRecord)
        out: list[CollectionLines] = []
        with self._opened(["collection"]) as rdict:
            family = rdict.get_column_family("collection")
            names = _collection_names(family)
            for name in sorted(names | set(decided)):
                raw = family.get(_PARTITION + collection_key(name).encode("utf-8"))
                record = record_decoder.decode(raw) if isinstance(raw, bytes) else CollectionRecord()
                counts = {
                    line.text: line.count
                    for line in _lines(family, name, line_decoder)
                    if line.count > 0 and line.text
                }
                current = set(record.boilerplate.values())
                boilerplate = [BoilerplateLine(t, counts.get(t, 0), True) for t in current]
                others = [BoilerplateLine(t, c, False) for t, c in counts.items() if t not in current]
                others.sort(key=lambda line: (-line.documents, line.text))
                shown = others[: max(top, 0)]
                listed = {line.text for line in shown} | current
                for text in decided.get(name, ()):
                    if text not in listed:
                        shown.append(BoilerplateLine(text, _count(family, name, text, line_decoder), False))
                        listed.add(text)
                boilerplate.sort(key=lambda line: (-line.documents, line.text))
                out.append(CollectionLines(name, record.docs, tuple(boilerplate), tuple(shown)))
        return out


def _prefixed(family: rocksdict.Rdict, start: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Yield the (key, value) pairs of a column family whose key starts with ``start``, in key order."""
    cursor = family.iter()
    cursor.seek(start)
    while cursor.valid():
        key, value = cursor.key(), cursor.value()
        if not isinstance(key, bytes) or not key.startswith(start):
            break
        if isinstance(value, bytes):
            yield key, value
        cursor.next()


def _collection_names(family: rocksdict.Rdict) -> set[str]:
    """Return the names of the collections that have a record in the collection stage."""
    start = _PARTITION + b"c\x00"
    return {key[len(start) :].decode("utf-8") for key, _ in _prefixed(family, start)}


def _lines(
    family: rocksdict.Rdict, collection: str, decoder: msgspec.msgpack.Decoder[LineRecord]
) -> Iterator[LineRecord]:
    """Yield every line record of one collection."""
    for _, value in _prefixed(family, _PARTITION + f"l\x00{collection}\x00".encode()):
        yield decoder.decode(value)


def _count(
    family: rocksdict.Rdict, collection: str, text: str, decoder: msgspec.msgpack.Decoder[LineRecord]
) -> int:
    raw = family.get(_PARTITION + line_key(collection, line_hash(text)).encode("utf-8"))
    return decoder.decode(raw).count if isinstance(raw, bytes) else 0
