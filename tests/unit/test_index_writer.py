"""The index writer over a real LanceDB directory, with a fake embedder that counts what it embeds.

The records come from the embedded engine run over the bundled example, one event at a time, followed by extra
events (an ACL change, the deletion of a last source and its return, the deletion of a canonical's source, a
replayed old event). The expected index is computed here from a fold of the same records, naively.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jsonschema import Draft202012Validator

from streamdedup.contract.codec import decode_event
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.model import AclEvent, DeleteEvent
from streamdedup.core.normalize import content_hash, normalize, words
from streamdedup.core.output_view import View as Fold
from streamdedup.core.shingles import jaccard
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.feeds import run_feed
from streamdedup.drivers.jsonl import JsonlFeed
from streamdedup.errors import ConfigurationError, StateError, StateMismatchError
from streamdedup.index import open_sink
from streamdedup.index.lancedb import LanceDBSink
from streamdedup.index.sink import Row, Sink
from streamdedup.index.writer import IndexWriter
from streamdedup.query.live_view import ViewWriter
from streamdedup.query.output_file import OutputFile
from streamdedup.query.safety_net import readable
from streamdedup.review.decisions import decision_event, parse_decision
from streamdedup.store.memory import MemoryStore
from tests.helpers import upsert

EXAMPLE = Path(__file__).parents[2] / "examples" / "feed.jsonl"
SCHEMAS = Path(__file__).parents[2] / "streamdedup" / "contract" / "schemas"
REFUNDS, README, CLI_SETUP = "web:help/refunds", "github:acme/cli/README.md", "confluence:eng/cli-setup"

Record = tuple[str, str, bytes | None]


class FakeEmbedder:
    """A hashed bag of words, L2-normalized: deterministic, no model. Counts every text it embeds.

    Words listed in ``synonyms`` count as the word they map to (or not at all, mapped to ""), so that paraphrases
    written with them land on the same direction (cosine 1) while sharing few shingles.
    """

    def __init__(self, dimensions: int = 256, synonyms: dict[str, str] | None = None) -> None:
        self.dimensions = dimensions
        self.model_id = f"fake-bag-of-words-{dimensions}"
        self.synonyms = synonyms or {}
        self.embedded: list[str] = []
        self.calls = 0

    def vector(self, text: str) -> np.ndarray:
        row = np.zeros(self.dimensions, dtype=np.float32)
        for word in words(text) or ["<empty>"]:
            concept = self.synonyms.get(word, word)
            if not concept:
                continue  # a word the paraphrase leaves out
            bucket = int.from_bytes(hashlib.blake2b(concept.encode(), digest_size=8).digest(), "big")
            row[bucket % self.dimensions] += 1.0
        return row / np.linalg.norm(row)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.embedded.extend(texts)
        return np.stack([self.vector(t) for t in texts]).astype(np.float32)

    def hashes(self) -> list[str]:
        """Return the content hash of every text embedded, in order (a repeated one was embedded twice)."""
        return [content_hash(t) for t in self.embedded]


def as_record(output: Output) -> Record:
    value = None if output.value is None else json.dumps(output.record()).encode()
    return (output.topic, output.key or "", value)


def event(**fields: Any) -> bytes:
    return json.dumps({"schema": "streamdedup.document/v1", **fields}).encode()


def feed_event(source_id: str) -> dict[str, Any]:
    for line in EXAMPLE.read_text().splitlines():
        found = json.loads(line)
        if found.get("source_id") == source_id and found.get("op") == "upsert":
            return dict(found)
    raise AssertionError(source_id)


@pytest.fixture(scope="module")
def steps(engine: Engine) -> dict[str, list[Record]]:
    """Return the output records of the example (one event at a time), then of each extra event, by step."""
    runner = EmbeddedRunner(engine, MemoryStore())
    collected: list[Output] = []
    run_feed(runner, JsonlFeed(EXAMPLE), collected.extend, batch_size=1)
    found = {"feed": [as_record(o) for o in collected]}
    refunds = feed_event(REFUNDS)
    extra = {
        "acl": event(op="acl", source_id=REFUNDS, version=2, acl=["customers", "support"]),
        "delete": event(op="delete", source_id=REFUNDS, version=3),
        "back": event(**{**refunds, "version": 4, "modified_at": "2024-06-01T00:00:00Z"}),
        "canonical-deleted": event(op="delete", source_id=README, version=2),
        "replayed": event(**feed_event(README)),
    }
    for name, raw in extra.items():
        found[name] = [as_record(o) for o in runner.process([decode_event(raw)], lambda outputs: None)]
    return found


@pytest.fixture(scope="module")
def records(steps: dict[str, list[Record]]) -> list[Record]:
    return [record for step in steps.values() for record in step]


def fold(records: Sequence[Record]) -> Fold:
    return Fold().apply_all(Output(t, k, None if v is None else json.loads(v)) for t, k, v in records)


def expected_rows(records: Sequence[Record]) -> dict[str, dict[str, Any]]:
    """Return the rows an index of these records holds: every live chunk that a live mapping names."""
    view = fold(records)
    sources: dict[str, set[str]] = {}
    for source_id, mapping in view.mappings.items():
        for entry in mapping["chunks"]:
            sources.setdefault(entry["chunk_id"], set()).add(source_id)
    rows = {}
    for chunk_id, chunk in view.chunks.items():
        if sources.get(chunk_id):
            canonical = chunk["canonical"]["source_id"]
            modified = next(s["modified_at"] for s in chunk["sources"] if s["source_id"] == canonical)
            rows[chunk_id] = {
                "text": chunk["text"],
                "content_hash": chunk["content_hash"],
                "acl": tuple(sorted(chunk["acl"])),
                "source_ids": tuple(sorted(sources[chunk_id])),
                "modified_at": modified,
            }
    return rows


def held(sink: Sink) -> dict[str, dict[str, Any]]:
    return {
        chunk_id: {
            "text": row.text,
            "content_hash": row.content_hash,
            "acl": row.acl,
            "source_ids": row.source_ids,
            "modified_at": row.modified_at,
        }
        for chunk_id, row in sink.rows(sink.chunk_ids()).items()
    }


def table(sink: Sink) -> dict[str, tuple[Row, list[float]]]:
    """Return every row with its vector, for comparing two tables."""
    ids = sink.chunk_ids()
    vectors = sink.vectors(ids)
    return {chunk_id: (row, vectors[chunk_id].tolist()) for chunk_id, row in sink.rows(ids).items()}


def batches(records: Sequence[Record], size: int, start: int = 0) -> Iterator[tuple[int, list[Record]]]:
    """Yield ``(end, batch)`` from ``start``: ``end`` is the position after the batch, stored as progress."""
    for begin in range(start, len(records), size):
        chunk = list(records[begin : begin + size])
        yield begin + len(chunk), chunk


def texts_ever_indexed(records: Sequence[Record], size: int) -> set[str]:
    """Return the content hash of every text that was the text of a row at the end of some batch."""
    seen: set[str] = set()
    for end, _ in batches(records, size):
        seen |= {row["content_hash"] for row in expected_rows(records[:end]).values()}
    return seen


def open_writer(tmp_path: Path, embedder: FakeEmbedder, **options: Any) -> IndexWriter:
    sink = open_sink(f"lancedb://{tmp_path / 'lance'}", embedder.dimensions, model=embedder.model_id)
    return IndexWriter(tmp_path / "writer", sink, embedder, **options)


def run(writer: IndexWriter, records: Sequence[Record], size: int, where: str = "test") -> None:
    stored = writer.progress(where)
    for end, batch in batches(records, size, int(stored or b"0")):
        writer.apply(batch, {where: str(end).encode()})


@pytest.mark.parametrize("size", [1, 7, 10_000])
def test_the_index_holds_the_live_chunks_and_embeds_each_text_once(
    records: list[Record], tmp_path: Path, size: int
):
    embedder = FakeEmbedder()
    with open_writer(tmp_path, embedder) as writer:
        run(writer, records, size)
        expected = expected_rows(records)
        assert held(writer.sink) == expected
        assert writer.sink.count() == len(expected) == len(fold(records).chunks)
        # One embedding per text that was ever the text of a row at a batch's end; none embedded twice.
        ever = texts_ever_indexed(records, size)
        assert len(embedder.embedded) == len(ever) == writer.totals.embedded
        assert sorted(embedder.hashes()) == sorted(ever)
        vectors = writer.sink.vectors(expected)
        for chunk_id, row in expected.items():
            assert np.allclose(vectors[chunk_id], embedder.vector(row["text"]))
        totals = writer.totals
        positions = sum(len(m["chunks"]) for m in fold(records).mappings.values())
        assert (totals.positions, totals.rows) == (positions, len(expected))
        assert totals.embedding_calls_saved == positions - len(expected) > 0
        assert totals.rows_written - totals.rows_deleted == len(expected)


def test_the_example_alone_saves_what_the_engine_summary_says(steps: dict[str, list[Record]], tmp_path: Path):
    embedder = FakeEmbedder()
    with open_writer(tmp_path, embedder) as writer:
        run(writer, steps["feed"], 1)
        # The README's summary of the example: 15 live positions, 12 canonical chunks, 3 embedding calls saved.
        assert (writer.totals.positions, writer.totals.rows, writer.totals.embedding_calls_saved) == (
            15,
            12,
            3,
        )


def test_each_step_changes_the_index_as_it_should(steps: dict[str, list[Record]], tmp_path: Path):
    embedder = FakeEmbedder()
    with open_writer(tmp_path, embedder) as writer:
        done: list[Record] = []

        def step(name: str) -> Any:
            done.extend(steps[name])
            report = writer.apply(steps[name], {"test": str(len(done)).encode()})
            assert held(writer.sink) == expected_rows(done)
            return report

        step("feed")
        refund_chunks = [c for c, r in held(writer.sink).items() if r["source_ids"] == (REFUNDS,)]
        assert refund_chunks
        vectors = writer.sink.vectors(refund_chunks)
        version = writer.sink.table.version

        acl = step("acl")
        assert (acl.embedded, acl.rows_written, acl.rows_deleted) == (0, 0, 0)
        assert acl.metadata_updates == len(refund_chunks)
        for chunk_id in refund_chunks:
            assert writer.sink.rows([chunk_id])[chunk_id].acl == ("customers", "support")
            assert writer.sink.vectors([chunk_id])[chunk_id].tolist() == vectors[chunk_id].tolist()
        assert writer.sink.table.version == version + 1  # one merge, no rewrite

        deleted = step("delete")
        assert deleted.rows_deleted == len(refund_chunks) and deleted.embedded == 0
        assert writer.sink.rows(refund_chunks) == {}

        calls = embedder.calls
        back = step("back")
        assert back.rows_written == len(refund_chunks) and back.embedded == 0 and embedder.calls == calls
        assert sorted(writer.sink.rows(refund_chunks)) == sorted(refund_chunks)
        assert {writer.sink.rows([c])[c].modified_at for c in refund_chunks} == {"2024-06-01T00:00:00Z"}

        readme_chunk = next(c for c, r in held(writer.sink).items() if README in r["source_ids"])
        moved = step("canonical-deleted")
        assert writer.sink.rows([readme_chunk]) == {}
        setup = next(r for r in held(writer.sink).values() if CLI_SETUP in r["source_ids"])
        # The wiki page's own paragraph becomes canonical: a text never embedded before, embedded now.
        assert moved.embedded >= 1 and setup["text"] in embedder.embedded[-moved.embedded :]
        assert setup["acl"] == ("eng",)

        before = table(writer.sink)
        replayed = step("replayed")
        assert replayed.records == 0  # the engine ignores an older version of a deleted source
        assert (replayed.embedded, replayed.rows_written, replayed.metadata_updates) == (0, 0, 0)
        assert table(writer.sink) == before


def test_a_replay_changes_nothing_and_calls_nothing(records: list[Record], tmp_path: Path):
    embedder = FakeEmbedder()
    with open_writer(tmp_path, embedder) as writer:
        run(writer, records, 5)
        before, version, totals = table(writer.sink), writer.sink.table.version, writer.totals
        calls = embedder.calls
        # The whole stream again in one batch: every key ends where it is, so not one write.
        report = writer.apply(records, {})
        assert (report.embedded, report.rows_written, report.metadata_updates, report.rows_deleted) == (
            0,
            0,
            0,
            0,
        )
        # Each key's last record again, one at a time (a repeated record): nothing either.
        last = {(topic, key): n for n, (topic, key, _) in enumerate(records)}
        for n in sorted(last.values()):
            report = writer.apply([records[n]], {})
            assert (report.rows_written, report.metadata_updates, report.rows_deleted, report.reviews) == (
                0,
                0,
                0,
                (),
            )
        assert writer.sink.table.version == version
        # From the start in small batches, the view goes back in time and comes forward again: rows come and go
        # on the way, but every text is in the cache, and the index ends as it was.
        for size in (1, 13):
            run(writer, records, size, where=f"again-{size}")
        assert embedder.calls == calls
        assert table(writer.sink) == before
        assert (writer.totals.rows, writer.totals.positions, writer.totals.embedded) == (
            totals.rows,
            totals.positions,
            totals.embedded,
        )


def test_counters_survive_a_restart(records: list[Record], tmp_path: Path):
    embedder = FakeEmbedder()
    half = len(records) // 8 * 4  # a batch boundary of the whole run too
    with open_writer(tmp_path, embedder) as writer:
        run(writer, records[:half], 4)
        first = writer.totals
    with open_writer(tmp_path, embedder) as writer:
        assert writer.totals == first and first.embedded == len(embedder.embedded) > 0
        run(writer, records, 4)
        totals = writer.totals
    with open_writer(tmp_path, FakeEmbedder()) as writer:
        assert writer.totals == totals
    with open_writer(tmp_path / "other", FakeEmbedder()) as writer:
        run(writer, records, 4)
        assert writer.totals == totals


def test_an_output_file_can_be_indexed_from_where_it_stopped(records: list[Record], tmp_path: Path):
    lines = [
        json.dumps({"topic": t, "key": k, "value": None if v is None else json.loads(v)}).encode() + b"\n"
        for t, k, v in records
    ]
    path = tmp_path / "outputs.jsonl"
    path.write_bytes(b"".join(lines[: len(lines) // 2]))
    embedder = FakeEmbedder()
    with open_writer(tmp_path, embedder) as writer:
        OutputFile(path, writer, batch_lines=6).catch_up()
    with path.open("ab") as handle:
        handle.write(b"".join(lines[len(lines) // 2 :]))
    with open_writer(tmp_path, embedder) as writer:
        applied = OutputFile(path, writer, batch_lines=6).catch_up()
        assert applied == sum(
            t in ("canonical-chunks", "source-mappings") for t, _, _ in records[len(lines) // 2 :]
        )
        assert held(writer.sink) == expected_rows(records)
        assert len(embedder.hashes()) == len(set(embedder.hashes()))


class Crash(Exception):
    """What the simulated crash raises: the process is gone, nothing after it runs."""


class CrashingSink:
    """A sink that crashes at its ``at``-th write (counted over its life), before or after performing it."""

    def __init__(self, inner: Sink, at: int, after: bool) -> None:
        self.inner, self.at, self.after, self.writes = inner, at, after, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    @property
    def model(self) -> str | None:
        return self.inner.model

    def _write(self, name: str, *args: Any) -> None:
        self.writes += 1
        if self.writes == self.at and not self.after:
            raise Crash(f"before write {self.at}")
        getattr(self.inner, name)(*args)
        if self.writes == self.at:
            raise Crash(f"after write {self.at}")

    def upsert(self, rows: Any, vectors: Any) -> None:
        self._write("upsert", rows, vectors)

    def update_metadata(self, rows: Any) -> None:
        self._write("update_metadata", rows)

    def delete(self, chunk_ids: Any) -> None:
        self._write("delete", chunk_ids)


def uninterrupted(records: list[Record], root: Path, size: int) -> tuple[dict[str, Any], Any, list[Output]]:
    embedder = FakeEmbedder()
    reviews: list[Output] = []
    with open_writer(root, embedder) as writer:
        for end, batch in batches(records, size):
            reviews.extend(writer.apply(batch, {"test": str(end).encode()}).reviews)
        return table(writer.sink), writer.totals, reviews


@pytest.mark.parametrize("after", [False, True], ids=["before-write", "after-write"])
@pytest.mark.parametrize("at", [1, 2, 5, 9, 14])
def test_a_crash_at_any_write_ends_in_the_same_index_with_nothing_embedded_twice(
    records: list[Record], tmp_path: Path, at: int, after: bool
):
    size = 3
    expected, totals, _ = uninterrupted(records, tmp_path / "clean", size)
    embedder = FakeEmbedder()
    lance = LanceDBSink(tmp_path / "lance", embedder.dimensions)
    crashing = CrashingSink(lance, at, after)
    crashes = 0
    while True:
        writer = IndexWriter(tmp_path / "writer", crashing, embedder)
        try:
            run(writer, records, size)
            break
        except Crash:
            crashes += 1
        finally:
            writer.close()  # what a process that dies does to its RocksDB lock
        lance = LanceDBSink(tmp_path / "lance", embedder.dimensions)
        crashing.inner = lance
    assert crashes == 1
    assert table(lance) == expected
    assert sorted(embedder.hashes()) == sorted(set(embedder.hashes()))  # no text embedded twice
    with IndexWriter(tmp_path / "writer", lance, embedder) as writer:
        assert writer.totals == totals


@pytest.mark.parametrize("at", [1, 4, 10, 20])
def test_a_crash_before_the_commit_repeats_the_batch_harmlessly(
    records: list[Record], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: int
):
    size = 4
    expected, totals, _ = uninterrupted(records, tmp_path / "clean", size)
    commit = ViewWriter.commit
    calls = {"n": 0}

    def crashing_commit(self: ViewWriter, *args: Any, **kwargs: Any) -> int:
        calls["n"] += 1
        if calls["n"] == at:
            raise Crash("before the commit")
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(ViewWriter, "commit", crashing_commit)
    embedder = FakeEmbedder()
    for attempt in range(2):
        writer = open_writer(tmp_path, embedder)
        try:
            run(writer, records, size)
            assert attempt == 1
            break
        except Crash:
            assert attempt == 0
        finally:
            writer.close()
    sink = open_sink(f"lancedb://{tmp_path / 'lance'}", embedder.dimensions)
    assert table(sink) == expected
    assert len(embedder.hashes()) == len(set(embedder.hashes())) == totals.embedded
    with IndexWriter(tmp_path / "writer", sink, embedder) as writer:
        assert writer.totals == totals


# -- semantic flags -------------------------------------------------------------------------------------------------

PARAPHRASES = {
    "automobile": "car",
    "vehicle": "car",
    "requires": "needs",
    "fresh": "new",
    "tyres": "tires",
    "ahead": "before",
    "of": "",
    "cold": "winter",
    "season": "",
}
CAR = "The car needs new tires before winter so that it grips on snow and ice on every road"
AUTOMOBILE = (
    "The automobile requires fresh tyres ahead of cold season so that it grips on snow and ice on every road"
)
OTHER = "Quarterly revenue grew in every region while operating costs stayed flat for the third year"
# Near copies that state other facts: the engine flags them (fact_conflict) and keeps both; not semantic.
REFUND = (
    "Customers can return any product bought in our online store and receive a full refund within {} days of "
    "delivery. The item must be unused and in its original packaging, and the refund is paid to the original "
    "payment method after we receive the return. Shipping costs for returns are covered by us when the item "
    "arrived damaged or was not what you ordered."
)
REFUND_30, REFUND_14 = REFUND.format(30), REFUND.format(14)


def corpus_records(engine: Engine, events: Sequence[Any]) -> list[Record]:
    runner = EmbeddedRunner(engine, MemoryStore())
    found: list[Record] = []
    for item in events:
        found.extend(as_record(o) for o in runner.process([item], lambda outputs: None))
    return found


@pytest.fixture(scope="module")
def paraphrase_records(engine: Engine) -> list[Record]:
    return corpus_records(
        engine,
        [
            upsert("wiki:car", 1, [CAR], acl=("eng",)),
            upsert("web:other", 1, [OTHER]),
            upsert("web:refund-30", 1, [REFUND_30]),
            upsert("web:refund-14", 1, [REFUND_14], day=2),
            upsert("blog:automobile", 1, [AUTOMOBILE]),
        ],
    )


def paraphrase_embedder() -> FakeEmbedder:
    return FakeEmbedder(synonyms=PARAPHRASES)


def test_paraphrases_are_flagged_once_and_stay_two_rows(paraphrase_records: list[Record], tmp_path: Path):
    embedder = paraphrase_embedder()
    assert float(embedder.vector(CAR) @ embedder.vector(AUTOMOBILE)) > 0.99  # by construction
    assert jaccard(normalize(REFUND_30), normalize(REFUND_14), 5) >= 0.8
    assert float(embedder.vector(REFUND_30) @ embedder.vector(REFUND_14)) > 0.92
    validator = Draft202012Validator(json.loads((SCHEMAS / "review.v1.schema.json").read_text()))
    flags: list[Output] = []
    with open_writer(tmp_path, embedder) as writer:
        for end, batch in batches(paraphrase_records, 1):
            flags.extend(writer.apply(batch, {"test": str(end).encode()}).reviews)
        rows = held(writer.sink)
        assert writer.totals.review_flags == 1
    assert len(rows) == 5
    assert [f.topic for f in flags] == ["review"]
    flag = flags[0]
    car, automobile = content_hash(CAR), content_hash(AUTOMOBILE)
    low, high = sorted((car, automobile))
    assert flag.key == f"{low}:{high}"
    value = flag.value
    assert value is not None
    assert list(validator.iter_errors(value)) == []
    assert value["reason"] == "semantic"
    assert (value["a"]["content_hash"], value["b"]["content_hash"]) == (low, high)
    sides = {value["a"]["content_hash"]: value["a"], value["b"]["content_hash"]: value["b"]}
    assert sides[car] == {"content_hash": car, "text": CAR, "acl": ["eng"]}
    assert sides[automobile] == {"content_hash": automobile, "text": AUTOMOBILE, "acl": ["*"]}
    assert value["jaccard"] == round(jaccard(normalize(CAR), normalize(AUTOMOBILE), 5), 6) < 0.8
    assert value["detail"].startswith("cosine 0.9") or value["detail"] == "cosine 1.000"


@pytest.mark.parametrize("margin", [1e-3, -1e-3], ids=["above-the-cosine", "below-the-cosine"])
def test_the_semantic_threshold_decides(paraphrase_records: list[Record], tmp_path: Path, margin: float):
    # Without "cold" among the synonyms the paraphrases are near, not equal, in direction.
    embedder = FakeEmbedder(synonyms={k: v for k, v in PARAPHRASES.items() if k != "cold"})
    cosine = float(embedder.vector(CAR) @ embedder.vector(AUTOMOBILE))
    assert 0.85 < cosine < 0.99
    with open_writer(tmp_path, embedder, semantic_threshold=cosine + margin) as writer:
        flags = [f for _, batch in batches(paraphrase_records, 1) for f in writer.apply(batch, {}).reviews]
    assert len(flags) == (0 if margin > 0 else 1)


def test_a_semantic_flag_lost_in_a_crash_is_raised_again(
    paraphrase_records: list[Record], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    embedder = paraphrase_embedder()
    last = len(paraphrase_records)
    commit = ViewWriter.commit

    def crash_on_the_last_batch(self: ViewWriter, pending: Any, progress: Any, **kwargs: Any) -> int:
        if progress.get("test") == str(last).encode():
            raise Crash("before the commit")
        return commit(self, pending, progress, **kwargs)

    with open_writer(tmp_path, embedder) as writer:
        run(writer, paraphrase_records[:-1], 10_000)
        monkeypatch.setattr(ViewWriter, "commit", crash_on_the_last_batch)
        with pytest.raises(Crash):
            writer.apply(paraphrase_records[-1:], {"test": str(last).encode()})
        monkeypatch.setattr(ViewWriter, "commit", commit)
    with open_writer(tmp_path, embedder) as writer:
        assert writer.progress("test") == str(last - 1).encode()
        again = writer.apply(paraphrase_records[-1:], {"test": str(last).encode()})
    assert [f.key for f in again.reviews] == [":".join(sorted((content_hash(CAR), content_hash(AUTOMOBILE))))]
    assert len(embedder.hashes()) == len(set(embedder.hashes())) == 5


@pytest.mark.parametrize("decided", [False, True], ids=["control", "kept-separate"])
def test_a_semantic_pair_kept_separate_is_never_flagged_again(engine: Engine, tmp_path: Path, decided: bool):
    # The car text leaves the index and comes back: a new row, searched again. Without a decision the pair is
    # flagged again; after a reviewer's keep_separate (its audit record read with the outputs) it is not.
    pair = tuple(sorted((content_hash(CAR), content_hash(AUTOMOBILE))))
    keep = decision_event("keep_separate", by="ana", pair=pair, reason="semantic", version=1)
    events = [upsert("wiki:car", 1, [CAR], acl=("eng",)), upsert("blog:automobile", 1, [AUTOMOBILE])]
    events += [parse_decision(keep)] if decided else []
    events += [DeleteEvent(source_id="wiki:car", version=2), upsert("wiki:car", 3, [CAR], acl=("eng",))]
    records = corpus_records(engine, events)
    assert (("review", ":".join(pair), None) in records) == decided  # the engine resolved the flag
    with open_writer(tmp_path, paraphrase_embedder()) as writer:
        flags = [f.key for _, batch in batches(records, 1) for f in writer.apply(batch, {}).reviews]
    assert flags == [":".join(pair)] * (1 if decided else 2)


def test_flags_are_delivered_before_the_commit(paraphrase_records: list[Record], tmp_path: Path):
    embedder = paraphrase_embedder()
    delivered: list[tuple[str | None, bytes | None]] = []

    def refuse(reviews: Sequence[Output]) -> None:
        raise Crash("the review topic is down")

    with open_writer(tmp_path, embedder) as writer:
        run(writer, paraphrase_records[:-1], 10_000)
        last = paraphrase_records[-1:]
        with pytest.raises(Crash):
            writer.apply(last, {"test": b"end"}, deliver=refuse)
        assert writer.progress("test") != b"end"  # nothing committed: the batch comes again, flag and all

        def keep(reviews: Sequence[Output]) -> None:
            delivered.extend((r.key, writer.progress("test")) for r in reviews)

        report = writer.apply(last, {"test": b"end"}, deliver=keep)
        assert writer.progress("test") == b"end"
    assert [key for key, _ in delivered] == [r.key for r in report.reviews] and len(delivered) == 1
    assert delivered[0][1] != b"end"  # handed over while the position was still the previous one
    assert len(embedder.hashes()) == len(set(embedder.hashes()))


def test_flags_are_off_with_no_neighbours(paraphrase_records: list[Record], tmp_path: Path):
    with open_writer(tmp_path, paraphrase_embedder(), semantic_neighbours=0) as writer:
        assert writer.apply(paraphrase_records, {}).reviews == ()


# -- the batch's search is the search per row ------------------------------------------------------------------------

# Topics written in words that the embedder counts as the first word of their slot; a silent word counts for nothing
# (another text, the same vector: ties), an extra word moves the vector a little (one keeps a paraphrase above the
# threshold, four take it below).
TOPICS = [
    [["the"], ["car", "automobile", "vehicle"], ["needs", "requires"], ["new", "fresh"], ["tires", "tyres"],
     ["before", "ahead"], ["winter", "cold"], ["so"], ["it"], ["grips", "holds"], ["on"], ["snow"], ["and"],
     ["ice"], ["on"], ["every", "each"], ["road", "street"]],
    [["quarterly"], ["revenue", "income", "turnover"], ["grew", "rose"], ["in"], ["every", "each"],
     ["region", "area"], ["while"], ["operating"], ["costs", "expenses"], ["stayed", "remained"], ["flat", "level"],
     ["for"], ["the"], ["third"], ["year"], ["running"]],
    [["reset"], ["your"], ["password", "passphrase"], ["from"], ["the"], ["sign"], ["in"], ["page", "screen"],
     ["by"], ["following", "opening"], ["the"], ["link", "url"], ["we"], ["send", "mail"], ["to"], ["your"],
     ["email"], ["address", "inbox"]],
]  # fmt: skip
SILENT = ["truly", "quite", "simply"]
EXTRA = ["alpha", "bravo", "charlie", "delta", "echo"]
ACLS = [("*",), ("eng",), ("support",), ("eng", "support")]


def topic_embedder() -> FakeEmbedder:
    synonyms = {word: slot[0] for topic in TOPICS for slot in topic for word in slot[1:]}
    return FakeEmbedder(synonyms={**synonyms, **dict.fromkeys(SILENT, "")})


def topic_text(rng: np.random.Generator) -> str:
    if rng.random() < 0.15:  # near copies the engine verifies: same or other facts, same or other readers
        return REFUND.format(int(rng.choice([30, 14]))) + (" Thank you." if rng.random() < 0.5 else "")
    topic = TOPICS[int(rng.integers(len(TOPICS)))]
    words = [str(slot[int(rng.integers(len(slot)))]) for slot in topic]
    for _ in range(int(rng.integers(3))):
        words.insert(int(rng.integers(len(words) + 1)), str(rng.choice(SILENT)))
    words += [str(w) for w in rng.choice(EXTRA, size=int(rng.choice([0, 0, 1, 4])), replace=False)]
    return " ".join(words).capitalize()


def topic_events(seed: int, count: int = 40) -> list[Any]:
    """Return ``count`` random events of ten sources: upserts of topic texts, deletions, ACL changes, decisions."""
    rng = np.random.default_rng(seed)
    versions: dict[str, int] = {}
    texts: list[str] = []
    events: list[Any] = []
    for _ in range(count):
        source_id = f"src:{int(rng.integers(10))}"
        version = versions[source_id] = versions.get(source_id, 0) + 1
        kind = rng.random()
        if kind < 0.6 or version == 1:
            chunks = [topic_text(rng) for _ in range(int(rng.integers(1, 4)))]
            texts += chunks
            acl = ACLS[int(rng.integers(len(ACLS)))]
            events.append(upsert(source_id, version, chunks, acl=acl, day=int(rng.integers(1, 6))))
        elif kind < 0.75:
            events.append(DeleteEvent(source_id=source_id, version=version))
        elif kind < 0.9:
            events.append(
                AclEvent(source_id=source_id, version=version, acl=ACLS[int(rng.integers(len(ACLS)))])
            )
        else:
            first, second = rng.choice(len(texts), size=2, replace=False)
            pair = (content_hash(texts[int(first)]), content_hash(texts[int(second)]))
            if pair[0] != pair[1]:
                kind_of = "keep_separate" if rng.random() < 0.7 else "merge"
                decided = decision_event(kind_of, by="ana", pair=pair, reason="semantic", version=version)
                events.append(parse_decision(decided))
    return events


class OneSearchPerRow:
    """A sink whose ``search_many`` is one ``search`` per vector: the writer's search before it was batched."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def search_many(self, vectors: Any, k: int, *, principals: Any = None) -> list[list[Any]]:
        return [self.inner.search(vector, k, principals=principals) for vector in vectors]


