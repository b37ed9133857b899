"""Hostile input lines: every kind of line a connector or an attacker can put on the documents topic.

Each kind makes a line that is *never* a valid event under the limits it is given, so a test can say exactly which
lines of a feed must be dead-lettered. :func:`mutate` makes structure-aware variations of a valid event that may or
may not stay valid, for fuzzing; :func:`mixed_feed` interleaves hostile lines of every kind with a valid feed.

>>> import random
>>> rng = random.Random(1)
>>> line = hostile_line("nested_array", rng, {"schema": "streamdedup.document/v1"})
>>> line[:3], len(line) > 64
(b'[[[', True)
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamdedup.contract.codec import DEFAULT_LIMITS, EventLimits, encode_event
from streamdedup.core.model import ContentType, InputEvent, UpsertEvent
from streamdedup.testing.random_feeds import ParagraphPool, random_feed

__all__ = ["HOSTILE_KINDS", "FeedLine", "hostile_line", "mixed_feed", "mutate", "valid_event_data"]

_Data = dict[str, Any]


def _dump(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _with(base: _Data, **changes: Any) -> bytes:
    return _dump({**base, **changes})


def _without(base: _Data, name: str) -> bytes:
    return _dump({k: v for k, v in base.items() if k != name})


def _nested(opener: str, closer: str, depth: int, inner: str = "1") -> str:
    return opener * depth + inner + closer * depth


def _broken_json(rng: random.Random, base: _Data, limits: EventLimits) -> bytes:
    whole = _dump(base)
    return whole[: rng.randrange(1, len(whole) - 1)]  # a strict prefix of an object is never JSON


def _random_bytes(rng: random.Random, base: _Data, limits: EventLimits) -> bytes:
    raw = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))).replace(b"\n", b"\xff")
    return b"\xff" + raw  # never UTF-8, never blank


def _oversized(rng: random.Random, base: _Data, limits: EventLimits) -> bytes:
    words = (limits.bytes + rng.randint(1, 512)) // 5 + 1
    return _with({k: v for k, v in _upsert_base(base).items() if k != "chunks"}, text="word " * words)


def _upsert_base(base: _Data) -> _Data:
    """A valid upsert to break: the base itself if it is one, else one for its source."""
    if base.get("op") == "upsert":
        return base
    return valid_event_data(str(base.get("source_id", "hostile")), int(base.get("version", 1)))


_Maker = Callable[[random.Random, _Data, EventLimits], bytes]

#: kind -> a function of (rng, a valid event as JSON data, limits) returning one line that is never valid.
HOSTILE_KINDS: dict[str, _Maker] = {
    "nested_array": lambda r, b, lim: _nested(
        "[", "]", r.choice((lim.depth + 1, 5_000, 20_000)), ""
    ).encode(),
    "nested_object": lambda r, b, lim: _nested('{"a":', "}", r.choice((lim.depth + 1, 5_000))).encode(),
    "nested_metadata": lambda r, b, lim: (
        _dump(_upsert_base(b))[:-1]
        + b', "metadata": '
        + _nested('{"a":', "}", r.choice((lim.depth, 5_000))).encode()
        + b"}"
    ),
    "huge_version": lambda r, b, lim: _with(b, version=r.choice((10**40, 2**63, 2**64 + 1))),
    "negative_version": lambda r, b, lim: _with(b, version=-r.randint(1, 10**6)),
    "huge_authority": lambda r, b, lim: _with(
        _upsert_base(b), authority=r.choice((10**30, -(10**30), 2**63))
    ),
    "huge_metadata_integer": lambda r, b, lim: _with(_upsert_base(b), metadata={"n": [1, {"m": 2**64}]}),
    "broken_json": _broken_json,
    "random_bytes": _random_bytes,
    "null": lambda r, b, lim: b"null",
    "bare_number": lambda r, b, lim: r.choice((b"42", b"-1.5e3", b"0", b"1e999")),
    "json_array": lambda r, b, lim: r.choice((b"[1, 2, 3]", b"[]", _dump([b]))),
    "json_string": lambda r, b, lim: _dump(_dump(b).decode()),
    "string_for_list": lambda r, b, lim: _with(_upsert_base(b), acl=r.choice(("eng", "*"))),
    "empty_source_id": lambda r, b, lim: _with(b, source_id=""),
    "long_source_id": lambda r, b, lim: _with(b, source_id="s" * r.choice((1_025, 5_000))),
    "bad_timestamp": lambda r, b, lim: _with(
        _upsert_base(b),
        modified_at=r.choice(
            (
                "yesterday",
                "2024-13-45T00:00:00Z",
                "2024-01-01",
                "2024-01-01T00:00:00",
                "9999-12-31T23:59:59-23:59",
                "0001-01-01T00:00:00+23:59",
                "0000-01-01T00:00:00Z",
            )
        ),
    ),
    "non_string_chunks": lambda r, b, lim: _with(
        {k: v for k, v in _upsert_base(b).items() if k != "text"}, chunks=["ok", r.choice((1, None, {}, []))]
    ),
    "unknown_op": lambda r, b, lim: _with(b, op=r.choice(("merge", "UPSERT", "", "drop"))),
    "unknown_field": lambda r, b, lim: _with(b, extra=r.choice((1, "x", None))),
    "lone_surrogate": lambda r, b, lim: _dump(b).replace(b'"source_id": "', b'"source_id": "\\ud800', 1),
    "surrogate_bytes": lambda r, b, lim: _dump(b).replace(
        b'"source_id": "', b'"source_id": "\xed\xa0\x80', 1
    ),
    "too_many_chunks": lambda r, b, lim: _with(
        {k: v for k, v in _upsert_base(b).items() if k != "text"}, chunks=["c"] * (lim.chunks + 1)
    ),
    "long_chunk": lambda r, b, lim: _with(
        {k: v for k, v in _upsert_base(b).items() if k != "text"}, chunks=["w" * (lim.chunk_chars + 1)]
    ),
    "big_acl": lambda r, b, lim: _with(_upsert_base(b), acl=[f"p{i}" for i in range(lim.acl + 1)]),
    "long_principal": lambda r, b, lim: _with(_upsert_base(b), acl=["p" * (lim.principal_chars + 1)]),
    "long_title": lambda r, b, lim: _with(_upsert_base(b), title="t" * (lim.string_chars + 1)),
    "missing_field": lambda r, b, lim: _without(b, r.choice(("schema", "op", "source_id", "version"))),
    "wrong_type": lambda r, b, lim: _with(
        b,
        **r.choice(({"version": "3"}, {"version": 1.5}, {"version": True}, {"source_id": 5}, {"schema": 1})),
    ),
    "oversized": _oversized,
}


def hostile_line(kind: str, rng: random.Random, base: _Data, limits: EventLimits = DEFAULT_LIMITS) -> bytes:
    """Return one line of ``kind`` made from ``base`` (a valid event as JSON data); it is never a valid event."""
    return HOSTILE_KINDS[kind](rng, base, limits)


def valid_event_data(source_id: str, version: int, text: str = "a plain paragraph") -> _Data:
    """Return a valid upsert as JSON data."""
    return {
        "schema": "streamdedup.document/v1",
        "op": "upsert",
        "source_id": source_id,
        "version": version,
        "modified_at": "2024-05-01T10:00:00Z",
        "acl": ["*"],
        "text": text,
    }


# Values that a mutation puts in a field: right and wrong types, edges of every range.
_ODD_VALUES: tuple[Any, ...] = (
    None, True, 0, -1, 2**63 - 1, 2**63, -(2**63), 1.5, "", "x", "\u0000", "\ud7ff\ue000", [], [""], ["*"],
    [1], {}, {"a": None}, "2024-05-01T10:00:00+01:00", "text/html", "text/markdown", "upsert", "delete", "acl",
)  # fmt: skip


def mutate(rng: random.Random, data: _Data) -> bytes:
    """Return ``data`` with one to three structure-aware changes; the result may or may not be a valid event."""
    changed = dict(data)
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        field = rng.choice(
            [*sorted(changed), "text", "chunks", "metadata", "authority", "collection", "title"]
        )
        if roll < 0.2:
            changed.pop(field, None)
        elif roll < 0.8:
            changed[field] = rng.choice(_ODD_VALUES)
        elif roll < 0.9:
            changed[field] = [rng.choice(_ODD_VALUES) for _ in range(rng.randint(0, 3))]
        else:
            changed[field] = {"k": rng.choice(_ODD_VALUES)}
    return _dump(changed)


@dataclass(frozen=True)
class FeedLine:
    """One line of a mixed feed: its bytes, and the hostile kind that made it (None for a valid event)."""

    raw: bytes
    kind: str | None

    @property
    def hostile(self) -> bool:
        """Whether the line is one that must be dead-lettered."""
        return self.kind is not None


def _as_text(rng: random.Random, event: UpsertEvent) -> InputEvent:
    """Turn some pre-chunked upserts into Markdown or HTML documents, so markup is part of the feed."""
    assert event.chunks is not None
    kind: ContentType = rng.choice(("text/markdown", "text/html", "text/plain"))
    if kind == "text/markdown":
        text = "\n\n".join(f"## Part {i}\n\n{chunk}" for i, chunk in enumerate(event.chunks))
    elif kind == "text/html":
        text = "".join(f"<section><p>{chunk}</p></section>" for chunk in event.chunks)
    else:
        text = "\n\n".join(event.chunks)
    return UpsertEvent(
        source_id=event.source_id,
        version=event.version,
        attrs=event.attrs,
        text=text,
        content_type=kind,
        collection=event.collection,
    )


def mixed_feed(
    seed: int, *, lines: int = 600, hostile_share: float = 0.4, limits: EventLimits = DEFAULT_LIMITS
) -> list[FeedLine]:
    """Return ``lines`` lines, about ``hostile_share`` of them hostile, every hostile kind at least once."""
    rng = random.Random(seed)
    hostile_count = max(len(HOSTILE_KINDS), round(lines * hostile_share))
    valid = random_feed(rng, sources=40, events=lines - hostile_count, pool=ParagraphPool(rng, families=8))
    valid = [_as_text(rng, e) if isinstance(e, UpsertEvent) and rng.random() < 0.3 else e for e in valid]
    kinds = list(HOSTILE_KINDS) + [
        rng.choice(list(HOSTILE_KINDS)) for _ in range(hostile_count - len(HOSTILE_KINDS))
    ]
    rng.shuffle(kinds)
    feed = [FeedLine(encode_event(e), None) for e in valid]
    for kind in kinds:
        base = json.loads(encode_event(rng.choice(valid))) if valid else valid_event_data("hostile", 1)
        feed.insert(rng.randrange(len(feed) + 1), FeedLine(hostile_line(kind, rng, base, limits), kind))
    return feed
