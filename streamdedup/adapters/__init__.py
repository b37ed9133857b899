"""The query-time safety net (:mod:`streamdedup.query.safety_net`) inside retrieval frameworks.

One module per framework, each importing only its own framework, installed as an extra:

- :mod:`streamdedup.adapters.langchain`: a document compressor and a runnable (``langchain-core``);
- :mod:`streamdedup.adapters.llamaindex`: a node postprocessor (``llama-index-core``);
- :mod:`streamdedup.adapters.haystack`: a pipeline component (``haystack-ai``).

Each reads the chunk id from the document's metadata (``chunk_id`` unless told otherwise), takes the caller's
principals (per call where the framework passes anything per call, a default at construction), and returns the
kept documents with ``citations`` (every source, as dicts) and ``source_ids`` added to their metadata. The text of
a kept document becomes its canonical chunk's text: the chunk's ``acl`` says who may read that text, while a near
copy indexed under the same chunk id may come from a source with fewer readers. Nothing here calls a model or
the network.
"""

__all__: list[str] = []