class ComparedSearches:
    """A sink whose ``search_many`` also searches each vector alone, on the same table, and asserts the same."""

    def __init__(self, inner: Sink, threshold: float) -> None:
        self.inner, self.threshold = inner, threshold
        self.tied = 0  # searches with two matches of one score at or above the threshold

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def search_many(self, vectors: Any, k: int, *, principals: Any = None) -> list[list[Any]]:
        found = self.inner.search_many(vectors, k, principals=principals)
        assert found == [self.inner.search(vector, k, principals=principals) for vector in vectors]
        for matches in found:
            scores = [m.score for m in matches if m.score >= self.threshold]
            self.tied += len(scores) > len(set(scores))
        return found


@pytest.mark.parametrize("seed", [0, 1])
def test_the_batch_search_flags_what_a_search_per_row_flags(engine: Engine, tmp_path: Path, seed: int):
    records = corpus_records(engine, topic_events(seed))
    threshold = 0.92
    covered = {"tie": 0, "same batch": 0, "deleted neighbour": 0, "other readers": 0}
    for size in (5, 10_000):
        embedder = topic_embedder()
        batched = ComparedSearches(
            open_sink(f"lancedb://{tmp_path / f'batched-{size}'}", embedder.dimensions), threshold
        )
        per_row = OneSearchPerRow(open_sink(f"lancedb://{tmp_path / f'per-row-{size}'}", embedder.dimensions))
        with (
            IndexWriter(tmp_path / f"writer-batched-{size}", batched, embedder) as writer,
            IndexWriter(tmp_path / f"writer-per-row-{size}", per_row, embedder) as reference,
        ):
            for end, batch in batches(records, size):
                before = held(writer.sink)
                report = writer.apply(batch, {"test": str(end).encode()})
                assert report == reference.apply(batch, {"test": str(end).encode()})
                after = held(writer.sink)
                # What the batch exercised: neighbours written in the same batch, rows it deleted next to its new
                # rows, pairs of rows of other readers.
                new = {
                    row["content_hash"]: row["text"]
                    for chunk_id, row in after.items()
                    if before.get(chunk_id, {}).get("content_hash") != row["content_hash"]
                }
                gone = [row["text"] for chunk_id, row in before.items() if chunk_id not in after]
                for flag in report.reviews:
                    assert flag.value is not None
                    sides = (flag.value["a"], flag.value["b"])
                    held_hashes = {row["content_hash"] for row in after.values()}
                    assert {side["content_hash"] for side in sides} <= held_hashes  # no row the batch deleted
                    covered["same batch"] += all(side["content_hash"] in new for side in sides)
                    covered["other readers"] += sides[0]["acl"] != sides[1]["acl"]
                covered["deleted neighbour"] += any(
                    float(embedder.vector(old) @ embedder.vector(text)) >= threshold
                    for old in gone
                    for text in new.values()
                )
            assert held(writer.sink) == held(per_row.inner)
        covered["tie"] += batched.tied
    assert all(covered.values()), covered


