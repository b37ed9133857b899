"""Haystack: the safety net as a pipeline component.

:class:`SafetyNetFilter` takes a retriever's ``documents`` and returns the kept ones under ``documents``; the
caller's ``principals`` can be given to each run (the component's own apply otherwise), and so can the
``query_embedding`` that MMR needs along with every document's ``embedding``, and ``current_only`` (the
component's own otherwise; None: as the net does), which drops the chunks only outdated versions of a document
hold. A kept outdated chunk's ``meta`` says ``"current": False`` and names ``outdated_by``.

>>> from haystack import Document
>>> from streamdedup.query.safety_net import MemoryLookup, SafetyNet
>>> lookup = MemoryLookup({"c1": {"text": "Reset it.", "acl": ["eng"], "canonical": {"source_id": "a"}}}, {})
>>> docs = [Document(content="Reset it!", meta={"chunk_id": "c1"}, score=s) for s in (1.0, 2.0)]
>>> screen = SafetyNetFilter(SafetyNet(lookup))
>>> [(d.content, d.score) for d in screen.run(docs, principals=["eng"])["documents"]]
[('Reset it.', 2.0)]
>>> screen.run(docs)["documents"]
[]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from haystack import Document, component

from streamdedup.query.safety_net import Hit, SafetyNet, chunk_id_in

__all__ = ["SafetyNetFilter"]


@component
class SafetyNetFilter:
    """A component that collapses copies, drops what the principals may not read, and cites sources."""

    def __init__(
        self,
        net: SafetyNet,
        *,
        principals: Sequence[str] = ("*",),
        chunk_id_key: str = "chunk_id",
        canonical_text: bool = True,
        current_only: bool | None = None,
    ) -> None:
        self.net = net
        self.principals = tuple(principals)
        self.chunk_id_key = chunk_id_key
        self.canonical_text = canonical_text
        self.current_only = current_only

    @component.output_types(documents=list[Document])
    def run(
        self,
        documents: list[Document],
        principals: list[str] | None = None,
        query_embedding: list[float] | None = None,
        current_only: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Return the documents the principals may be given, each chunk once, with citations in ``meta``."""
        hits = [
            Hit(doc, chunk_id_in(doc.meta, self.chunk_id_key), doc.score, doc.embedding) for doc in documents
        ]
        chosen = self.principals if principals is None else principals
        kept: list[Document] = []
        drop = self.current_only if current_only is None else current_only
        for hit in self.net.apply(hits, chosen, query_embedding=query_embedding, current_only=drop):
            text = hit.text if self.canonical_text and hit.text is not None else hit.item.content
            meta = {**hit.item.meta, **hit.metadata()}
            kept.append(dataclasses.replace(hit.item, content=text, meta=meta))
        return {"documents": kept}
