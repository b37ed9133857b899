"""Each adapter over a chunk held by 1,000 sources, source ``n`` readable by ``u<n>`` alone.

A naive index holds one passage per source, all of the same chunk. A caller who reads only the last source (which
the chunk record, listing 100 sources, leaves out) gets the chunk once, cited by that source; a caller who reads
none gets nothing; after an ACL change takes the last source from ``u999``, ``u999`` gets nothing either.
"""

from __future__ import annotations

import json

import pytest
from haystack import Document as HaystackDocument
from langchain_core.documents import Document as LangChainDocument
from llama_index.core.schema import NodeWithScore, TextNode

from streamdedup.adapters.haystack import SafetyNetFilter
from streamdedup.adapters.langchain import SafetyNetCompressor
from streamdedup.adapters.llamaindex import SafetyNetPostprocessor
from streamdedup.contract.codec import encode_output_line
from streamdedup.core.engine import Engine
from streamdedup.core.normalize import content_hash
from streamdedup.query.safety_net import MemoryLookup, SafetyNet
from tests.helpers import POPULAR_SOURCES, POPULAR_TEXT, popular_outputs, popular_source

CHUNK = content_hash(POPULAR_TEXT)
LAST = f"u{POPULAR_SOURCES - 1}"
CITATION = {
    "source_id": popular_source(POPULAR_SOURCES - 1),
    "positions": [0],
    "uri": f"https://wiki.example/space-{POPULAR_SOURCES - 1:03d}/keys",
    "title": f"Key rotation (space {POPULAR_SOURCES - 1})",
    "modified_at": f"1970-01-{2 + (POPULAR_SOURCES - 1) % 30:02d}T00:00:00Z",
}


@pytest.fixture(scope="module")
def nets(engine: Engine) -> tuple[SafetyNet, SafetyNet]:
    """Return the safety net over the outputs, and over the outputs after the ACL change."""
    before, after = popular_outputs(engine)
    written = [json.loads(encode_output_line(o)) for o in before]
    changed = [json.loads(encode_output_line(o)) for o in after]
    return SafetyNet(MemoryLookup.from_outputs(written)), SafetyNet(
        MemoryLookup.from_outputs(written + changed)
    )


def metadata(n: int) -> dict[str, object]:
    return {"chunk_id": CHUNK, "source_id": popular_source(n), "position": 0}


def test_langchain(nets: tuple[SafetyNet, SafetyNet]):
    docs = [LangChainDocument(POPULAR_TEXT, metadata=metadata(n)) for n in range(POPULAR_SOURCES)]
    before, after = (SafetyNetCompressor(net=net, principals=[LAST]) for net in nets)
    [kept] = before.compress_documents(docs, "signing keys")
    assert kept.metadata["citations"] == [CITATION]
    assert before.for_principals(["nobody"]).compress_documents(docs, "signing keys") == []
    assert after.compress_documents(docs, "signing keys") == []


def test_llamaindex(nets: tuple[SafetyNet, SafetyNet]):
    nodes = [
        NodeWithScore(node=TextNode(text=POPULAR_TEXT, metadata=metadata(n)), score=1.0)
        for n in range(POPULAR_SOURCES)
    ]
    before, after = (SafetyNetPostprocessor(net=net, principals=[LAST]) for net in nets)
    [kept] = before.postprocess_nodes(nodes, query_str="signing keys")
    assert kept.node.metadata["citations"] == [CITATION]
    nobody = SafetyNetPostprocessor(net=nets[0], principals=["nobody"])
    assert nobody.postprocess_nodes(nodes, query_str="signing keys") == []
    assert after.postprocess_nodes(nodes, query_str="signing keys") == []


def test_haystack(nets: tuple[SafetyNet, SafetyNet]):
    docs = [
        HaystackDocument(content=POPULAR_TEXT, meta=metadata(n), score=1.0) for n in range(POPULAR_SOURCES)
    ]
    before, after = (SafetyNetFilter(net) for net in nets)
    [kept] = before.run(docs, principals=[LAST])["documents"]
    assert kept.meta["citations"] == [CITATION]
    assert before.run(docs, principals=["nobody"])["documents"] == []
    assert after.run(docs, principals=[LAST])["documents"] == []