# -- search ---------------------------------------------------------------------------------------------------------


def test_search_returns_each_readable_chunk_once_with_readable_citations(
    records: list[Record], tmp_path: Path
):
    embedder = FakeEmbedder()
    view = fold(records)
    with open_writer(tmp_path, embedder) as writer:
        run(writer, records, 50)
        calls = embedder.calls
        query = "forgot password sign-in page email address link choose a new password"
        for principals in (["support"], ["eng"], ["*"], ["finance", "support"]):
            kept = writer.search(query, principals, k=8)
            assert kept, principals
            ids = [k.chunk_id for k in kept]
            assert len(ids) == len(set(ids))
            scores = [k.score for k in kept]
            assert scores == sorted(scores, reverse=True)
            for hit in kept:
                chunk = view.chunks[hit.chunk_id]
                assert readable(chunk["acl"], principals)
                assert hit.text == chunk["text"]
                for citation in hit.citations:
                    assert citation.acl is not None and readable(citation.acl, principals)
                    assert citation.uri and citation.uri.startswith("https://")
            readable_ids = {c for c, v in view.chunks.items() if readable(v["acl"], principals)}
            assert set(ids) <= readable_ids
            assert len(ids) == min(8, len(readable_ids))
        # The help article, in the support and eng spaces: a support reader gets the chunk once, citing the
        # support copy only.
        help_hits = [
            k for k in writer.search(query, ["support"], k=3) if "password" in (k.text or "").lower()
        ]
        assert help_hits
        assert {c.source_id for c in help_hits[0].citations} == {"confluence:support/reset-password"}
        assert embedder.calls == calls + 5  # one per query, none cached or counted
        assert writer.totals.embedded == len(embedder.embedded) - 5


