"""Seeded random feeds of input events rich in exact copies, near copies, fact variants and ACL changes."""

from __future__ import annotations

import random
from collections.abc import Callable

from streamdedup.core.model import (
    PAIR_DECISIONS,
    AclEvent,
    DecisionEvent,
    DeleteEvent,
    InputEvent,
    SourceAttrs,
    UpsertEvent,
    decision_route,
)
from streamdedup.core.normalize import content_hash

__all__ = [
    "ACLS",
    "LINEAGE_RULES",
    "ParagraphPool",
    "lineage_feed",
    "pair_decision",
    "preference",
    "random_feed",
    "with_decisions",
]

#: Lineage rules (JSON) for :func:`lineage_feed`: the versions of a guide are one lineage per collection, so a
#: source that moves to the other collection moves to another lineage.
LINEAGE_RULES = '{"default": ["guide/{name}/v{version}"], "archive": ["guide/{name}/v{version}"]}'

_VOCABULARY = (
    "account settings page security option button link email address request policy team member review "
    "document access report customer support ticket answer service update change record system process "
    "manager office travel expense invoice approval payment budget project release feature issue guide "
    "network server storage backup restore schedule meeting calendar training course library archive folder"
).split()

#: ACLs the feeds draw from; ``*`` is everyone.
ACLS: tuple[tuple[str, ...], ...] = (("*",), ("eng",), ("hr",), ("eng", "hr"), ("finance",))


class ParagraphPool:
    """Families of paragraphs: a base text and its exact, near, far and fact-changing variants."""

    def __init__(self, rng: random.Random, families: int = 4, words: int = 60) -> None:
        self.texts: list[str] = []
        for _ in range(families):
            base = [rng.choice(_VOCABULARY) for _ in range(words)]
            self.texts.append(" ".join(base))
            self.texts.append(" ".join(base).upper().replace(" ", "  "))  # exact after normalization
            for _ in range(2):  # near: one word changed
                edit = list(base)
                edit[rng.randrange(5, words - 5)] = rng.choice(_VOCABULARY) + "x"
                self.texts.append(" ".join(edit))
            far = list(base)
            for i in range(0, words, 7):
                far[i] = rng.choice(_VOCABULARY) + "y"
            self.texts.append(" ".join(far))
            fact = list(base)
            fact[rng.randrange(5, words - 5)] = str(rng.randint(10, 99))
            self.texts.append(" ".join(fact))
            negated = list(base)
            negated.insert(rng.randrange(5, words - 5), "not")
            self.texts.append(" ".join(negated))
        for _ in range(3):
            self.texts.append(" ".join(rng.choice(_VOCABULARY) for _ in range(rng.randint(1, 9))))


def _history(
    rng: random.Random,
    names: list[str],
    events: int,
    acl_below: float,
    upsert: Callable[[str, int], UpsertEvent],
) -> list[InputEvent]:
    """Return ``events`` events over the sources ``names``: replays of earlier events (possibly older than the
    source's current version), deletes, ACL changes (a roll below ``acl_below``) and ``upsert(source_id, version)``."""
    versions: dict[str, int] = {}
    feed: list[InputEvent] = []
    for _ in range(events):
        source_id = rng.choice(names)
        roll = rng.random()
        if feed and roll < 0.1:
            feed.append(rng.choice(feed))  # replay of an earlier event, possibly older than the current one
            continue
        version = versions.get(source_id, 0) + rng.randint(1, 2)
        versions[source_id] = version
        if roll < 0.25:
            feed.append(DeleteEvent(source_id=source_id, version=version))
        elif roll < acl_below:
            feed.append(AclEvent(source_id=source_id, version=version, acl=rng.choice(ACLS)))
        else:
            feed.append(upsert(source_id, version))
    return feed


def random_feed(
    rng: random.Random, *, sources: int = 6, events: int = 30, pool: ParagraphPool | None = None
) -> list[InputEvent]:
    """Return a feed of upserts, deletes, ACL changes, replays and stale versions over a few sources."""
    texts = (pool or ParagraphPool(rng)).texts

    def upsert(source_id: str, version: int) -> UpsertEvent:
        chunks = tuple(rng.choice(texts) for _ in range(rng.randint(1, 3)))
        attrs = SourceAttrs(
            acl=rng.choice(ACLS),
            modified_at=rng.randint(1, 5) * 86_400_000_000,
            authority=rng.choice((0, 0, 1)),
            uri=f"https://docs.example/{source_id}",
            # A title that comes and goes with the versions (drawing nothing, so the feeds stay the same).
            title=f"{source_id} v{version}" if version % 2 else None,
        )
        return UpsertEvent(source_id=source_id, version=version, attrs=attrs, chunks=chunks)

    return _history(rng, [f"src-{n}" for n in range(sources)], events, 0.4, upsert)


