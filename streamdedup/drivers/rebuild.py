"""A new generation of an embedded state: built from another state directory's retained record, under the settings
of this run (``streamdedup run --state NEW --rebuild-from OLD --set threshold=0.85``).

The old state's source stage keeps the event that rebuilds each source and each decision
(:mod:`streamdedup.core.retained`); :class:`RetainedFeed` feeds them to the new state as the first input of its
run, in batches like any feed, so the rebuild commits as it goes. Its position is kept in the new state: a rebuild
cut short by a crash or Ctrl-C goes on from its last batch when the same command runs again, and a rebuild that
finished is not done twice. The old state is only read, and keeps serving; both then take the same new input.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path

from streamdedup.core.params import STATE_FORMAT
from streamdedup.core.retained import RETAINED_PREFIX, retained_events
from streamdedup.drivers.embedded import Origin
from streamdedup.drivers.feeds import FeedItem
from streamdedup.errors import ConfigurationError, StateError
from streamdedup.store.base import FAMILIES, PARAMS_KEY, VIEW_FAMILY
from streamdedup.store.rocksdb import RocksDBStore, shard_count

__all__ = ["REBUILD_META", "RetainedFeed", "rebuild_position"]

#: Where the new state keeps how far its rebuild went: ``{"from", "done", "total"}``.
REBUILD_META = "rebuild-from"
#: The first state format whose source stage keeps the retained record.
FIRST_RETAINING_FORMAT = 11


def rebuild_position(raw: bytes | None) -> dict[str, object] | None:
    """The rebuild position kept in a state's metadata (None: it was not built from another state)."""
    return None if raw is None else dict(json.loads(raw))


def _retained_entries(old: Path) -> list[tuple[str, bytes]]:
    """Every retained entry of the state at ``old`` (one store, or the shards of a run with several workers)."""
    if not old.is_dir():
        raise ConfigurationError(f"--rebuild-from {old}: no such state directory")
    workers = shard_count(old)
    stores = [(old / f"shard-{w}", w) for w in range(workers)] if workers else [(old, 0)]
    # A run with several workers keeps its parameters in the driver's own store, beside the shards.
    with _opened(old, ("collection", VIEW_FAMILY) if workers else FAMILIES) as store:
        raw = store.get_meta(PARAMS_KEY)
    if raw is None:
        raise StateError(f"{old} holds no state of a run (no parameters recorded)")
    found = json.loads(raw).get("format")
    if found is None or found < FIRST_RETAINING_FORMAT or found > STATE_FORMAT:
        raise StateError(
            f"{old} is a state of format {found}; a rebuild reads formats {FIRST_RETAINING_FORMAT} to "
            f"{STATE_FORMAT} (older ones keep no retained record: run their input again into a new state)"
        )
    entries: list[tuple[str, bytes]] = []
    for path, partition in stores:
        with _opened(path) as store:
            entries += store.scan("source", partition, RETAINED_PREFIX)
    return entries


def _opened(path: Path, families: tuple[str, ...] = FAMILIES) -> closing[RocksDBStore]:
    return closing(RocksDBStore(path, families=families, records=None))


class RetainedFeed:
    """The retained record of the state at ``old`` as a feed (progress in events), from position ``done`` on."""

    def __init__(self, old: Path, done: int = 0) -> None:
        self.old, self.done = old, done
        self.total = 0

    def open(self) -> tuple[int, Iterator[FeedItem]]:
        """Read the old state's record (it is closed again before the first batch runs)."""
        entries = _retained_entries(self.old)
        self.total = len(entries)
        where = str(self.old)

        def items() -> Iterator[FeedItem]:
            for number, event in enumerate(retained_events(entries[self.done :]), start=self.done + 1):
                yield FeedItem(event, Origin(None, {"rebuilt_from": where, "entry": number}), number)

        return self.total, items()

    def consumed(self, items: Sequence[FeedItem]) -> dict[str, bytes]:
        """The rebuild's position, committed with the batch."""
        position = {"from": str(self.old.resolve()), "done": items[-1].done, "total": self.total}
        return {REBUILD_META: json.dumps(position, sort_keys=True).encode()}
