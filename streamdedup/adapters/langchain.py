"""LangChain: the safety net as a document compressor and as a runnable.

:class:`SafetyNetCompressor` is a ``BaseDocumentCompressor``, for ``ContextualCompressionRetriever`` (in the
``langchain-classic`` package) or any code that compresses documents; :func:`safety_net_runnable` is a
``RunnableLambda`` to pipe a retriever into, whose principals can change per call through the run's
``configurable``, and so can ``current_only`` (:data:`CURRENT_ONLY_KEY`). LangChain documents carry no score:
hits keep the retriever's order. They carry no embedding either, so a
:class:`~streamdedup.query.safety_net.SafetyNet` with MMR cannot be used here.

>>> from langchain_core.documents import Document
>>> from streamdedup.query.safety_net import MemoryLookup, SafetyNet
>>> lookup = MemoryLookup({"c1": {"text": "Reset it.", "acl": ["eng"], "canonical": {"source_id": "a"}}}, {})
>>> compressor = SafetyNetCompressor(net=SafetyNet(lookup), principals=["eng"])
>>> docs = [Document("Reset it!", metadata={"chunk_id": "c1"}), Document("Reset it.", metadata={"chunk_id": "c1"})]
>>> [d.page_content for d in compressor.compress_documents(docs, "reset")]
['Reset it.']
>>> compressor.for_principals(["*"]).compress_documents(docs, "reset")
[]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.documents.compressor import BaseDocumentCompressor
from langchain_core.runnables import RunnableConfig, RunnableLambda
from pydantic import ConfigDict, Field, InstanceOf

from streamdedup.query.safety_net import Hit, SafetyNet, chunk_id_in

__all__ = [
    "CURRENT_ONLY_KEY",
    "PRINCIPALS_KEY",
    "SafetyNetCompressor",
    "safety_net_runnable",
    "screen_documents",
]

#: The ``configurable`` key that sets the principals of one run of :func:`safety_net_runnable`.
PRINCIPALS_KEY = "principals"
#: The ``configurable`` key that sets ``current_only`` for one run of :func:`safety_net_runnable`.
CURRENT_ONLY_KEY = "current_only"


def screen_documents(
    net: SafetyNet,
    documents: Iterable[Document],
    principals: Iterable[str],
    *,
    chunk_id_key: str = "chunk_id",
    canonical_text: bool = True,
    current_only: bool | None = None,
) -> list[Document]:
    """Return the documents ``net`` keeps for ``principals``, as new documents with citations in their metadata.

    ``current_only`` drops the chunks only outdated versions of a document hold (None: as ``net`` does); a kept
    outdated chunk's metadata says ``"current": False`` and names ``outdated_by``.
    """
    hits = [Hit(doc, chunk_id_in(doc.metadata, chunk_id_key)) for doc in documents]
    kept: list[Document] = []
    for hit in net.apply(hits, principals, current_only=current_only):
        text = hit.text if canonical_text and hit.text is not None else hit.item.page_content
        kept.append(
            hit.item.model_copy(
                update={"page_content": text, "metadata": {**hit.item.metadata, **hit.metadata()}}
            )
        )
    return kept


class SafetyNetCompressor(BaseDocumentCompressor):
    """A document compressor that collapses copies, drops what the principals may not read, and cites sources."""

    # What it screens for is fixed; :meth:`for_principals` makes a copy for another caller.
    model_config = ConfigDict(arbitrary_types_allowed=True)

    net: InstanceOf[SafetyNet] = Field(frozen=True)
    principals: tuple[str, ...] = Field(default=("*",), frozen=True)
    chunk_id_key: str = Field(default="chunk_id", frozen=True)
    canonical_text: bool = Field(default=True, frozen=True)
    #: Drop the chunks only outdated versions of a document hold; None: as ``net`` does.
    current_only: bool | None = Field(default=None, frozen=True)

    def for_principals(self, principals: Iterable[str]) -> SafetyNetCompressor:
        """Return a copy that screens for ``principals`` (a compressor is given nothing per call but the query)."""
        return self.model_copy(update={"principals": tuple(principals)})

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Return the documents the principals may be given, each chunk once, with citations."""
        return screen_documents(
            self.net,
            documents,
            self.principals,
            chunk_id_key=self.chunk_id_key,
            canonical_text=self.canonical_text,
            current_only=self.current_only,
        )


def safety_net_runnable(
    net: SafetyNet,
    *,
    principals: Sequence[str] = ("*",),
    chunk_id_key: str = "chunk_id",
    canonical_text: bool = True,
    current_only: bool | None = None,
) -> RunnableLambda[Sequence[Document], list[Document]]:
    """Return a runnable that screens a list of documents, e.g. ``retriever | safety_net_runnable(net)``.

    ``principals`` applies unless the run's config sets ``{"configurable": {"principals": [...]}}``, and
    ``current_only`` (None: as ``net`` does) unless it sets ``"current_only"``.
    """
    default = tuple(principals)

    def screen(documents: Sequence[Document], config: RunnableConfig) -> list[Document]:
        configurable: dict[str, Any] = dict(config.get("configurable") or {})
        chosen = configurable.get(PRINCIPALS_KEY, default)
        return screen_documents(
            net,
            documents,
            chosen,
            chunk_id_key=chunk_id_key,
            canonical_text=canonical_text,
            current_only=configurable.get(CURRENT_ONLY_KEY, current_only),
        )

    return RunnableLambda(screen, name="streamdedup_safety_net")
