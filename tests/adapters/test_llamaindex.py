"""The safety net as a LlamaIndex node postprocessor, after a real vector index's retriever and query engine.

``MockEmbedding`` gives every text the same vector, so the retriever ranks all passages equal and returns as many
as it is asked for: every copy of every chunk, in an order of its own.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

from streamdedup.adapters.llamaindex import SafetyNetPostprocessor
from streamdedup.query.safety_net import MMR, MemoryLookup, SafetyNet
from tests.adapters.conftest import CLI_SETUP, HELP_COPIES, HELP_QUERY, README, Passage


@pytest.fixture(scope="module")
def index(passages: list[Passage]) -> VectorStoreIndex:
    nodes = [TextNode(text=p.text, metadata=p.metadata) for p in passages]
    return VectorStoreIndex(nodes=nodes, embed_model=MockEmbedding(embed_dim=8))


def test_copies_collapse_and_every_source_is_cited(view, index, passages, help_chunk, feed_titles):
    raw = index.as_retriever(similarity_top_k=len(passages)).retrieve(HELP_QUERY)
    assert collections.Counter(n.node.metadata["chunk_id"] for n in raw)[help_chunk] == 2
    screen = SafetyNetPostprocessor(net=SafetyNet(view), principals=["support", "eng"])
    kept = screen.postprocess_nodes(raw, query_str=HELP_QUERY)
    ids = [n.node.metadata["chunk_id"] for n in kept]
    assert ids.count(help_chunk) == 1 and len(ids) == len(set(ids))
    assert set(ids) == {p.chunk_id for p in passages if readable_by(view, p.chunk_id, {"support", "eng"})}
    [article] = [n for n in kept if n.node.metadata["chunk_id"] == help_chunk]
    first_copy = next(n for n in raw if n.node.metadata["chunk_id"] == help_chunk)
    assert article.node.node_id == first_copy.node.node_id  # equal scores: the retriever's first copy stays
    assert article.node.metadata["source_ids"] == sorted(HELP_COPIES)
    assert [(c["source_id"], c["uri"], c["title"]) for c in article.node.metadata["citations"]] == [
        (s, *feed_titles[s]) for s in sorted(HELP_COPIES)
    ]
    shown = article.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "citations" not in shown and "source_ids" not in shown and help_chunk in shown


def readable_by(view, chunk_id: str, principals: set[str]) -> bool:
    acl = set(view.chunk(chunk_id)["acl"])
    return "*" in acl or bool(acl & principals)


def test_the_query_engine_applies_it_for_each_caller(view, index, passages, help_chunk):
    retriever = index.as_retriever(similarity_top_k=len(passages))

    def chunk_ids(screen: SafetyNetPostprocessor) -> list[str]:
        engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM(), node_postprocessors=[screen])
        return [n.node.metadata["chunk_id"] for n in engine.retrieve(QueryBundle(HELP_QUERY))]

    public = SafetyNetPostprocessor(net=SafetyNet(view))
    assert help_chunk not in chunk_ids(public)
    assert all("*" in view.chunk(c)["acl"] for c in chunk_ids(public))
    assert help_chunk not in chunk_ids(public.for_principals(["sales"]))  # the sales copy was deleted
    assert chunk_ids(public.for_principals(["contractors"])).count(help_chunk) == 1


def test_a_near_copy_is_served_as_the_canonical_text(view, index, passages, readme_chunk):
    [wiki] = [p for p in passages if p.source_id == CLI_SETUP]
    only_wiki = MetadataFilters(filters=[MetadataFilter(key="source_id", value=CLI_SETUP)])
    raw = index.as_retriever(similarity_top_k=5, filters=only_wiki).retrieve(wiki.text)
    assert [n.node.get_content() for n in raw] == [wiki.text]
    [kept] = SafetyNetPostprocessor(net=SafetyNet(view)).postprocess_nodes(raw)
    assert kept.node.get_content() == view.chunk(readme_chunk)["text"] != wiki.text
    # A public caller is cited the public README alone, never the eng page it cannot open; eng sees both.
    assert kept.node.metadata["source_ids"] == [README] and kept.score == raw[0].score
    [for_eng] = SafetyNetPostprocessor(net=SafetyNet(view), principals=["eng"]).postprocess_nodes(raw)
    assert for_eng.node.metadata["source_ids"] == sorted([README, CLI_SETUP])
    assert raw[0].node.get_content() == wiki.text  # the retriever's node is not changed in place


def test_nodes_without_chunk_id_or_with_a_deleted_one(view, deleted_chunk):
    nodes = [
        NodeWithScore(node=TextNode(text="stale", metadata={"chunk_id": deleted_chunk}), score=0.9),
        NodeWithScore(node=TextNode(text="foreign"), score=0.8),
    ]
    assert SafetyNetPostprocessor(net=SafetyNet(view), principals=["eng"]).postprocess_nodes(nodes) == []
    keep = SafetyNetPostprocessor(
        net=SafetyNet(view, unknown="keep", unidentified="keep"), principals=["eng"]
    )
    assert keep.postprocess_nodes(nodes) == nodes


def test_mmr_uses_the_query_bundle_and_node_embeddings():
    record = {"text": "t", "acl": ["*"], "canonical": {"source_id": "s"}}
    lookup = MemoryLookup({c: dict(record, chunk_id=c) for c in "abc"}, {})
    vectors = {"a": [0.8, 0.6], "b": [0.8, 0.6], "c": [0.6, -0.8]}
    nodes = [
        NodeWithScore(node=TextNode(text=c, metadata={"chunk_id": c}, embedding=v), score=3.0 - n)
        for n, (c, v) in enumerate(vectors.items())
    ]
    screen = SafetyNetPostprocessor(net=SafetyNet(lookup, mmr=MMR(k=2)), canonical_text=False)
    kept = screen.postprocess_nodes(nodes, QueryBundle("q", embedding=[1.0, 0.0]))
    assert [n.node.get_content() for n in kept] == ["a", "c"]


def test_importing_the_adapter_imports_no_other_framework():
    code = (
        "import sys, streamdedup.adapters.llamaindex; "
        "print(sorted(m for m in ('haystack', 'langchain_core') if m in sys.modules))"
    )
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.strip() == "[]"
