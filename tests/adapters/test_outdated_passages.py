"""The adapters' ``current_only``: outdated chunks dropped, or kept with ``outdated_by`` in their metadata."""

from __future__ import annotations

import pytest
from haystack import Document as HaystackDocument
from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore, TextNode

from streamdedup.adapters.haystack import SafetyNetFilter
from streamdedup.adapters.langchain import SafetyNetCompressor, safety_net_runnable, screen_documents
from streamdedup.adapters.llamaindex import SafetyNetPostprocessor
from streamdedup.query.safety_net import SafetyNet
from tests.unit.test_current_only import LOOKUP, NEW

IDS = ("gone", "kept", "added")  # "gone" only the outdated release holds


def _langchain() -> list[Document]:
    return [Document(f"hit {c}", metadata={"chunk_id": c}) for c in IDS]


def _ids(found: list[dict[str, object]]) -> list[object]:
    return [m["chunk_id"] for m in found]


@pytest.mark.parametrize("net_default", [True, False])
def test_langchain(net_default: bool):
    net = SafetyNet(LOOKUP, current_only=net_default)
    on = screen_documents(net, _langchain(), ["*"], current_only=True)
    off = screen_documents(net, _langchain(), ["*"], current_only=False)
    assert _ids([d.metadata for d in on]) == ["kept", "added"]
    assert _ids([d.metadata for d in off]) == list(IDS)
    assert off[0].metadata["current"] is False and off[0].metadata["outdated_by"] == NEW
    assert off[0].metadata["citations"][0]["outdated_by"] == NEW
    assert "outdated_by" not in off[1].metadata
    # None: as the net does.
    default = screen_documents(net, _langchain(), ["*"])
    assert len(default) == (2 if net_default else 3)
    compressor = SafetyNetCompressor(net=net, principals=["*"], current_only=not net_default)
    assert len(compressor.compress_documents(_langchain(), "q")) == (3 if net_default else 2)
    runnable = safety_net_runnable(net)
    assert len(runnable.invoke(_langchain(), {"configurable": {"current_only": True}})) == 2
    assert len(runnable.invoke(_langchain(), {"configurable": {"current_only": False}})) == 3


def test_llamaindex():
    nodes = [NodeWithScore(node=TextNode(text=c, metadata={"chunk_id": c}), score=1.0) for c in IDS]
    net = SafetyNet(LOOKUP, current_only=True)
    on = SafetyNetPostprocessor(net=net, principals=["*"]).postprocess_nodes(nodes)
    off = SafetyNetPostprocessor(net=net, principals=["*"], current_only=False).postprocess_nodes(nodes)
    assert [n.node.metadata["chunk_id"] for n in on] == ["kept", "added"]
    assert [n.node.metadata["chunk_id"] for n in off] == list(IDS)
    gone = off[0].node
    assert gone.metadata["outdated_by"] == NEW and gone.metadata["current"] is False
    assert "outdated_by" not in gone.excluded_llm_metadata_keys  # the LLM is told the passage is outdated
    assert "outdated_by" in gone.excluded_embed_metadata_keys


def test_haystack():
    docs = [HaystackDocument(content=c, meta={"chunk_id": c}, score=1.0) for c in IDS]
    screen = SafetyNetFilter(SafetyNet(LOOKUP, current_only=False), principals=["*"])
    assert [d.meta["chunk_id"] for d in screen.run(docs)["documents"]] == list(IDS)
    assert [d.meta["chunk_id"] for d in screen.run(docs, current_only=True)["documents"]] == ["kept", "added"]
    kept = SafetyNetFilter(SafetyNet(LOOKUP, current_only=False), current_only=True).run(
        docs, principals=["*"]
    )
    assert len(kept["documents"]) == 2
    gone = screen.run(docs)["documents"][0]
    assert gone.meta["outdated_by"] == NEW and gone.meta["citations"][0]["outdated_by"] == NEW
