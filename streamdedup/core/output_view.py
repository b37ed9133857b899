"""The materialized view of the outputs: the last value per key of each keyed topic, tombstones applied.

This is the downstream truth (design §4): what an index writer holds after reading every output from the start.

>>> from streamdedup.core.messages import Output
>>> view = View()
>>> view.apply(Output("source-mappings", "a", {"chunks": []}))
>>> view.apply(Output("source-mappings", "a", None))
>>> view.mappings
{}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from streamdedup.core.messages import Output

__all__ = ["COMPACTED_TOPICS", "OUTPUT_TOPICS", "View"]

#: Topics whose view is the last value per key.
COMPACTED_TOPICS = ("canonical-chunks", "source-mappings")
#: Every output topic of the contract.
OUTPUT_TOPICS = ("canonical-chunks", "source-mappings", "review", "audit", "dlq")


class View:
    """Chunks by chunk_id, mappings by source_id, review flags by pair key, and a count of audit events."""

    def __init__(self) -> None:
        self.chunks: dict[str, dict[str, Any]] = {}
        self.mappings: dict[str, dict[str, Any]] = {}
        self.reviews: dict[str, dict[str, Any]] = {}
        self.audits: list[dict[str, Any]] = []
        self.dead_letters = 0

    def apply(self, output: Output) -> None:
        """Apply one output record."""
        if output.topic == "canonical-chunks":
            _put(self.chunks, output)
        elif output.topic == "source-mappings":
            _put(self.mappings, output)
        elif output.topic == "review":
            _put(self.reviews, output)
        elif output.topic == "audit" and output.value is not None:
            self.audits.append(output.record() or {})
        elif output.topic == "dlq":
            self.dead_letters += 1

    def apply_all(self, outputs: Iterable[Output]) -> View:
        """Apply many output records in order and return the view."""
        for output in outputs:
            self.apply(output)
        return self

    def compacted(self, *, with_revision: bool = True) -> bytes:
        """Return the compacted topics as canonical JSON, for byte-for-byte comparison of two views.

        ``revision`` counts the updates a chunk went through, which depends on how the work was interleaved;
        leave it out to compare the state two runs reached.
        """
        chunks = self.chunks
        if not with_revision:
            chunks = {k: {f: v for f, v in c.items() if f != "revision"} for k, c in chunks.items()}
        return msgspec.json.encode(
            {"canonical-chunks": chunks, "source-mappings": self.mappings}, order="sorted"
        )


def _put(table: dict[str, dict[str, Any]], output: Output) -> None:
    key = output.key or ""
    value = output.record()
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
