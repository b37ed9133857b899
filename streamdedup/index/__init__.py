"""The index writer: a vector database kept in step with the outputs (``streamdedup index``).

- :mod:`streamdedup.index.sink`: the protocol a vector database implements, and :func:`~.sink.open_sink`;
- :mod:`streamdedup.index.lancedb`: the LanceDB implementation (imported only when a LanceDB sink is opened);
- :mod:`streamdedup.index.writer`: :class:`~.writer.IndexWriter`, which applies output records to a sink and a view.
"""

__all__: list[str] = []
