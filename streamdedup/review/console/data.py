"""What the review console shows, folded from the output records (design §4): flags, decisions, chunks.

:class:`ConsoleData` applies output records in stream order (:class:`~streamdedup.core.messages.Output`, or the
``{"topic", "key", "value"}`` lines of an embedded run's output file) and keeps:

- every ``review`` flag with its last value: *open* while its latest record is not a tombstone and no decision
  came after it, *resolved* once a ``keep_separate`` or ``merge`` decision or a tombstone came (the engine
  withdrew it), and open again after a ``reopen`` decision or when the engine raises it again;
- the latest decision per subject, from the ``audit`` records with action ``decision`` (keyed by the subject:
  ``"<hash_a>:<hash_b>"``, ``"source:<source_id>"`` or ``"line:<collection>:<line>"``);
- the ``canonical-chunks`` records, indexed by the content hashes they hold, so that each side of a flag can be
  shown with its text, readers, sources and where it stands now (canonical, a near member, or gone).

Newest first means the order of appearance in the stream, reversed. Nothing here does I/O.

>>> data = ConsoleData()
>>> data.apply(Output("review", "a:b", {"reason": "fact_conflict", "a": {"content_hash": "a"},
...                                     "b": {"content_hash": "b"}, "jaccard": 0.9}))
>>> [flag.key for flag in data.open_flags()]
['a:b']
>>> data.apply(Output("review", "a:b", None))
>>> [flag.key for flag in data.open_flags()], [flag.key for flag in data.resolved_flags()]
([], ['a:b'])
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from streamdedup.core.facts import fact_tokens
from streamdedup.core.messages import Output
from streamdedup.core.model import format_timestamp
from streamdedup.core.normalize import normalize
from streamdedup.query.calibration import word_diff

__all__ = [
    "ConsoleData",
    "Decision",
    "Flag",
    "Side",
    "SourceInfo",
    "Span",
    "differing_facts",
    "line_subject",
    "marked_pair",
    "output_of_line",
    "pair_subject",
    "similarity_of",
    "source_subject",
]

_COSINE = re.compile(r"cosine\s+(-?[0-9.]+)")


def pair_subject(hash_a: str, hash_b: str) -> str:
    """Return the subject key of a pair decision: the review key, lower hash first."""
    low, high = sorted((hash_a, hash_b))
    return f"{low}:{high}"


def source_subject(source_id: str) -> str:
    """Return the subject key of a source decision."""
    return f"source:{source_id}"


def line_subject(collection: str, line: str) -> str:
    """Return the subject key of a boilerplate line decision."""
    return f"line:{collection}:{line}"


def output_of_line(item: Mapping[str, Any]) -> Output:
    """Return the output record of one decoded line of an output file (``{"topic", "key", "value"}``)."""
    topic, key, value = item["topic"], item["key"], item["value"]
    if not isinstance(topic, str) or (key is not None and not isinstance(key, str)):
        raise ValueError(f"not an output line: topic {topic!r}, key {key!r}")
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"not an output line: the value of a {topic} record is {type(value).__name__}")
    return Output(topic, key, value)


@dataclass(frozen=True, slots=True)
class Decision:
    """A reviewer's decision as the engine recorded it in ``audit``: what, on which subject, by whom, when."""

    subject: str
    kind: str
    by: str | None
    version: int | None  # microseconds since the epoch, when the decision was made
    note: str | None
    event: dict[str, Any]
    order: int  # position in the stream

    @property
    def when(self) -> str:
        """The decision's time as an RFC 3339 timestamp ('' when the event carries none)."""
        return format_timestamp(self.version) if isinstance(self.version, int) and self.version >= 0 else ""


