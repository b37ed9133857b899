"""Debezium change events as the PostgreSQL connector writes them, for tests and benchmarks of feeds.

The shapes are those of Debezium 3.6 with Kafka Connect's JSON converter: an envelope ``{"before", "after",
"source", "op", "ts_ms"}``, optionally wrapped as ``{"schema": ..., "payload": envelope}``; a key ``{"id": ...}``.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["change", "key", "record_value"]

_SCHEMA_STUB = {"type": "struct", "optional": False, "name": "test.Envelope", "version": 2, "fields": []}


def change(
    op: str,
    *,
    lsn: int,
    after: dict[str, Any] | None = None,
    before: dict[str, Any] | None = None,
    table: str = "documents",
    schema: str = "public",
    ts_ms: int = 1_780_000_000_000,
) -> dict[str, Any]:
    """Return the envelope of one change (``op`` r, c, u or d) at log position ``lsn``."""
    return {
        "before": before,
        "after": after,
        "source": {
            "version": "3.6.1.Final",
            "connector": "postgresql",
            "name": "pg",
            "ts_ms": ts_ms,
            "snapshot": "true" if op == "r" else "false",
            "db": "streamdedup",
            "sequence": f'[null,"{lsn}"]',
            "ts_us": ts_ms * 1000,
            "ts_ns": ts_ms * 1_000_000,
            "schema": schema,
            "table": table,
            "txId": 1000 + lsn % 997,
            "lsn": lsn,
            "xmin": None,
        },
        "transaction": None,
        "op": op,
        "ts_ms": ts_ms + 5,
    }


def record_value(envelope: dict[str, Any] | None, *, wrapped: bool = False) -> bytes | None:
    """Return a record's value bytes: the envelope as JSON, wrapped in a schema block if asked; None: a tombstone."""
    if envelope is None:
        return None
    return msgspec.json.encode({"schema": _SCHEMA_STUB, "payload": envelope} if wrapped else envelope)


def key(row_id: Any, *, wrapped: bool = False) -> bytes:
    """Return a record's key bytes for the row with primary key ``id``."""
    payload = {"id": row_id}
    stub = {"type": "struct", "optional": False, "name": "test.Key", "fields": []}
    return msgspec.json.encode({"schema": stub, "payload": payload} if wrapped else payload)