def lineage_feed(
    rng: random.Random, *, events: int = 30, pool: ParagraphPool | None = None
) -> list[InputEvent]:
    """Return a feed over the versions of two guides (:data:`LINEAGE_RULES`) and two notes that name their lineage
    in some upserts (else they are in none): members arrive in any order, the newest is deleted and comes back,
    members move to another lineage; with replays, stale versions and ACL changes as in :func:`random_feed`."""
    texts = (pool or ParagraphPool(rng)).texts
    names = [f"guide/{g}/v{v}" for g in ("a", "b") for v in ("1", "2", "2-final", "10")]
    names += ["notes/n1", "notes/n2"]

    def upsert(source_id: str, version: int) -> UpsertEvent:
        chunks = tuple(rng.choice(texts) for _ in range(rng.randint(1, 3)))
        attrs = SourceAttrs(acl=rng.choice(ACLS), modified_at=rng.randint(1, 5) * 86_400_000_000)
        collection = "archive" if rng.random() < 0.2 else "default"
        # Notes name their lineage themselves, now and then: by a version, or by modified_at.
        lineage = "notes" if source_id.startswith("notes/") and rng.random() < 0.7 else None
        return UpsertEvent(
            source_id=source_id,
            version=version,
            attrs=attrs,
            chunks=chunks,
            collection=collection,
            lineage=lineage,
            lineage_version=rng.choice(("1", "2", None)) if lineage else None,
        )

    return _history(rng, names, events, 0.35, upsert)


def pair_decision(kind: str, a: str, b: str, version: int, *, by: str = "reviewer") -> DecisionEvent:
    """Return a reviewer's decision about the contents of two texts (as chunks, before normalization)."""
    low, high = sorted((content_hash(a), content_hash(b)))
    return DecisionEvent(
        source_id=decision_route(pair=(low, high)), version=version, kind=kind, by=by, pair=(low, high)
    )


def preference(source_id: str, version: int, *, prefer: bool = True, by: str = "reviewer") -> DecisionEvent:
    """Return a reviewer's prefer (or unprefer) decision about a source."""
    return DecisionEvent(
        source_id=source_id,
        version=version,
        kind="prefer" if prefer else "unprefer",
        by=by,
        subject_source=source_id,
    )


def with_decisions(
    rng: random.Random, feed: list[InputEvent], pool: ParagraphPool, *, count: int = 8
) -> list[InputEvent]:
    """Return ``feed`` with ``count`` reviewers' decisions at random places among its events.

    Pair decisions (keep_separate, merge, reopen) name two texts of the pool, mostly of one family (so they meet
    near copies and fact variants); preferences name the feed's sources. Some decisions repeat an earlier one or
    carry an older version than the newest about their subject.
    """
    sources = sorted({e.source_id for e in feed}) or ["src-0"]
    versions: dict[str, int] = {}
    decided: list[DecisionEvent] = []
    out = list(feed)
    family = 9  # texts per family of ParagraphPool
    for _ in range(count):
        if decided and rng.random() < 0.15:
            decision = rng.choice(decided)  # a replay, possibly older than the newest about its subject
        elif rng.random() < 0.7:
            first = rng.randrange(len(pool.texts))
            start = first - first % family
            pick = rng.randrange(start, min(start + family, len(pool.texts)))
            second = pick if rng.random() < 0.8 else rng.randrange(len(pool.texts))
            a, b = pool.texts[first], pool.texts[second]
            if content_hash(a) == content_hash(b):
                continue
            key = "pair:" + ":".join(sorted((content_hash(a), content_hash(b))))
            versions[key] = versions.get(key, 0) + rng.randint(1, 2)
            decision = pair_decision(rng.choice(PAIR_DECISIONS), a, b, versions[key])
        else:
            source_id = rng.choice(sources)
            versions[source_id] = versions.get(source_id, 0) + 1
            decision = preference(source_id, versions[source_id], prefer=rng.random() < 0.7)
        decided.append(decision)
        out.insert(rng.randrange(len(out) + 1), decision)
    return out
