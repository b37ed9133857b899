"""Seeded random feeds of input events rich in exact copies, near copies, fact variants and ACL changes."""

from __future__ import annotations

import random

from streamdedup.core.model import AclEvent, DeleteEvent, InputEvent, SourceAttrs, UpsertEvent

__all__ = ["ACLS", "ParagraphPool", "random_feed"]

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


def random_feed(
    rng: random.Random, *, sources: int = 6, events: int = 30, pool: ParagraphPool | None = None
) -> list[InputEvent]:
    """Return a feed of upserts, deletes, ACL changes, replays and stale versions over a few sources."""
    pool = pool or ParagraphPool(rng)
    versions: dict[str, int] = {}
    feed: list[InputEvent] = []
    for _ in range(events):
        source_id = f"src-{rng.randrange(sources)}"
        roll = rng.random()
        if feed and roll < 0.1:
            feed.append(rng.choice(feed))  # replay of an earlier event, possibly older than the current one
            continue
        version = versions.get(source_id, 0) + rng.randint(1, 2)
        versions[source_id] = version
        if roll < 0.25:
            feed.append(DeleteEvent(source_id=source_id, version=version))
        elif roll < 0.4:
            feed.append(AclEvent(source_id=source_id, version=version, acl=rng.choice(ACLS)))
        else:
            chunks = tuple(rng.choice(pool.texts) for _ in range(rng.randint(1, 3)))
            attrs = SourceAttrs(
                acl=rng.choice(ACLS),
                modified_at=rng.randint(1, 5) * 86_400_000_000,
                authority=rng.choice((0, 0, 1)),
                uri=f"https://docs.example/{source_id}",
            )
            feed.append(UpsertEvent(source_id=source_id, version=version, attrs=attrs, chunks=chunks))
    return feed
