"""The safety net as a Haystack component, after a real BM25 retriever over an in-memory document store."""

from __future__ import annotations

import collections
import os
import subprocess
import sys

import pytest
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from streamdedup.adapters.haystack import SafetyNetFilter
from streamdedup.errors import ConfigurationError
from streamdedup.query.safety_net import MMR, MemoryLookup, SafetyNet
from tests.adapters.conftest import CLI_SETUP, HELP_COPIES, HELP_QUERY, README, Passage


def _store(passages: list[Passage], *extra: Document) -> InMemoryDocumentStore:
    store = InMemoryDocumentStore()
    store.write_documents([Document(content=p.text, meta=p.metadata) for p in passages] + list(extra))
    return store


def _pipeline(store: InMemoryDocumentStore, screen: SafetyNetFilter) -> Pipeline:
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=20))
    pipeline.add_component("safety", screen)
    pipeline.connect("retriever.documents", "safety.documents")
    return pipeline


def _run(pipeline: Pipeline, query: str, principals: list[str] | None = None) -> tuple[list[Document], ...]:
    inputs: dict[str, dict[str, object]] = {"retriever": {"query": query}}
    if principals is not None:
        inputs["safety"] = {"principals": principals}
    result = pipeline.run(inputs, include_outputs_from={"retriever"})
    return result["retriever"]["documents"], result["safety"]["documents"]


def test_copies_collapse_and_every_source_is_cited(view, passages, help_chunk, feed_titles):
    pipeline = _pipeline(_store(passages), SafetyNetFilter(SafetyNet(view)))
    raw, kept = _run(pipeline, HELP_QUERY, principals=["support", "eng"])
    assert collections.Counter(d.meta["chunk_id"] for d in raw)[help_chunk] == 2
    ids = [d.meta["chunk_id"] for d in kept]
    assert ids.count(help_chunk) == 1 and len(ids) == len(set(ids))
    assert ids[0] == help_chunk  # the best BM25 match survives the collapse, first
    [article] = [d for d in kept if d.meta["chunk_id"] == help_chunk]
    assert article.meta["source_ids"] == sorted(HELP_COPIES)
    assert [(c["source_id"], c["uri"], c["title"]) for c in article.meta["citations"]] == [
        (s, *feed_titles[s]) for s in sorted(HELP_COPIES)
    ]
    assert all(c["positions"] == [0] for c in article.meta["citations"])
    assert article.score == max(d.score for d in raw if d.meta["chunk_id"] == help_chunk)


def test_a_restricted_chunk_reaches_only_its_readers(view, passages, help_chunk):
    pipeline = _pipeline(_store(passages), SafetyNetFilter(SafetyNet(view)))
    raw, public = _run(pipeline, HELP_QUERY)  # the component's own principals: public only
    assert help_chunk in {d.meta["chunk_id"] for d in raw}
    assert help_chunk not in {d.meta["chunk_id"] for d in public}
    assert public and all("*" in view.chunk(d.meta["chunk_id"])["acl"] for d in public)
    for principals, sees in ((["*"], False), (["sales"], False), (["contractors"], True), (["eng"], True)):
        _, kept = _run(pipeline, HELP_QUERY, principals=principals)
        assert (help_chunk in {d.meta["chunk_id"] for d in kept}) is sees, principals


def test_a_near_copy_is_served_as_the_canonical_text(view, passages, readme_chunk):
    [wiki] = [p for p in passages if p.source_id == CLI_SETUP]
    [readme] = [p for p in passages if p.source_id == README]
    assert wiki.chunk_id == readme.chunk_id == readme_chunk and wiki.text != readme.text
    pipeline = _pipeline(_store(passages), SafetyNetFilter(SafetyNet(view)))
    raw, kept = _run(pipeline, "execute the login command")  # only the eng wiki page says "execute"
    assert raw[0].meta["source_id"] == CLI_SETUP
    [install] = [d for d in kept if d.meta["chunk_id"] == readme_chunk]
    assert install.content == readme.text == view.chunk(readme_chunk)["text"]
    assert install.id == raw[0].id and install.meta["source_id"] == CLI_SETUP
    # A public caller is cited the public README alone, never the eng page it cannot open; eng sees both.
    assert install.meta["source_ids"] == [README]
    _, for_eng = _run(pipeline, "execute the login command", principals=["eng"])
    [install] = [d for d in for_eng if d.meta["chunk_id"] == readme_chunk]
    assert install.meta["source_ids"] == sorted([README, CLI_SETUP])


def test_a_deleted_chunk_and_a_document_without_chunk_id_are_dropped(view, passages, deleted_chunk):
    stale = Document(content="password reset link expires", meta={"chunk_id": deleted_chunk})
    foreign = Document(content="password reset link from another pipeline", meta={})
    store = _store(passages, stale, foreign)
    raw, kept = _run(_pipeline(store, SafetyNetFilter(SafetyNet(view))), HELP_QUERY, ["eng"])
    assert {stale.id, foreign.id} <= {d.id for d in raw}
    assert not {stale.id, foreign.id} & {d.id for d in kept}
    keeping = SafetyNetFilter(SafetyNet(view, unknown="keep", unidentified="keep"))
    raw, kept = _run(_pipeline(store, keeping), HELP_QUERY, ["eng"])
    passed = {d.id: d for d in kept}
    assert passed[stale.id] == next(d for d in raw if d.id == stale.id)  # unchanged: no citations added
    assert passed[foreign.id] == next(d for d in raw if d.id == foreign.id)


def test_the_metadata_key_is_configurable(view, passages, help_chunk):
    store = InMemoryDocumentStore()
    store.write_documents(
        [Document(content=p.text, meta={"dedup_id": p.chunk_id, "source_id": p.source_id}) for p in passages]
    )
    pipeline = _pipeline(store, SafetyNetFilter(SafetyNet(view), chunk_id_key="dedup_id", principals=["eng"]))
    _, kept = _run(pipeline, HELP_QUERY)
    assert [d.meta["dedup_id"] for d in kept].count(help_chunk) == 1
    assert all(d.meta["source_ids"] for d in kept)
    _, unread = _run(_pipeline(store, SafetyNetFilter(SafetyNet(view), principals=["eng"])), HELP_QUERY)
    assert unread == []  # under the default key no document names a chunk id


def test_mmr_uses_the_documents_embeddings():
    record = {"text": "t", "acl": ["*"], "canonical": {"source_id": "s"}}
    lookup = MemoryLookup({c: dict(record, chunk_id=c) for c in ("a", "b", "c")}, {})
    docs = [
        Document(content="a", meta={"chunk_id": "a"}, score=3.0, embedding=[0.8, 0.6]),
        Document(content="b", meta={"chunk_id": "b"}, score=2.0, embedding=[0.8, 0.6]),
        Document(content="c", meta={"chunk_id": "c"}, score=1.0, embedding=[0.6, -0.8]),
    ]
    screen = SafetyNetFilter(SafetyNet(lookup, mmr=MMR(k=2, lambda_mult=0.5)), canonical_text=False)
    kept = screen.run(docs, query_embedding=[1.0, 0.0])["documents"]
    assert [d.content for d in kept] == ["a", "c"]
    with pytest.raises(ConfigurationError, match="query"):
        screen.run(docs)


def test_importing_the_adapter_imports_no_other_framework():
    code = (
        "import sys, streamdedup.adapters.haystack; "
        "print(sorted(m for m in ('langchain_core', 'llama_index') if m in sys.modules))"
    )
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.strip() == "[]"
