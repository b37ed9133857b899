"""The index's vectors in memory (streamdedup.index.neighbours): which new rows can have a semantic neighbour, and
the writer's flags with it equal to its flags searching every new row in the database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.core.engine import Engine
from streamdedup.core.params import EngineParams
from streamdedup.index import open_sink
from streamdedup.index.neighbours import MARGIN, VectorMatrix
from streamdedup.index.sink import Sink
from streamdedup.index.writer import IndexWriter
from tests.unit.test_index_writer import batches, corpus_records, held, topic_embedder, topic_events

D = 8


def brute_best(model: dict[str, np.ndarray], query: np.ndarray, own: str) -> float:
    """The highest cosine of ``query`` with a row other than ``own``, in float64 (-inf with no such row)."""
    best = -np.inf
    for chunk_id, vector in model.items():
        if chunk_id != own:
            best = max(best, float(vector @ query / np.linalg.norm(vector) / np.linalg.norm(query)))
    return best


vectors = st.lists(st.integers(-3, 3), min_size=D, max_size=D).filter(any)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.lists(st.tuples(st.integers(0, 12), vectors), min_size=1, max_size=5)),
        st.tuples(st.just("remove"), st.lists(st.integers(0, 12), max_size=4)),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(steps=steps, queries=st.lists(st.tuples(st.integers(0, 14), vectors), min_size=1, max_size=6))
def test_near_finds_every_row_within_the_threshold_and_no_row_far_below_it(
    steps: list[Any], queries: list[Any]
):
    # Small integer vectors make exact ties and exact threshold hits common.
    matrix = VectorMatrix(D)
    model: dict[str, np.ndarray] = {}
    for kind, items in steps:
        if kind == "put":
            ids = [f"c{n}" for n, _ in items]
            stacked = np.array([v for _, v in items], dtype=np.float32)
            matrix.put(ids, stacked)
            model.update((chunk_id, stacked[n].astype(np.float64)) for n, chunk_id in enumerate(ids))
        else:
            matrix.remove([f"c{n}" for n in items])
            for n in items:
                model.pop(f"c{n}", None)
        assert len(matrix) == len(model)
    own = [f"c{n}" for n, _ in queries]
    stacked = np.array([v for _, v in queries], dtype=np.float32)
    for at_least in (0.5, 0.8, 0.92, 1.0):
        near = matrix.near(stacked, own, at_least)
        for n, hit in enumerate(near):
            best = brute_best(model, stacked[n].astype(np.float64), own[n])
            if best >= at_least - 1e-9:
                assert hit, (at_least, best)
            if best < at_least - 2 * MARGIN:
                assert not hit, (at_least, best)


def test_rows_without_a_direction_make_every_query_a_candidate():
    matrix = VectorMatrix(D)
    matrix.put(["a", "b"], np.eye(D, dtype=np.float32)[:2])
    query = np.eye(D, dtype=np.float32)[2:3]
    assert matrix.near(query, ["q"], 0.9) == [False]
    matrix.put(["z"], np.zeros((1, D), dtype=np.float32))
    assert matrix.near(query, ["q"], 0.9) == [True]
    matrix.put(["z"], np.eye(D, dtype=np.float32)[3:4])  # given a direction again
    assert matrix.near(query, ["q"], 0.9) == [False]
    assert matrix.near(np.zeros((1, D), dtype=np.float32), ["q"], 0.9) == [True]  # nor a query without one


def test_past_its_rows_it_holds_nothing_and_every_query_is_a_candidate():
    matrix = VectorMatrix(D, max_rows=3)
    matrix.put(["a", "b", "c"], np.eye(D, dtype=np.float32)[:3])
    query = np.eye(D, dtype=np.float32)[5:6]
    assert matrix.near(query, ["q"], 0.9) == [False]
    matrix.put(["a"], np.eye(D, dtype=np.float32)[4:5])  # a replaced vector takes no new row
    assert not matrix.full
    matrix.put(["d"], np.eye(D, dtype=np.float32)[3:4])
    assert matrix.full and len(matrix) == 0
    assert matrix.near(query, ["q"], 0.9) == [True]


def test_it_reads_every_vector_a_sink_holds(tmp_path: Path):
    sink = open_sink(f"lancedb://{tmp_path / 'index'}", D)
    from streamdedup.index.sink import Row

    rows = [
        Row(f"c{n}", f"text {n}", f"h{n}", (f"s{n}",), ("*",), "2026-01-01T00:00:00Z", "m") for n in range(5)
    ]
    rng = np.random.default_rng(3)
    sink.upsert(rows, rng.normal(size=(5, D)).astype(np.float32))
    sink.delete(["c2"])
    matrix = VectorMatrix.of_sink(sink)
    assert len(matrix) == 4
    stored = sink.vectors(sink.chunk_ids())
    for chunk_id, vector in stored.items():
        # Each stored vector is its own nearest row, excluded as the query's own: another one is far.
        assert matrix.near(vector[None, :], ["nobody"], 0.999) == [True]
        assert matrix.near(vector[None, :], [chunk_id], 0.999) == [False]
    assert VectorMatrix.of_sink(sink, max_rows=3).full


class CountedSearches:
    """A sink that counts the vectors its ``search_many`` is asked about."""

    def __init__(self, inner: Sink) -> None:
        self.inner, self.searched = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def search_many(self, vectors: Any, k: int, *, principals: Any = None) -> list[list[Any]]:
        self.searched += len(vectors)
        found: list[list[Any]] = self.inner.search_many(vectors, k, principals=principals)
        return found


class FailingUpsert(CountedSearches):
    """Fails its third write of rows after writing them: the database holds a batch the writer did not commit, and
    the batch applied again writes none of those rows (the database holds them already)."""

    writes = 0

    @property
    def failed(self) -> bool:
        return self.writes >= 3

    def upsert(self, rows: Any, vectors: Any) -> None:
        self.inner.upsert(rows, vectors)
        self.writes += 1
        if self.writes == 3:
            self.failed = True
            raise OSError("the disk went away")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_writer_flags_what_it_flags_searching_every_new_row(tmp_path: Path, seed: int):
    engine = Engine(EngineParams())
    records = corpus_records(engine, topic_events(seed, count=60))
    for size in (4, 25):
        embedder = topic_embedder()
        filtered = CountedSearches(
            open_sink(f"lancedb://{tmp_path / f'filtered-{size}'}", embedder.dimensions)
        )
        every = CountedSearches(open_sink(f"lancedb://{tmp_path / f'every-{size}'}", embedder.dimensions))
        flaky = FailingUpsert(open_sink(f"lancedb://{tmp_path / f'flaky-{size}'}", embedder.dimensions))
        with (
            IndexWriter(tmp_path / f"w-filtered-{size}", filtered, embedder) as writer,
            IndexWriter(tmp_path / f"w-every-{size}", every, embedder, memory_rows=0) as reference,
            IndexWriter(tmp_path / f"w-flaky-{size}", flaky, embedder) as interrupted,
        ):
            flags = 0
            for end, batch in batches(records, size):
                progress = {"test": str(end).encode()}
                report = writer.apply(batch, progress)
                assert report == reference.apply(batch, progress)
                try:
                    again = interrupted.apply(batch, progress)
                except Exception:  # the batch is applied again, as after a restart
                    again = interrupted.apply(batch, progress)
                assert again.reviews == report.reviews
                flags += len(report.reviews)
            assert held(filtered.inner) == held(every.inner) == held(flaky.inner)
        assert flaky.failed
        assert flags > 0
        assert 0 < filtered.searched < every.searched, (filtered.searched, every.searched)
