"""LlamaIndex: the safety net as a node postprocessor.

Use it as a query engine's ``node_postprocessors`` entry or call ``postprocess_nodes`` on a retriever's nodes.
A postprocessor is given nothing per call but the query, so the principals are the postprocessor's own:
:meth:`SafetyNetPostprocessor.for_principals` returns a copy for another caller. With MMR, the query bundle's
embedding and the nodes' embeddings are used; a node without one makes the call fail rather than skip MMR.

The ``citations`` and ``source_ids`` added to a node's metadata are left out of the text the node shows an LLM or
an embedding model, so a prompt does not grow with a popular passage's sources. ``current_only`` (None: as the
net does) drops the chunks only outdated versions of a document hold; a kept outdated chunk's metadata says
``"current": False`` and names ``outdated_by``, which the LLM is shown (the embedding model is not).

>>> from llama_index.core.schema import NodeWithScore, TextNode
>>> from streamdedup.query.safety_net import MemoryLookup, SafetyNet
>>> lookup = MemoryLookup({"c1": {"text": "Reset it.", "acl": ["eng"], "canonical": {"source_id": "a"}}}, {})
>>> nodes = [NodeWithScore(node=TextNode(text="Reset it!", metadata={"chunk_id": "c1"}), score=s) for s in (1, 2)]
>>> kept = SafetyNetPostprocessor(net=SafetyNet(lookup), principals=["eng"]).postprocess_nodes(nodes)
>>> [(n.node.get_content(), n.score) for n in kept]
[('Reset it.', 2.0)]
"""

from __future__ import annotations

from collections.abc import Iterable

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from pydantic import ConfigDict, Field, InstanceOf

from streamdedup.query.safety_net import Hit, Kept, SafetyNet, chunk_id_in

__all__ = ["SafetyNetPostprocessor"]

_ADDED_KEYS = ("citations", "source_ids")
_OUTDATED_KEYS = ("current", "outdated_by")


class SafetyNetPostprocessor(BaseNodePostprocessor):
    """A node postprocessor that collapses copies, drops what the principals may not read, and cites sources."""

    # The framework sets its own fields (a callback manager) on a postprocessor; the screening ones stay fixed.
    model_config = ConfigDict(arbitrary_types_allowed=True)

    net: InstanceOf[SafetyNet] = Field(frozen=True)
    principals: tuple[str, ...] = Field(default=("*",), frozen=True)
    chunk_id_key: str = Field(default="chunk_id", frozen=True)
    canonical_text: bool = Field(default=True, frozen=True)
    current_only: bool | None = Field(default=None, frozen=True)

    @classmethod
    def class_name(cls) -> str:
        """Return the name LlamaIndex serializes the postprocessor under."""
        return "StreamDedupSafetyNetPostprocessor"

    def for_principals(self, principals: Iterable[str]) -> SafetyNetPostprocessor:
        """Return a copy that screens for ``principals``."""
        return self.model_copy(update={"principals": tuple(principals)})

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        hits = [
            Hit(
                scored,
                chunk_id_in(scored.node.metadata, self.chunk_id_key),
                scored.score,
                scored.node.embedding,
            )
            for scored in nodes
        ]
        query_embedding = None if query_bundle is None else query_bundle.embedding
        kept = self.net.apply(
            hits, self.principals, query_embedding=query_embedding, current_only=self.current_only
        )
        return [self._node(hit) for hit in kept]

    def _node(self, hit: Kept[NodeWithScore]) -> NodeWithScore:
        added = hit.metadata()
        if not added:
            return hit.item
        node = hit.item.node.model_copy()
        node.metadata = {**node.metadata, **added}
        node.excluded_llm_metadata_keys = list(
            dict.fromkeys([*node.excluded_llm_metadata_keys, *_ADDED_KEYS])
        )
        node.excluded_embed_metadata_keys = list(
            dict.fromkeys([*node.excluded_embed_metadata_keys, *_ADDED_KEYS, *_OUTDATED_KEYS])
        )
        if self.canonical_text and hit.text is not None:
            node.set_content(hit.text)
        return NodeWithScore(node=node, score=hit.item.score)