def test_search_refuses_a_string_of_principals(records: list[Record], tmp_path: Path):
    with (
        open_writer(tmp_path, FakeEmbedder()) as writer,
        pytest.raises(ConfigurationError, match="not the string"),
    ):
        writer.search("anything", "eng")


# -- refusals -------------------------------------------------------------------------------------------------------


def test_a_directory_holding_a_view_of_its_own_is_refused(records: list[Record], tmp_path: Path):
    with ViewWriter(tmp_path / "writer") as view:
        view.apply(records[:10], {})
    with pytest.raises(StateError, match="no index writer keeps"):
        open_writer(tmp_path, FakeEmbedder())


def test_an_index_written_by_another_directory_is_refused(records: list[Record], tmp_path: Path):
    with open_writer(tmp_path, FakeEmbedder()) as writer:
        run(writer, records, 100)
    sink = open_sink(f"lancedb://{tmp_path / 'lance'}", 256)
    with pytest.raises(StateError, match="did not write"):
        IndexWriter(tmp_path / "elsewhere", sink, FakeEmbedder())


def test_another_model_is_refused(records: list[Record], tmp_path: Path):
    with open_writer(tmp_path, FakeEmbedder()) as writer:
        run(writer, records, 100)
    other = FakeEmbedder()
    other.model_id = "another-model"
    with pytest.raises(StateMismatchError, match="another-model"):
        open_writer(tmp_path, other)
    sink = open_sink(f"lancedb://{tmp_path / 'lance'}", 256)
    with pytest.raises(StateMismatchError, match="another-model"):
        IndexWriter(tmp_path / "writer", sink, other)
    with pytest.raises(ConfigurationError, match="dimensions"):
        IndexWriter(tmp_path / "writer", sink, FakeEmbedder(dimensions=64))


