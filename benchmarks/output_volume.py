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
    mapping_rewrites = mapping_rewrite_bytes = 0
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
            elif topic == "source-mappings" and (topic, key) in last:
                mapping_rewrites += 1
                mapping_rewrite_bytes += len(line)
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
        "source_mappings": {"rewrites": mapping_rewrites, "rewrite_bytes": mapping_rewrite_bytes},
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
    chunks["sources_field_bytes"] += len(encode(value.get("sources")))
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
    previous[key] = value


if __name__ == "__main__":
    print(msgspec.json.format(msgspec.json.encode(measure(Path(sys.argv[1]))), indent=2).decode())
