"""What makes the bytes of a ``streamdedup run`` output file: records and bytes by topic, by kind and by field.

    python -m benchmarks.output_volume OUT.jsonl

For each topic: records, keys, bytes (each line with its newline) and the bytes of the last value per key (what a
compacted topic keeps). For ``canonical-chunks``: how many records rewrite a chunk whose value changed only in its
source list (``sources``, ``source_count``, ``revision``) and their bytes, and the bytes of the ``sources`` and
``members`` fields. For ``source-mappings``: rewrites of a source. For ``audit``: records and bytes by action and
reason. The figures say what a change of the event contract could save; nothing here changes it.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

import msgspec

_LISTS_ONLY = ("sources", "source_count", "revision")


def _without(value: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: field for name, field in value.items() if name not in fields}


def measure(path: Path) -> dict[str, Any]:
    """Measure the output file at ``path``."""
    decode, encode = msgspec.json.Decoder().decode, msgspec.json.Encoder().encode
    records: collections.Counter[str] = collections.Counter()
    size: collections.Counter[str] = collections.Counter()
    last: dict[tuple[str, str], int] = {}
    previous: dict[str, dict[str, Any]] = {}
    chunks: collections.Counter[str] = collections.Counter()
    audit_records: collections.Counter[str] = collections.Counter()
    audit_bytes: collections.Counter[str] = collections.Counter()
    mappings: collections.Counter[str] = collections.Counter()
    mapped: dict[str, list[Any]] = {}
    with path.open("rb") as lines:
        for line in lines:
            record = decode(line)
            topic, key, value = record["topic"], str(record["key"]), record["value"]
            records[topic] += 1
            size[topic] += len(line)
            if topic == "canonical-chunks":
                _chunk(chunks, previous, key, value, len(line), encode)
            elif topic == "audit" and value is not None:
                kind = f"{value.get('action')}/{value.get('reason')}"
                audit_records[kind] += 1
                audit_bytes[kind] += len(line)
            elif topic == "source-mappings":
                _mapping(mappings, mapped, key, value, len(line), encode)
            last[topic, key] = len(line)
    compacted: collections.Counter[str] = collections.Counter()
    keys: collections.Counter[str] = collections.Counter()
    for (topic, _), length in last.items():
        compacted[topic] += length
        keys[topic] += 1
    return {
        "bytes": sum(size.values()),
        "topics": {
            topic: {
                "records": records[topic],
                "keys": keys[topic],
                "bytes": size[topic],
                "last_per_key_bytes": compacted[topic],
            }
            for topic in sorted(records)
        },
        "canonical_chunks": dict(chunks),
        "source_mappings": dict(mappings),
        "audit": {
            kind: {"records": audit_records[kind], "bytes": audit_bytes[kind]}
            for kind in sorted(audit_records)
        },
    }


def _chunk(
    chunks: collections.Counter[str],
    previous: dict[str, dict[str, Any]],
    key: str,
    value: dict[str, Any] | None,
    length: int,
    encode: Any,
) -> None:
    """Count one canonical-chunks record: a first write, a rewrite (of the source list only, or more), a tombstone."""
    before = previous.get(key)
    if value is None:
        chunks["tombstones"] += 1
        chunks["tombstone_bytes"] += length
        previous.pop(key, None)
        return
    sources = len(encode(value.get("sources")))
    chunks["sources_field_bytes"] += sources
    # The record as a line without its "sources" member (its name, colon and comma included).
    without_sources = length - sources - len(b',"sources":')
    chunks["bytes_without_sources"] += without_sources
    chunks["members_field_bytes"] += len(encode(value.get("members")))
    if before is None:
        chunks["first_writes"] += 1
        chunks["first_write_bytes"] += length
    elif _without(before, _LISTS_ONLY) == _without(value, _LISTS_ONLY):
        chunks["sources_only_rewrites"] += 1
        chunks["sources_only_rewrite_bytes"] += length
        if before.get("sources") == value.get("sources"):
            chunks["sources_unchanged_rewrites"] += (
                1  # only the count (beyond the capped list) or revision moved
            )
    else:
        changed = "+".join(
            sorted(name for name in value if name not in _LISTS_ONLY and before.get(name) != value[name])
        )
        chunks[f"rewrites changing {changed}"] += 1
        chunks[f"rewrite bytes changing {changed}"] += length
        chunks[f"rewrite bytes without sources changing {changed}"] += without_sources
    previous[key] = value


def _mapping(
    mappings: collections.Counter[str],
    mapped: dict[str, list[Any]],
    key: str,
    value: dict[str, Any] | None,
    length: int,
    encode: Any,
) -> None:
    """Count one source-mappings record: a rewrite's bytes, and the bytes of its positions that are as the
    source's previous record had them; the ``chunk_id`` members that repeat the position's ``content_hash``."""
    before = mapped.pop(key, None)
    if value is None:
        mappings["tombstones"] += 1
        return
    entries = value.get("chunks") or []
    mappings["positions"] += len(entries)
    for entry in entries:
        if entry.get("chunk_id") == entry.get("content_hash"):
            mappings["chunk_ids_equal_to_content_hash"] += 1
            mappings["chunk_id_bytes_equal_to_content_hash"] += len(b'"chunk_id":,') + len(
                encode(entry["chunk_id"])
            )
    if before is not None:
        mappings["rewrites"] += 1
        mappings["rewrite_bytes"] += length
        unchanged = [entry for entry, old in zip(entries, before, strict=False) if entry == old]
        mappings["rewrite_unchanged_positions"] += len(unchanged)
        mappings["rewrite_unchanged_position_bytes"] += sum(len(encode(entry)) + 1 for entry in unchanged)
    mapped[key] = entries


if __name__ == "__main__":
    print(msgspec.json.format(msgspec.json.encode(measure(Path(sys.argv[1]))), indent=2).decode())