@dataclass(slots=True)
class Flag:
    """A review flag: its last value, whether it is open, and where its latest record stands in the stream."""

    key: str
    value: dict[str, Any]
    open: bool
    order: int

    @property
    def reason(self) -> str:
        """``fact_conflict``, ``acl_boundary`` or ``semantic``."""
        return str(self.value.get("reason", ""))

    @property
    def hashes(self) -> tuple[str, str]:
        """The content hashes of both sides, ``a`` first (the lower one)."""
        a, b = self.value.get("a") or {}, self.value.get("b") or {}
        low, _, high = self.key.partition(":")
        return str(a.get("content_hash") or low), str(b.get("content_hash") or high)


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """A source position that holds a text, with what its citation says."""

    source_id: str
    position: int | None
    uri: str | None
    title: str | None
    modified_at: str | None
    acl: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a flag as the outputs show it now: its text, readers, sources and place in a cluster."""

    content_hash: str
    text: str | None  # None when neither the flag nor a chunk record carries it
    acl: tuple[str, ...]
    modified_at: str | None  # the newest of its sources'
    sources: tuple[SourceInfo, ...]
    more_sources: bool  # a chunk record holding it lists only its first sources: there may be more
    chunk_id: str | None  # the chunk it belongs to now, None when no chunk record holds it
    relation: str  # "canonical", "near" or "gone"


@dataclass(frozen=True, slots=True)
class Span:
    """A run of a text shown in the console; ``mark`` is ``"fact"``, ``"diff"`` or None."""

    text: str
    mark: str | None = None


class ConsoleData:
    """The fold of the output records that the console shows (see the module docstring)."""

    def __init__(self) -> None:
        self.flags: dict[str, Flag] = {}  # by review key
        self.decisions: dict[str, Decision] = {}  # the latest by subject
        self.chunks: dict[str, dict[str, Any]] = {}  # canonical-chunks records by chunk id
        self.records = 0  # output records applied
        self._holders: dict[str, set[str]] = {}  # content hash -> ids of the chunks whose records list it

    def apply(self, output: Output) -> None:
        """Apply one output record."""
        order = self.records
        self.records += 1
        if output.topic == "review" and output.key is not None:
            self._flag(output.key, output.record(), order)
        elif output.topic == "audit" and output.value is not None and output.key is not None:
            value = output.record() or {}
            if value.get("action") == "decision":
                self._decision(output.key, value, order)
        elif output.topic == "canonical-chunks" and output.key is not None:
            self._chunk(output.key, output.record())

    def apply_all(self, outputs: Iterable[Output]) -> ConsoleData:
        """Apply many output records in stream order and return the fold."""
        for output in outputs:
            self.apply(output)
        return self

    def _flag(self, key: str, value: dict[str, Any] | None, order: int) -> None:
        known = self.flags.get(key)
        if value is None:
            if known is not None:
                known.open, known.order = False, order
            return
        if known is None:
            self.flags[key] = Flag(key, value, True, order)
        else:
            known.value, known.open, known.order = value, True, order

    def _decision(self, subject: str, value: dict[str, Any], order: int) -> None:
        raw = value.get("decision")
        event: dict[str, Any] = raw if isinstance(raw, dict) else {}
        kind = str(event.get("decision") or value.get("reason") or "")
        by = value.get("by") or event.get("by")
        version = event.get("version")
        note = event.get("note")
        self.decisions[subject] = Decision(
            subject,
            kind,
            None if by is None else str(by),
            version if isinstance(version, int) else None,
            None if note is None else str(note),
            event,
            order,
        )

    def _chunk(self, chunk_id: str, value: dict[str, Any] | None) -> None:
        previous = self.chunks.pop(chunk_id, None)
        if previous is not None:
            for content_hash in _hashes_of(previous):
                holders = self._holders.get(content_hash)
                if holders is not None:
                    holders.discard(chunk_id)
                    if not holders:
                        del self._holders[content_hash]
        if value is None:
            return
        self.chunks[chunk_id] = value
        for content_hash in _hashes_of(value):
            self._holders.setdefault(content_hash, set()).add(chunk_id)

    # -- what the console shows --------------------------------------------------------------------------------

    def decision(self, subject: str) -> Decision | None:
        """Return the latest decision on ``subject``, or None."""
        return self.decisions.get(subject)

    def is_open(self, flag: Flag) -> bool:
        """Say whether a flag waits for a reviewer.

        A decision newer than the flag's latest record settles it: ``keep_separate`` and ``merge`` resolve the
        flag (before the engine's tombstone arrives, too), ``reopen`` opens it again. Otherwise the flag is open
        unless its latest record is a tombstone.
        """
        decided = self.decisions.get(flag.key)
        if decided is not None and decided.order > flag.order:
            return decided.kind == "reopen"
        return flag.open

    def open_flags(self) -> list[Flag]:
        """Return the open flags, newest first."""
        return sorted((f for f in self.flags.values() if self.is_open(f)), key=lambda f: -f.order)

    def resolved_flags(self) -> list[Flag]:
        """Return the flags no longer open (they keep their last value), most recently resolved or decided first."""
        resolved = [f for f in self.flags.values() if not self.is_open(f)]
        return sorted(resolved, key=lambda f: -max(f.order, self._decided_at(f.key)))

    def _decided_at(self, subject: str) -> int:
        decided = self.decisions.get(subject)
        return -1 if decided is None else decided.order

    def side(self, flag: Flag, which: str) -> Side:
        """Return side ``"a"`` or ``"b"`` of a flag, completed from the chunk records that hold its text."""
        given: dict[str, Any] = self.flag_side(flag, which)
        content_hash = str(given.get("content_hash") or flag.hashes[0 if which == "a" else 1])
        holders = sorted(self._holders.get(content_hash, ()))
        own = self.chunks.get(content_hash)  # a chunk's id is its canonical text's content hash
        chunk = own if own is not None else (self.chunks[holders[0]] if holders else None)
        sources: list[SourceInfo] = []
        partial = False
        for chunk_id in holders:
            record = self.chunks[chunk_id]
            listed = record.get("sources") or ()
            for entry in listed:
                if entry.get("content_hash") == content_hash:
                    sources.append(_source_info(entry))
            # a chunk record lists its first sources only (max_chunk_sources); source_count counts them all
            partial = partial or int(record.get("source_count") or 0) > len(listed)
        text = given.get("text")
        if text is None and own is not None:
            text = own.get("text")
        if "acl" in given:
            acl = tuple(str(a) for a in given["acl"])
        elif own is not None:
            acl = tuple(own.get("acl") or ())
        else:
            acl = tuple(sorted({a for s in sources for a in s.acl}))
        stamps = [s.modified_at for s in sources if s.modified_at]
        if own is not None:
            relation = "canonical"
        elif chunk is not None:
            relation = "near"
        else:
            relation = "gone"
        return Side(
            content_hash=content_hash,
            text=None if text is None else str(text),
            acl=acl,
            modified_at=max(stamps) if stamps else None,
            sources=tuple(sorted(sources, key=lambda s: (s.source_id, s.position or 0))),
            more_sources=partial,
            chunk_id=None if chunk is None else str(chunk.get("chunk_id") or holders[0]),
            relation=relation,
        )

    @staticmethod
    def flag_side(flag: Flag, which: str) -> dict[str, Any]:
        """Return the flag's own record of side ``"a"`` or ``"b"`` (empty when it has none)."""
        given = flag.value.get(which)
        return given if isinstance(given, dict) else {}


def _hashes_of(chunk: Mapping[str, Any]) -> set[str]:
    found = {str(chunk["content_hash"])} if chunk.get("content_hash") else set()
    found.update(str(m["content_hash"]) for m in chunk.get("members") or () if m.get("content_hash"))
    found.update(str(s["content_hash"]) for s in chunk.get("sources") or () if s.get("content_hash"))
    return found


def _source_info(entry: Mapping[str, Any]) -> SourceInfo:
    position = entry.get("position")
    return SourceInfo(
        source_id=str(entry.get("source_id", "")),
        position=position if isinstance(position, int) else None,
        uri=entry.get("uri"),
        title=entry.get("title"),
        modified_at=entry.get("modified_at"),
        acl=tuple(str(a) for a in entry.get("acl") or ()),
    )


def similarity_of(flag: Mapping[str, Any]) -> tuple[str, float | None]:
    """Return the measure a flag is shown with and its value: ``cosine`` for semantic flags, else ``jaccard``.

    >>> similarity_of({"reason": "semantic", "jaccard": 0.41, "detail": "cosine 0.912"})
    ('cosine', 0.912)
    >>> similarity_of({"reason": "fact_conflict", "jaccard": 0.88})
    ('jaccard', 0.88)
    """
    if flag.get("reason") == "semantic":
        cosine = flag.get("cosine")
        if isinstance(cosine, (int, float)):
            return "cosine", float(cosine)
        found = _COSINE.search(str(flag.get("detail") or ""))
        if found is not None:
            try:
                return "cosine", float(found.group(1))
            except ValueError:
                pass
    jaccard = flag.get("jaccard")
    return "jaccard", float(jaccard) if isinstance(jaccard, (int, float)) else None


def differing_facts(text_a: str, text_b: str) -> tuple[list[str], list[str]]:
    """Return the fact tokens only ``text_a`` has and those only ``text_b`` has (with repeats), each sorted.

    >>> differing_facts("weights in float16, 2 GPUs", "weights in float32, 2 GPUs")
    (['float16'], ['float32'])
    """
    a, b = Counter(fact_tokens(normalize(text_a))), Counter(fact_tokens(normalize(text_b)))
    return sorted((a - b).elements()), sorted((b - a).elements())


def marked_pair(text_a: str, text_b: str) -> tuple[list[Span], list[Span]]:
    """Return both texts as spans: words only one side has marked ``diff``, fact tokens among them ``fact``.

    Whitespace between words stays unmarked, and each text keeps its own line breaks.

    >>> left, right = marked_pair("refunds within 30 days", "refunds within 14 days")
    >>> [(s.text, s.mark) for s in left]
    [('refunds within ', None), ('30', 'fact'), (' days', None)]
    """
    left: list[Span] = []
    right: list[Span] = []
    for op in word_diff(text_a, text_b):
        changed = op.tag != "equal"
        _append(left, op.a, changed)
        _append(right, op.b, changed)
    return _merged(left), _merged(right)


_WORD = re.compile(r"(\S+)(\s*)")


def _append(spans: list[Span], words: str, changed: bool) -> None:
    if not changed:
        spans.append(Span(words))
        return
    start = _WORD.match(words)
    leading = words[: start.start()] if start else words
    if leading:
        spans.append(Span(leading))
    for match in _WORD.finditer(words):
        word, space = match.group(1), match.group(2)
        spans.append(Span(word, "fact" if fact_tokens(normalize(word)) else "diff"))
        if space:
            spans.append(Span(space))


def _merged(spans: list[Span]) -> list[Span]:
    """Join neighbouring spans of the same mark (an unmarked space between two marked words stays apart)."""
    out: list[Span] = []
    for span in spans:
        if not span.text:
            continue
        if out and out[-1].mark is None and span.mark is None:
            out[-1] = Span(out[-1].text + span.text)
        else:
            out.append(span)
    return out
