"""``streamdedup inspect``: what the embedded state holds for one source or one chunk."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table

from streamdedup.core.engine import Engine
from streamdedup.core.model import format_timestamp, union_readers
from streamdedup.core.stages.collection import line_key
from streamdedup.core.stages.source_mappings import current_mapping
from streamdedup.core.state import CollectionRecord, ContentRecord, LineRecord, SourceRecord, source_texts
from streamdedup.errors import StateError
from streamdedup.settings import Settings
from streamdedup.store.base import check_params
from streamdedup.store.rocksdb import RocksDBStore, refuse_shards

__all__ = [
    "boilerplate_command",
    "describe_boilerplate",
    "describe_chunk",
    "describe_source",
    "inspect_command",
]

_PARTITION = 0  # the embedded runner keeps every stage in partition 0


@contextmanager
def _existing_state(settings: Settings, state: Path) -> Iterator[RocksDBStore]:
    """Open a state directory written by ``run``, refusing one built under other parameters."""
    if not (state / "db").exists():
        raise StateError(f"no state at {state}; run 'streamdedup run' with --state {state} first")
    refuse_shards(state, "inspect")
    store = RocksDBStore(state)
    try:
        check_params(store, Engine(settings.engine_params()).params, where=str(state))
        yield store
    finally:
        store.close()


def inspect_command(
    settings: Settings, state: Path, source: str | None, chunk: str | None, as_json: bool
) -> None:
    """Print the source or chunk as tables, or as JSON."""
    with _existing_state(settings, state) as store:
        data = describe_source(store, source) if source is not None else describe_chunk(store, chunk or "")
    console = Console()
    if as_json:
        console.print_json(json.dumps(data))
        return
    _render(console, data)


def describe_source(store: RocksDBStore, source_id: str) -> dict[str, Any]:
    """Return the state of one source as plain data."""
    raw = store.get("source", _PARTITION, source_id)
    if raw is None:
        raise StateError(f"no source {source_id!r} in the state")
    record = msgspec.msgpack.decode(raw, type=SourceRecord)
    if record.deleted:
        return {"source_id": source_id, "version": record.version, "deleted": True}
    attrs = record.attrs
    texts = source_texts(lambda key: store.get("content", _PARTITION, key), source_id, record.chunks)
    return {
        "source_id": source_id,
        "version": record.version,
        "deleted": False,
        "acl": list(attrs.acl) if attrs else [],
        "modified_at": format_timestamp(attrs.modified_at) if attrs else None,
        "authority": attrs.authority if attrs else None,
        "collection": record.collection,
        "chunks": [
            {
                "position": e.position,
                "content_hash": e.content_hash,
                "chunk_id": e.chunk_id,
                "relation": e.relation,
                "jaccard": e.jaccard,
                "text": texts[e.position][0],
            }
            for e in current_mapping(source_id, record) or []
        ],
    }


def describe_chunk(store: RocksDBStore, chunk_id: str) -> dict[str, Any]:
    """Return the cluster a chunk id (or any member's content hash) belongs to, as plain data."""
    record = _content(store, chunk_id)
    if record.role == "member":
        return {**describe_chunk(store, record.target), "asked": chunk_id}
    if record.role != "canonical":
        raise StateError(f"content {chunk_id[:16]}… is {record.role}, not a chunk")
    members = [
        {
            "content_hash": chunk_id,
            "relation": "canonical",
            "jaccard": 1.0,
            "readers": list(record.readers()),
            "sources": [{"source_id": t.source_id, "position": t.position} for t in record.top],
            "source_count": record.positions,
        }
    ]
    for member_hash, report in sorted(record.members.items()):
        members.append(
            {
                "content_hash": member_hash,
                "relation": "near",
                "jaccard": report.jaccard,
                "readers": list(
                    record.neighbors[member_hash].info.readers
                    if member_hash in record.neighbors
                    else union_readers([r.attrs.acl for r in report.refs])
                ),
                "sources": [{"source_id": r.source_id, "position": r.position} for r in report.refs],
                "source_count": report.count,
            }
        )
    canonical = record.canonical_ref or ("", 0)
    text = (
        next((t.text for t in record.top if (t.source_id, t.position) == tuple(canonical)), "") or record.text
    )
    return {
        "chunk_id": chunk_id,
        "canonical": {"source_id": canonical[0], "position": canonical[1]},
        "acl": members[0]["readers"],
        "text": text,
        "members": members,
        "revision": record.revision,
    }


def _content(store: RocksDBStore, content_hash: str) -> ContentRecord:
    raw = store.get("content", _PARTITION, content_hash)
    if raw is None:
        raise StateError(f"no chunk or content {content_hash!r} in the state")
    return msgspec.msgpack.decode(raw, type=ContentRecord)


def _render(console: Console, data: dict[str, Any]) -> None:
    if "source_id" in data:
        console.print(f"[bold]source[/bold] {data['source_id']}  version {data['version']}")
        if data["deleted"]:
            console.print("deleted (a version tombstone keeps older events from bringing it back)")
            return
        console.print(
            f"acl {', '.join(data['acl'])}  modified {data['modified_at']}  authority {data['authority']}"
        )
        table = Table(header_style="bold")
        for column in ("pos", "relation", "jaccard", "chunk_id", "text"):
            table.add_column(column)
        for c in data["chunks"]:
            table.add_row(
                str(c["position"]),
                c["relation"],
                f"{c['jaccard']:.3f}",
                c["chunk_id"][:16],
                _short(c["text"]),
            )
        console.print(table)
        return
    if "asked" in data:
        console.print(f"{data['asked'][:16]}… is a near member of chunk {data['chunk_id'][:16]}…")
    console.print(f"[bold]chunk[/bold] {data['chunk_id']}  revision {data['revision']}")
    console.print(
        f"canonical {data['canonical']['source_id']}#{data['canonical']['position']}  acl {', '.join(data['acl'])}"
    )
    console.print(_short(data["text"], 400))
    table = Table(header_style="bold")
    for column in ("content_hash", "relation", "jaccard", "readers", "sources"):
        table.add_column(column)
    for m in data["members"]:
        sources = ", ".join(f"{s['source_id']}#{s['position']}" for s in m["sources"])
        table.add_row(
            m["content_hash"][:16], m["relation"], f"{m['jaccard']:.3f}", ", ".join(m["readers"]), sources
        )
    console.print(table)


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def boilerplate_command(settings: Settings, state: Path, collection: str | None, as_json: bool) -> None:
    """Print each collection's learned boilerplate lines with the number of documents containing them."""
    with _existing_state(settings, state) as store:
        data = describe_boilerplate(store, collection)
    console = Console()
    if as_json:
        console.print_json(json.dumps(data))
        return
    if not data:
        console.print(
            "no collection has reported lines yet" if collection is None else f"no collection {collection!r}"
        )
        return
    params = settings.engine_params()
    for name, info in data.items():
        table = Table(
            title=f"{name}: {info['documents']} documents, {len(info['lines'])} boilerplate lines "
            f"(threshold {params.boilerplate_fraction:.0%} of documents once there are {params.boilerplate_min_docs})",
            header_style="bold",
        )
        table.add_column("documents", justify="right")
        table.add_column("line")
        for line in info["lines"]:
            table.add_row(str(line["documents"]), line["text"])
        console.print(table)


def describe_boilerplate(store: RocksDBStore, collection: str | None) -> dict[str, Any]:
    """Return the boilerplate of one collection, or of all, as plain data."""
    out: dict[str, Any] = {}
    for partition, key in store.keys("collection"):
        if not key.startswith("c\x00"):
            continue
        name = key[2:]
        if collection is not None and name != collection:
            continue
        record = msgspec.msgpack.decode(store.get("collection", partition, key) or b"", type=CollectionRecord)
        counted: list[tuple[int, str]] = []
        for hashed, text in record.boilerplate.items():
            raw = store.get("collection", partition, line_key(name, hashed))
            counted.append((msgspec.msgpack.decode(raw, type=LineRecord).count if raw else 0, text))
        counted.sort(key=lambda line: (-line[0], line[1]))
        lines = [{"text": text, "documents": count} for count, text in counted]
        out[name] = {"documents": record.docs, "lines": lines}
    return out
