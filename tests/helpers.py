"""Helpers for building events and running them through the embedded driver."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output, RefUpdate, SourceRefs, unpack_refs
from streamdedup.core.model import AclEvent, InputEvent, SourceAttrs, UpsertEvent
from streamdedup.core.output_view import View
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.store.memory import MemoryStore

DAY = 86_400_000_000

#: The kernels this test run uses (STREAMDEDUP_KERNELS, which CI sets to "python" for a second run of the engine's
#: tests); a test that chooses others chooses these again when it ends.
SESSION_KERNELS = os.environ.get("STREAMDEDUP_KERNELS", "auto")


def upsert(
    source_id: str,
    version: int,
    chunks: Sequence[str],
    *,
    acl: tuple[str, ...] = ("*",),
    day: int = 1,
    authority: int = 0,
) -> UpsertEvent:
    """Return a pre-chunked upsert modified on ``day``."""
    attrs = SourceAttrs(
        acl=acl, modified_at=day * DAY, authority=authority, uri=f"https://example.com/{source_id}"
    )
    return UpsertEvent(source_id=source_id, version=version, attrs=attrs, chunks=tuple(chunks))


#: How many sources hold the popular chunk: ten times the sources a chunk record lists by default.
POPULAR_SOURCES = 1_000
POPULAR_TEXT = "Rotate the signing keys every ninety days and record each rotation in the security log."


def popular_source(n: int) -> str:
    """Return the id of the ``n``-th source holding the popular chunk (readable by ``u<n>`` alone)."""
    return f"space-{n:03d}:security/keys"


def popular_outputs(engine: Engine) -> tuple[list[Output], list[Output]]:
    """Return the outputs of :data:`POPULAR_SOURCES` sources holding the popular chunk alone (so that no other chunk
    record lists them), source ``n`` readable by ``u<n>`` alone, with its own uri and title; and those of an ACL
    change of the last source, to ``admins``."""
    events = [
        UpsertEvent(
            source_id=popular_source(n),
            version=1,
            attrs=SourceAttrs(
                acl=(f"u{n}",),
                modified_at=(1 + n % 30) * DAY,
                uri=f"https://wiki.example/space-{n:03d}/keys",
                title=f"Key rotation (space {n})",
            ),
            chunks=(POPULAR_TEXT,),
        )
        for n in range(POPULAR_SOURCES)
    ]
    runner = EmbeddedRunner(engine, MemoryStore())
    written: list[Output] = []
    for start in range(0, len(events), 250):
        runner.process(list(events[start : start + 250]), written.extend)
    last = popular_source(POPULAR_SOURCES - 1)
    changed: list[Output] = []
    runner.process([AclEvent(source_id=last, version=2, acl=("admins",))], changed.extend)
    return written, changed


def ref_updates(messages: Sequence[object]) -> list[RefUpdate]:
    """Return the reference updates among ``messages``, those a :class:`SourceRefs` packs included, in order."""
    found: list[RefUpdate] = []
    for message in messages:
        if isinstance(message, SourceRefs):
            found += unpack_refs(message)
        elif isinstance(message, RefUpdate):
            found.append(message)
    return found


def run_embedded(engine: Engine, events: Sequence[InputEvent], *, batch: int = 1) -> View:
    """Run ``events`` through a fresh embedded runner, ``batch`` events at a time, and return the view."""
    runner = EmbeddedRunner(engine, MemoryStore())
    view = View()
    for start in range(0, len(events), batch):
        view.apply_all(runner.process(list(events[start : start + batch]), lambda outputs: None))
    return view


def embedded_review_keys(engine: Engine, events: Sequence[InputEvent]) -> list[tuple[str, str]]:
    """Return the distinct (reason, key) pairs an embedded run of ``events`` flags for review, sorted."""
    runner = EmbeddedRunner(engine, MemoryStore())
    outputs = runner.process(list(events), lambda outputs: None)
    return sorted({(o.value["reason"], o.key) for o in outputs if o.topic == "review" and o.value and o.key})


def unflagged(
    expected: Sequence[tuple[str, str]], flagged: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Return the (reason, key) flags of ``expected`` that ``flagged`` does not account for.

    An ``acl_boundary`` pair must be flagged itself. A ``fact_conflict`` pair needs one of its two texts in some
    ``fact_conflict`` flag: each text raises one, against the better-ranked conflicting text known when its own
    discovery ends, so which partner it names can depend on the order in which texts arrive.
    """
    flags = set(flagged)
    in_conflict = {h for reason, key in flags if reason == "fact_conflict" for h in key.split(":")}
    return [
        (reason, key)
        for reason, key in expected
        if (reason, key) not in flags
        and not (reason == "fact_conflict" and set(key.split(":")) & in_conflict)
    ]


def stop(process: subprocess.Popen, seconds: float = 30) -> None:
    """Stop a command started for a test: terminate it, and kill it if it does not exit within ``seconds``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=seconds)


class DictState:
    """One partition's state in a dict, as a stage handler sees it (get, put, delete; no multi-get)."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.values.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.values.pop(key, None)