def test_an_embedder_returning_the_wrong_shape_is_refused(records: list[Record], tmp_path: Path):
    class Short(FakeEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return super().embed(texts)[:, :10]

    with open_writer(tmp_path, Short()) as writer:
        with pytest.raises(ConfigurationError, match="shape"):
            writer.apply(records, {})
        assert writer.sink.count() == 0 and writer.progress("test") is None


@pytest.mark.parametrize("options", [{"semantic_threshold": 0.0}, {"semantic_neighbours": -1}])
def test_settings_out_of_range_are_refused(tmp_path: Path, options: dict[str, Any]):
    with pytest.raises(ConfigurationError):
        open_writer(tmp_path, FakeEmbedder(), **options)


def test_the_writer_loads_lancedb_only_when_a_lancedb_sink_is_opened(tmp_path: Path):
    code = (
        "import sys\n"
        "import streamdedup.index, streamdedup.index.sink, streamdedup.index.writer\n"
        "before = sorted(m for m in sys.modules if m.split('.')[0] in ('lancedb', 'pyarrow'))\n"
        "streamdedup.index.open_sink(sys.argv[1], 4)\n"
        "print(before, 'lancedb' in sys.modules)\n"
    )
    uri = f"lancedb://{tmp_path / 'lance'}"
    result = subprocess.run([sys.executable, "-c", code, uri], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["[]", "True"]
