"""The bundled example as each framework's naive index would hold it, and the view of its outputs.

A naive indexer (no dedup) writes one document per live source position: the position's own text, cut the way
the engine cuts it, with the ``chunk_id`` its ``source-mappings`` entry names. The adapters' acceptance tests run
each framework's own retriever over such an index and check what the safety net makes of the answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamdedup.contract.codec import decode_event
from streamdedup.core.engine import Engine
from streamdedup.core.model import UpsertEvent
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.source_chunks import document_chunks
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.feeds import run_feed
from streamdedup.drivers.jsonl import FileSink, JsonlFeed
from streamdedup.errors import InvalidEventError
from streamdedup.query.live_view import View
from streamdedup.query.output_file import build_view
from streamdedup.store.memory import MemoryStore

EXAMPLE = Path(__file__).parents[2] / "examples" / "feed.jsonl"

#: The two live copies of the help article (the sales copy is deleted by the feed); the eng space's is canonical.
HELP_COPIES = ("confluence:eng/reset-password", "confluence:support/reset-password")
#: A query aimed at the help article's first paragraph.
HELP_QUERY = "forgot password sign-in page email address link choose a new password"
#: The README's install paragraph (public) and its near copy in an eng-only wiki page.
README, CLI_SETUP = "github:acme/cli/README.md", "confluence:eng/cli-setup"


@dataclass(frozen=True)
class Passage:
    """One live source position as a naive index holds it."""

    source_id: str
    position: int
    chunk_id: str
    text: str

    @property
    def metadata(self) -> dict[str, str | int]:
        """Return the metadata a naive indexer stores with the passage."""
        return {"chunk_id": self.chunk_id, "source_id": self.source_id, "position": self.position}


@pytest.fixture(scope="session")
def outputs(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the embedded engine over the example feed, one event at a time; return its output file."""
    path = tmp_path_factory.mktemp("example") / "outputs.jsonl"
    sink = FileSink(str(path))
    try:
        run_feed(EmbeddedRunner(engine, MemoryStore()), JsonlFeed(EXAMPLE), sink, batch_size=1)
    finally:
        sink.close()
    return path


@pytest.fixture(scope="session")
def view(outputs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[View]:
    with build_view(outputs, tmp_path_factory.mktemp("view")) as opened:
        yield opened


@pytest.fixture(scope="session")
def passages(view: View) -> list[Passage]:
    """Return every live source position of the example, with its text and chunk id, in source and position order."""
    latest: dict[str, UpsertEvent] = {}
    for line in EXAMPLE.read_bytes().splitlines():
        try:
            event = decode_event(line)
        except InvalidEventError:
            continue
        if isinstance(event, UpsertEvent) and event.version > getattr(
            latest.get(event.source_id), "version", -1
        ):
            latest[event.source_id] = event
    params = EngineParams()
    found: list[Passage] = []
    for source_id in view.source_ids():
        chunks = document_chunks(latest[source_id], params)
        mapping = view.mapping(source_id)
        assert mapping is not None
        for entry in sorted(mapping["chunks"], key=lambda e: e["position"]):
            text = chunks[entry["position"]].original
            found.append(Passage(source_id, entry["position"], entry["chunk_id"], text))
    return found


@pytest.fixture(scope="session")
def help_chunk(view: View) -> str:
    """Return the chunk id of the help article's first paragraph (its heading attached)."""
    return view.chunks_of(HELP_COPIES[1])[0]


@pytest.fixture(scope="session")
def readme_chunk(view: View) -> str:
    """Return the chunk id of the README's install paragraph, which the eng wiki page near-copies."""
    return view.chunks_of(README)[0]


@pytest.fixture(scope="session")
def deleted_chunk(outputs: Path, view: View) -> str:
    """Return a chunk id that the outputs created and later deleted (a naive index may still hold it)."""
    written = [json.loads(line) for line in outputs.read_text().splitlines()]
    gone = sorted({r["key"] for r in written if r["topic"] == "canonical-chunks"} - set(view.chunk_ids()))
    assert gone
    return gone[0]


@pytest.fixture(scope="session")
def feed_titles() -> dict[str, tuple[str | None, str | None]]:
    """Return the ``(uri, title)`` of every source the feed upserts."""
    found: dict[str, tuple[str | None, str | None]] = {}
    for line in EXAMPLE.read_text().splitlines():
        event = json.loads(line)
        if event.get("op") == "upsert":
            found[event["source_id"]] = (event.get("uri"), event.get("title"))
    return found
