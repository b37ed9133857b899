"""The safety net in LangChain, after a real in-memory vector store's retriever.

The compressor runs inside a real ``ContextualCompressionRetriever`` (``langchain-classic``, a dev dependency; the
``langchain`` extra needs only ``langchain-core``) and is also called as that retriever calls it; the runnable is
piped after the retriever in a chain.
"""

from __future__ import annotations

import collections
import hashlib
import math
import os
import subprocess
import sys

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import ValidationError

from streamdedup.adapters.langchain import SafetyNetCompressor, safety_net_runnable
from streamdedup.errors import ConfigurationError
from streamdedup.query.safety_net import MMR, SafetyNet
from tests.adapters.conftest import CLI_SETUP, HELP_COPIES, HELP_QUERY, README, Passage


class WordCounts(Embeddings):
    """Hashed bag-of-words vectors: retrieval by shared words, with no model."""

    size = 512

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.size
        for word in text.lower().replace(".", " ").replace(",", " ").split():
            vector[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % self.size] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


@pytest.fixture(scope="module")
def store(passages: list[Passage]) -> InMemoryVectorStore:
    store = InMemoryVectorStore(embedding=WordCounts())
    store.add_documents([Document(page_content=p.text, metadata=p.metadata) for p in passages])
    return store


def test_the_compressor_collapses_copies_and_cites_every_source(view, store, help_chunk, feed_titles):
    raw = store.as_retriever(search_kwargs={"k": 6}).invoke(HELP_QUERY)
    assert collections.Counter(d.metadata["chunk_id"] for d in raw)[help_chunk] == 2
    kept = SafetyNetCompressor(net=SafetyNet(view), principals=["support", "eng"]).compress_documents(
        raw, HELP_QUERY
    )
    ids = [d.metadata["chunk_id"] for d in kept]
    assert ids[0] == help_chunk and len(ids) == len(set(ids))
    assert kept[0].metadata["source_ids"] == sorted(HELP_COPIES)
    assert [(c["source_id"], c["uri"], c["title"]) for c in kept[0].metadata["citations"]] == [
        (s, *feed_titles[s]) for s in sorted(HELP_COPIES)
    ]
    assert kept[0].metadata["source_id"] == raw[0].metadata["source_id"]  # the retriever's best copy is kept


def test_a_contextual_compression_retriever_with_the_compressor(view, store, help_chunk, feed_titles):
    base = store.as_retriever(search_kwargs={"k": 6})
    raw = base.invoke(HELP_QUERY)
    assert collections.Counter(d.metadata["chunk_id"] for d in raw)[help_chunk] == 2
    for principals, sees in ((["support", "eng"], True), (["*"], False)):
        compressor = SafetyNetCompressor(net=SafetyNet(view), principals=principals)
        retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
        kept = retriever.invoke(HELP_QUERY)
        ids = [d.metadata["chunk_id"] for d in kept]
        assert len(ids) == len(set(ids)) and (help_chunk in ids) is sees, principals
        assert all(view.chunk(c) is not None for c in ids)
    [article] = [
        d
        for d in ContextualCompressionRetriever(
            base_compressor=SafetyNetCompressor(net=SafetyNet(view), principals=["support", "eng"]),
            base_retriever=base,
        ).invoke(HELP_QUERY)
        if d.metadata["chunk_id"] == help_chunk
    ]
    assert [(c["source_id"], c["uri"], c["title"]) for c in article.metadata["citations"]] == [
        (s, *feed_titles[s]) for s in sorted(HELP_COPIES)
    ]


def test_the_runnable_takes_the_principals_of_each_call(view, store, help_chunk):
    chain = store.as_retriever(search_kwargs={"k": 6}) | safety_net_runnable(SafetyNet(view))

    def chunk_ids(principals: list[str] | None) -> list[str]:
        config = {} if principals is None else {"configurable": {"principals": principals}}
        return [d.metadata["chunk_id"] for d in chain.invoke(HELP_QUERY, config=config)]

    assert help_chunk not in chunk_ids(None)  # the runnable's own principals: public only
    assert help_chunk not in chunk_ids(["*"])
    assert help_chunk not in chunk_ids(["sales"])  # the sales copy was deleted
    assert chunk_ids(["contractors"]).count(help_chunk) == 1  # the ACL change added contractors
    assert all("*" in view.chunk(c)["acl"] for c in chunk_ids(["*"]))


def test_for_principals_changes_only_the_principals(view, store, help_chunk):
    raw = store.as_retriever(search_kwargs={"k": 6}).invoke(HELP_QUERY)
    public = SafetyNetCompressor(net=SafetyNet(view), chunk_id_key="chunk_id")
    eng = public.for_principals(["eng"])
    assert (public.principals, eng.principals, eng.net) == (("*",), ("eng",), public.net)
    assert help_chunk not in {d.metadata["chunk_id"] for d in public.compress_documents(raw, HELP_QUERY)}
    assert help_chunk in {d.metadata["chunk_id"] for d in eng.compress_documents(raw, HELP_QUERY)}
    with pytest.raises(ValidationError):
        SafetyNetCompressor(net=SafetyNet(view), principals="eng")


def test_a_near_copy_is_served_as_the_canonical_text(view, store, passages, readme_chunk):
    [wiki] = [p for p in passages if p.source_id == CLI_SETUP]
    raw = store.as_retriever(search_kwargs={"k": 3}).invoke(wiki.text)
    assert raw[0].metadata["source_id"] == CLI_SETUP and raw[0].page_content == wiki.text
    kept = SafetyNetCompressor(net=SafetyNet(view)).compress_documents(raw, wiki.text)
    assert kept[0].metadata["chunk_id"] == readme_chunk
    assert kept[0].page_content == view.chunk(readme_chunk)["text"] != wiki.text
    # A public caller is cited the public README alone, never the eng page it cannot open; eng sees both.
    assert kept[0].metadata["source_ids"] == [README]
    for_eng = SafetyNetCompressor(net=SafetyNet(view), principals=["eng"]).compress_documents(raw, wiki.text)
    assert for_eng[0].metadata["source_ids"] == sorted([README, CLI_SETUP])
    raw_text = SafetyNetCompressor(net=SafetyNet(view), canonical_text=False).compress_documents(raw, "")
    assert raw_text[0].page_content == wiki.text


def test_documents_without_chunk_id_or_with_a_deleted_one(view, deleted_chunk):
    docs = [Document("stale", metadata={"chunk_id": deleted_chunk}), Document("foreign", metadata={"id": 1})]
    assert SafetyNetCompressor(net=SafetyNet(view), principals=["eng"]).compress_documents(docs, "q") == []
    keep = SafetyNet(view, unknown="keep", unidentified="keep")
    assert SafetyNetCompressor(net=keep, principals=["eng"]).compress_documents(docs, "q") == docs


def test_mmr_needs_embeddings_that_langchain_documents_do_not_carry(view, store):
    raw = store.as_retriever().invoke(HELP_QUERY)
    compressor = SafetyNetCompressor(net=SafetyNet(view, mmr=MMR(k=2)), principals=["eng"])
    with pytest.raises(ConfigurationError, match="MMR needs"):
        compressor.compress_documents(raw, HELP_QUERY)


def test_importing_the_adapter_imports_no_other_framework():
    code = (
        "import sys, streamdedup.adapters.langchain; "
        "print(sorted(m for m in ('haystack', 'llama_index') if m in sys.modules))"
    )
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.strip() == "[]"
