"""The index writer: a vector database kept in step with the outputs (``streamdedup index``).

- :mod:`streamdedup.index.sink`: the protocol a vector database implements;
- :mod:`streamdedup.index.lancedb`: the LanceDB implementation (imported only when a LanceDB sink is opened);
- :mod:`streamdedup.index.writer`: :class:`~.writer.IndexWriter`, which applies output records to a sink and a view;
- :mod:`streamdedup.index.embeddings`: the embedders that turn chunk texts into vectors.

:func:`open_sink` opens a sink by URI; another database is another module implementing the protocol and one more
scheme in :data:`SCHEMES`.

>>> open_sink("qdrant://localhost:6333", 384)
Traceback (most recent call last):
...
streamdedup.errors.ConfigurationError: unsupported index 'qdrant://localhost:6333': expected lancedb://DIR
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from streamdedup.errors import ConfigurationError

if TYPE_CHECKING:
    from streamdedup.index.sink import Sink

__all__ = ["SCHEMES", "open_sink"]

#: The URI schemes :func:`open_sink` knows.
SCHEMES = ("lancedb",)


def open_sink(uri: str, dimensions: int, *, model: str | None = None, table: str | None = None) -> Sink:
    """Open the sink a URI names, for vectors of ``dimensions``: ``lancedb://DIR`` is a LanceDB directory.

    An existing table of vectors of another length, or of another ``model`` when one is given, is refused.
    """
    scheme, separator, rest = uri.partition("://")
    if not separator or scheme not in SCHEMES:
        raise ConfigurationError(
            f"unsupported index {uri!r}: expected {' or '.join(s + '://DIR' for s in SCHEMES)}"
        )
    if not rest:
        raise ConfigurationError(f"the index {uri!r} names no directory")
    if dimensions < 1:
        raise ConfigurationError(f"an index needs vectors of at least 1 dimension, not {dimensions}")
    # Imported here so that a program that never opens a LanceDB sink never loads lancedb.
    from streamdedup.index.lancedb import LanceDBSink  # noqa: PLC0415

    if table is None:
        return LanceDBSink(Path(rest).expanduser(), dimensions, model=model)
    return LanceDBSink(Path(rest).expanduser(), dimensions, model=model, table=table)
