"""The wire format of the event contract (design §4): decoding input events, encoding output lines.

This is the only module that turns JSON into domain values. Input is validated strictly: an event that breaks a
rule raises :class:`~streamdedup.errors.InvalidEventError` naming the field, and the drivers dead-letter it.

>>> event = decode_event(b'{"schema": "streamdedup.document/v1", "op": "delete", "source_id": "a", "version": 3}')
>>> type(event).__name__, event.version
('DeleteEvent', 3)
>>> decode_event(b'{"schema": "streamdedup.document/v1", "op": "delete", "source_id": "a", "version": -1}')
Traceback (most recent call last):
...
streamdedup.errors.InvalidEventError: version: must be an integer >= 0
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

import msgspec

from streamdedup.core.messages import Output
from streamdedup.core.model import (
    AclEvent,
    DeleteEvent,
    InputEvent,
    SourceAttrs,
    UpsertEvent,
    format_timestamp,
)
from streamdedup.errors import InvalidEventError

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DOCUMENT_SCHEMA",
    "dead_letter",
    "decode_event",
    "encode_event",
    "encode_output_line",
    "parse_timestamp",
]

DOCUMENT_SCHEMA = "streamdedup.document/v1"
DLQ_SCHEMA = "streamdedup.dlq/v1"
DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024

_FIELDS = {
    "schema", "op", "source_id", "version", "modified_at", "acl", "text", "chunks",
    "content_type", "collection", "authority", "uri", "title", "metadata",
}  # fmt: skip
_CONTENT_TYPES = ("text/plain", "text/markdown", "text/html")
_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def parse_timestamp(value: str) -> int:
    """Return an RFC 3339 timestamp as microseconds since the epoch; raise ValueError if it is not one."""
    match = _RFC3339.match(value)
    if match is None:
        raise ValueError("not an RFC 3339 timestamp with a time zone")
    date, clock, fraction, zone = match.groups()
    fraction = (fraction or ".0")[:7]
    zone = "+00:00" if zone in ("Z", "z") else zone
    moment = datetime.fromisoformat(f"{date}T{clock}{fraction.ljust(7, '0')}{zone}")
    delta = moment.astimezone(timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _string(data: dict[str, Any], name: str, *, required: bool, max_length: int | None = None) -> str | None:
    value = data.get(name)
    if value is None:
        if required:
            raise InvalidEventError("is required", field=name)
        return None
    if not isinstance(value, str):
        raise InvalidEventError(f"must be a string, not {type(value).__name__}", field=name)
    if max_length is not None and not 1 <= len(value) <= max_length:
        raise InvalidEventError(f"must be 1 to {max_length} characters long", field=name)
    return value


def _integer(data: dict[str, Any], name: str, *, default: int | None, minimum: int | None = None) -> int:
    value = data.get(name, default)
    if value is None:
        raise InvalidEventError("is required", field=name)
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise InvalidEventError(f"must be an integer{bound}", field=name)
    return value


def _acl(data: dict[str, Any]) -> tuple[str, ...]:
    value = data.get("acl")
    if value is None:
        raise InvalidEventError("is required for this op", field="acl")
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise InvalidEventError("must be a list of non-empty principal strings", field="acl")
    return tuple(sorted(set(value)))


def _upsert(data: dict[str, Any], source_id: str, version: int) -> UpsertEvent:
    raw_time = _string(data, "modified_at", required=True)
    assert raw_time is not None
    try:
        modified_at = parse_timestamp(raw_time)
    except ValueError as exc:
        raise InvalidEventError(str(exc), field="modified_at") from exc
    text, chunks = data.get("text"), data.get("chunks")
    if (text is None) == (chunks is None):
        raise InvalidEventError("an upsert needs exactly one of 'text' and 'chunks'", field="text")
    if text is not None and not isinstance(text, str):
        raise InvalidEventError(f"must be a string, not {type(text).__name__}", field="text")
    if chunks is not None and (not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks)):
        raise InvalidEventError("must be a list of strings", field="chunks")
    content_type = data.get("content_type", "text/plain")
    if content_type not in _CONTENT_TYPES:
        raise InvalidEventError(f"must be one of {', '.join(_CONTENT_TYPES)}", field="content_type")
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidEventError("must be an object", field="metadata")
    attrs = SourceAttrs(
        acl=_acl(data),
        modified_at=modified_at,
        authority=_integer(data, "authority", default=0),
        uri=_string(data, "uri", required=False),
        title=_string(data, "title", required=False),
        metadata=metadata,
    )
    return UpsertEvent(
        source_id=source_id,
        version=version,
        attrs=attrs,
        text=text,
        chunks=tuple(chunks) if chunks is not None else None,
        content_type=content_type,
        collection=_string(data, "collection", required=False) or "default",
    )


def decode_event(raw: bytes | str, *, max_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> InputEvent:
    """Decode and validate one input event."""
    size = len(raw.encode("utf-8") if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise InvalidEventError(f"event of {size} bytes exceeds the limit of {max_bytes} bytes")
    try:
        data = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise InvalidEventError(f"not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidEventError("an event must be a JSON object")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise InvalidEventError(f"unknown field (allowed: {', '.join(sorted(_FIELDS))})", field=unknown[0])
    if data.get("schema") != DOCUMENT_SCHEMA:
        raise InvalidEventError(f"must be {DOCUMENT_SCHEMA!r}", field="schema")
    source_id = _string(data, "source_id", required=True, max_length=1024)
    assert source_id is not None
    version = _integer(data, "version", default=None, minimum=0)
    op = data.get("op")
    if op == "upsert":
        return _upsert(data, source_id, version)
    if op == "delete":
        return DeleteEvent(source_id=source_id, version=version)
    if op == "acl":
        return AclEvent(source_id=source_id, version=version, acl=_acl(data))
    raise InvalidEventError("must be 'upsert', 'delete' or 'acl'", field="op")


def encode_event(event: InputEvent) -> bytes:
    """Encode a domain input event as contract JSON (the inverse of :func:`decode_event`)."""
    data: dict[str, Any] = {
        "schema": DOCUMENT_SCHEMA,
        "op": "",
        "source_id": event.source_id,
        "version": event.version,
    }
    if isinstance(event, DeleteEvent):
        data["op"] = "delete"
    elif isinstance(event, AclEvent):
        data.update(op="acl", acl=list(event.acl))
    else:
        attrs = event.attrs
        data.update(op="upsert", modified_at=format_timestamp(attrs.modified_at), acl=list(attrs.acl))
        if event.chunks is not None:
            data["chunks"] = list(event.chunks)
        else:
            data["text"] = event.text
        data.update(content_type=event.content_type, collection=event.collection, authority=attrs.authority)
        for name in ("uri", "title", "metadata"):
            if getattr(attrs, name) is not None:
                data[name] = getattr(attrs, name)
    return _encoder.encode(data)


def encode_output_line(output: Output) -> bytes:
    """Encode an output as one JSONL line ``{"topic", "key", "value"}`` with its newline."""
    return _encoder.encode({"topic": output.topic, "key": output.key, "value": output.value}) + b"\n"


def dead_letter(raw: bytes | str, error: InvalidEventError, origin: dict[str, Any]) -> Output:
    """Return the ``dlq`` output for an input that failed validation; ``origin`` says where it was read."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    value = {"schema": DLQ_SCHEMA, "error": str(error), "field": error.field, "origin": origin, "raw": text}
    return Output("dlq", None, value)
