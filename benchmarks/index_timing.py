"""Timing the index writer's parts for ``benchmarks.index``: a clock of named spans, and an embedder and a sink
that report each call to it."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class Clock:
    """Seconds and calls per part of a run; a part's time leaves out the parts timed inside it."""

    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.items: collections.Counter[str] = collections.Counter()
        self._inner: list[float] = []

    @contextmanager
    def part(self, name: str, items: int = 0) -> Iterator[None]:
        self._inner.append(0.0)
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self.seconds[name] += elapsed - self._inner.pop()
            self.calls[name] += 1
            self.items[name] += items
            if self._inner:
                self._inner[-1] += elapsed

    def wrap(self, name: str, function: Callable[..., T]) -> Callable[..., T]:
        def timed(*args: Any, **kwargs: Any) -> T:
            with self.part(name):
                return function(*args, **kwargs)

        return timed


class TimedEmbedder:
    """An embedder that times ``embed`` and keeps the texts it was given."""

    def __init__(self, inner: Any, clock: Clock) -> None:
        self.inner, self.clock = inner, clock
        self.texts: list[str] = []

    @property
    def model_id(self) -> str:
        return str(self.inner.model_id)

    @property
    def dimensions(self) -> int:
        return int(self.inner.dimensions)

    def embed(self, texts: Sequence[str]) -> Any:
        texts = list(texts)
        self.texts += texts
        with self.clock.part("embed", len(texts)):
            return self.inner.embed(texts)


def timed_sink(directory: Path, dimensions: int, model: str, clock: Clock) -> Any:
    """Open a LanceDB sink whose writes, lookups, searches and ``optimize`` are timed on ``clock``."""
    from streamdedup.index.lancedb import LanceDBSink

    class TimedLanceDBSink(LanceDBSink):
        def upsert(self, rows: Sequence[Any], vectors: Any) -> None:
            with clock.part("upsert", len(rows)):
                super().upsert(rows, vectors)

        def update_metadata(self, rows: Sequence[Any]) -> None:
            with clock.part("update_metadata", len(rows)):
                super().update_metadata(rows)

        def delete(self, chunk_ids: Collection[str]) -> None:
            with clock.part("delete", len(chunk_ids)):
                super().delete(chunk_ids)

        def rows(self, chunk_ids: Iterable[str]) -> dict[str, Any]:
            chunk_ids = list(chunk_ids)
            with clock.part("rows", len(chunk_ids)):
                return super().rows(chunk_ids)

        def search(self, vector: Any, k: int, *, principals: Collection[str] | None = None) -> list[Any]:
            with clock.part("search", 1):
                return super().search(vector, k, principals=principals)

        def search_many(
            self, vectors: Any, k: int, *, principals: Collection[str] | None = None
        ) -> list[list[Any]]:
            with clock.part("search", len(vectors)):
                return super().search_many(vectors, k, principals=principals)

        def optimize(self) -> None:
            with clock.part("optimize", 1):
                super().optimize()

    return TimedLanceDBSink(directory, dimensions, model=model)
