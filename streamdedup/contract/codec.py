"""The wire format of the event contract (design §4): decoding input events, encoding output lines.

This is the only module that turns JSON into domain values. Input is validated strictly: an event that breaks a
rule raises :class:`~streamdedup.errors.InvalidEventError` naming the field, and the drivers dead-letter it. The
codec is a wall: nothing else ever escapes :func:`decode_event`, whatever the bytes. Nesting depth is checked before
the (recursive) JSON parser sees the bytes; integers must fit the state's 64-bit fields; :class:`EventLimits` bounds
sizes and counts; any other failure while decoding becomes an ``InvalidEventError`` too.

>>> event = decode_event(b'{"schema": "streamdedup.document/v1", "op": "delete", "source_id": "a", "version": 3}')
>>> type(event).__name__, event.version
('DeleteEvent', 3)
>>> decode_event(b'{"schema": "streamdedup.document/v1", "op": "delete", "source_id": "a", "version": -1}')
Traceback (most recent call last):
...
streamdedup.errors.InvalidEventError: version: must be an integer >= 0 that fits in 64 bits
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from streamdedup.convert.office import OFFICE_TYPES
from streamdedup.core.messages import Output
from streamdedup.core.model import (
    DECISION_KINDS,
    LINE_DECISIONS,
    PAIR_DECISIONS,
    AclEvent,
    DecisionEvent,
    DeleteEvent,
    InputEvent,
    SourceAttrs,
    UpsertEvent,
    decision_route,
    format_timestamp,
    parse_timestamp,
)
from streamdedup.core.normalize import normalize
from streamdedup.core.records import DECISION_SCHEMA, decision_value
from streamdedup.errors import InvalidEventError

__all__ = [
    "DECISION_SCHEMA",
    "DEFAULT_LIMITS",
    "DOCUMENT_SCHEMA",
    "INT_MAX",
    "INT_MIN",
    "EventLimits",
    "dead_letter",
    "decode_event",
    "encode_event",
    "encode_for_dead_letter",
    "encode_output_line",
    "encode_output_lines",
    "encode_output_value",
    "event_from_data",
    "event_key",
    "parse_json",
    "parse_timestamp",
]

DOCUMENT_SCHEMA = "streamdedup.document/v1"
DLQ_SCHEMA = "streamdedup.dlq/v1"
#: The range of every integer the state stores (MessagePack's signed 64-bit integers).
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
_SOURCE_ID_CHARS = 1024  # the contract's bound (design §4), not a setting


@dataclass(frozen=True, slots=True)
class EventLimits:
    """Bounds on one input event; an event beyond any of them is dead-lettered, naming the bound.

    ``Settings`` exposes each as ``STREAMDEDUP_MAX_EVENT_<NAME>`` (see docs/settings.md); these are the defaults.
    """

    #: Bytes of one event as it arrives (a file's bytes, for the folder feed).
    bytes: int = 8 * 1024 * 1024
    #: Nesting depth of the JSON (the event object is depth 1, ``chunks`` and ``acl`` depth 2).
    depth: int = 32
    #: Entries in ``chunks``.
    chunks: int = 10_000
    #: Characters in one entry of ``chunks``.
    chunk_chars: int = 100_000
    #: Principals in ``acl``.
    acl: int = 1_000
    #: Characters in one principal.
    principal_chars: int = 256
    #: Characters in ``uri``, ``title`` and ``collection``.
    string_chars: int = 4_096


DEFAULT_LIMITS = EventLimits()

_FIELDS = {
    "schema", "op", "source_id", "version", "modified_at", "acl", "text", "chunks", "data",
    "content_type", "collection", "authority", "uri", "title", "metadata", "lineage", "lineage_version",
}  # fmt: skip
_DECISION_FIELDS = {
    "schema", "decision", "version", "by", "at", "note", "reason", "pair", "source_id", "collection", "line",
}  # fmt: skip
_FLAG_REASONS = ("fact_conflict", "acl_boundary", "semantic")
_CONTENT_HASH = re.compile(r"[0-9a-f]{64}", re.ASCII)
_CONTENT_TYPES = ("text/plain", "text/markdown", "text/html")
# A JSON string (escapes included) or a bracket: what the depth check must tell apart.
# The closing quote is optional, so that an unterminated string is consumed once rather than rescanned from every
# escape inside it (which takes quadratic time).
_STRUCTURE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_OPENERS = frozenset(b"[{")
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def _string(data: dict[str, Any], name: str, *, required: bool, max_length: int | None = None) -> str | None:
    value = data.get(name)
    if value is None:
        if required:
            raise InvalidEventError("is required", field=name)
        return None
    if not isinstance(value, str):
        raise InvalidEventError(f"must be a string, not {type(value).__name__}", field=name)
    if max_length is not None and len(value) > max_length:
        raise InvalidEventError(f"must be at most {max_length} characters long", field=name)
    return value


def _no_control_characters(value: str, name: str) -> str:
    """Refuse C0 control characters in a value that becomes part of a state key or a routing key."""
    if _CONTROL.search(value):
        raise InvalidEventError("must not contain control characters (U+0000 to U+001F, U+007F)", field=name)
    return value


def _integer(
    data: dict[str, Any], name: str, *, default: int | None, minimum: int = INT_MIN, maximum: int = INT_MAX
) -> int:
    value = data.get(name, default)
    if value is None:
        raise InvalidEventError("is required", field=name)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        bound = f" >= {minimum}" if minimum != INT_MIN else ""
        raise InvalidEventError(f"must be an integer{bound} that fits in 64 bits", field=name)
    return value


def _acl(data: dict[str, Any], limits: EventLimits) -> tuple[str, ...]:
    value = data.get("acl")
    if value is None:
        raise InvalidEventError("is required for this op", field="acl")
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise InvalidEventError("must be a list of non-empty principal strings", field="acl")
    if len(value) > limits.acl:
        raise InvalidEventError(f"must hold at most {limits.acl} principals, not {len(value)}", field="acl")
    if any(len(p) > limits.principal_chars for p in value):
        raise InvalidEventError(
            f"principals must be at most {limits.principal_chars} characters", field="acl"
        )
    return tuple(sorted(set(value)))


def _chunks(value: Any, limits: EventLimits) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise InvalidEventError("must be a list of strings", field="chunks")
    if len(value) > limits.chunks:
        raise InvalidEventError(f"must hold at most {limits.chunks} chunks, not {len(value)}", field="chunks")
    longest = max(map(len, value), default=0)
    if longest > limits.chunk_chars:
        raise InvalidEventError(
            f"a chunk of {longest} characters exceeds the limit of {limits.chunk_chars}", field="chunks"
        )
    return tuple(value)


def _metadata(value: Any, limits: EventLimits) -> dict[str, Any] | None:
    """Check an arbitrary JSON object without recursion: its depth and that every integer fits the state."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidEventError("must be an object", field="metadata")
    stack: list[tuple[Any, int]] = [(value, 2)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, bool) or item is None or isinstance(item, (str, float)):
            continue
        if isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                raise InvalidEventError("integers must fit in 64 bits", field="metadata")
            continue
        if depth > limits.depth:
            raise InvalidEventError(f"nested deeper than {limits.depth} levels", field="metadata")
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                raise InvalidEventError("keys must be strings", field="metadata")
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        else:
            raise InvalidEventError(f"holds a {type(item).__name__}, which is not JSON", field="metadata")
    return value


def _data(value: Any) -> bytes:
    """A document's bytes, from the base64 text (RFC 4648, standard alphabet, padded) an upsert carries."""
    if not isinstance(value, str):
        raise InvalidEventError(f"must be base64 text, not {type(value).__name__}", field="data")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidEventError(f"not base64 ({exc})", field="data") from exc


def _upsert(data: dict[str, Any], source_id: str, version: int, limits: EventLimits) -> UpsertEvent:
    raw_time = _string(data, "modified_at", required=True)
    assert raw_time is not None
    try:
        modified_at = parse_timestamp(raw_time)
    except ValueError as exc:
        raise InvalidEventError(str(exc), field="modified_at") from exc
    text, chunks, raw = data.get("text"), data.get("chunks"), data.get("data")
    if sum(value is not None for value in (text, chunks, raw)) != 1:
        raise InvalidEventError("an upsert needs exactly one of 'text', 'chunks' and 'data'", field="text")
    if text is not None and not isinstance(text, str):
        raise InvalidEventError(f"must be a string, not {type(text).__name__}", field="text")
    content_type = data.get("content_type", "text/plain")
    allowed = _CONTENT_TYPES + OFFICE_TYPES if raw is not None else _CONTENT_TYPES
    if content_type not in allowed:
        raise InvalidEventError(f"must be one of {', '.join(allowed)}", field="content_type")
    parts = _chunks(chunks, limits) if chunks is not None else None
    attrs = SourceAttrs(
        acl=_acl(data, limits),
        modified_at=modified_at,
        authority=_integer(data, "authority", default=0),
        uri=_string(data, "uri", required=False, max_length=limits.string_chars),
        title=_string(data, "title", required=False, max_length=limits.string_chars),
        metadata=_metadata(data.get("metadata"), limits),
    )
    lineage = _string(data, "lineage", required=False, max_length=limits.string_chars)
    lineage_version = _string(data, "lineage_version", required=False, max_length=limits.string_chars)
    if lineage is not None and not _no_control_characters(lineage, "lineage"):
        raise InvalidEventError("must not be empty", field="lineage")
    if lineage is None and lineage_version is not None:
        raise InvalidEventError("is only meaningful with 'lineage'", field="lineage_version")
    return UpsertEvent(
        source_id=source_id,
        version=version,
        attrs=attrs,
        text=text,
        chunks=parts,
        data=_data(raw) if raw is not None else None,
        content_type=content_type,
        collection=_no_control_characters(
            _string(data, "collection", required=False, max_length=limits.string_chars) or "default",
            "collection",
        ),
        lineage=lineage,
        lineage_version=lineage_version,
    )


def _decision(data: dict[str, Any], limits: EventLimits) -> DecisionEvent:
    """Validate a reviewer's decision (``streamdedup.decision/v1``)."""
    unknown = sorted(set(data) - _DECISION_FIELDS)
    if unknown:
        raise InvalidEventError(
            f"unknown field (allowed: {', '.join(sorted(_DECISION_FIELDS))})", field=unknown[0]
        )
    kind = data.get("decision")
    if kind not in DECISION_KINDS:
        raise InvalidEventError(f"must be one of {', '.join(DECISION_KINDS)}", field="decision")
    version = _integer(data, "version", default=None, minimum=0)
    by = _string(data, "by", required=True, max_length=limits.string_chars)
    if not by:
        raise InvalidEventError("must name who decided", field="by")
    at = None
    raw_at = _string(data, "at", required=False)
    if raw_at is not None:
        try:
            at = parse_timestamp(raw_at)
        except ValueError as exc:
            raise InvalidEventError(str(exc), field="at") from exc
    note = _string(data, "note", required=False, max_length=limits.string_chars)
    reason = _string(data, "reason", required=False)
    if reason is not None and reason not in _FLAG_REASONS:
        raise InvalidEventError(f"must be one of {', '.join(_FLAG_REASONS)}", field="reason")
    common: dict[str, Any] = {"version": version, "kind": kind, "by": by, "at": at, "note": note}
    subjects: list[str] = [name for name in ("pair", "source_id", "line", "collection") if name in data]
    if kind in PAIR_DECISIONS:
        return _pair_decision(data, kind, reason, subjects, common)
    if reason is not None:
        raise InvalidEventError("only a pair decision answers a flag", field="reason")
    if kind in LINE_DECISIONS:
        return _line_decision(data, kind, subjects, common, limits)
    return _source_decision(data, kind, subjects, common)


def _pair_decision(
    data: dict[str, Any], kind: str, reason: str | None, subjects: list[str], common: dict[str, Any]
) -> DecisionEvent:
    """Validate the subject of a decision about a pair of texts (``keep_separate``, ``merge``, ``reopen``)."""
    if subjects != ["pair"]:
        raise InvalidEventError(f"a {kind} decision names a 'pair' (and no other subject)", field="pair")
    pair = data["pair"]
    if (
        not isinstance(pair, list)
        or len(pair) != 2
        or not all(isinstance(h, str) and _CONTENT_HASH.fullmatch(h) for h in pair)
        or pair[0] == pair[1]
    ):
        raise InvalidEventError("must be two different content hashes (64 lowercase hex)", field="pair")
    if kind == "merge" and reason == "acl_boundary":
        raise InvalidEventError(
            "a merge across an acl_boundary is never made: a reader would be served text it cannot read",
            field="decision",
        )
    low, high = sorted(pair)
    return DecisionEvent(
        source_id=decision_route(pair=(low, high)), pair=(low, high), reason=reason, **common
    )


def _line_decision(
    data: dict[str, Any], kind: str, subjects: list[str], common: dict[str, Any], limits: EventLimits
) -> DecisionEvent:
    """Validate the subject of a decision about a line of a collection (``boilerplate_*``)."""
    if subjects != ["line", "collection"]:
        raise InvalidEventError(f"a {kind} decision names a 'collection' and a 'line'", field="line")
    collection = _no_control_characters(
        _string(data, "collection", required=True, max_length=limits.string_chars) or "", "collection"
    )
    line = _string(data, "line", required=True, max_length=limits.string_chars) or ""
    normalized = normalize(line)
    if not normalized or "\n" in line:
        raise InvalidEventError("must be one line of text", field="line")
    return DecisionEvent(
        source_id=decision_route(collection=collection, line=normalized),
        collection=collection,
        line=normalized,
        **common,
    )


def _source_decision(
    data: dict[str, Any], kind: str, subjects: list[str], common: dict[str, Any]
) -> DecisionEvent:
    """Validate the subject of a decision about a source (``prefer``, ``unprefer``)."""
    if subjects != ["source_id"]:
        raise InvalidEventError(
            f"a {kind} decision names a 'source_id' (and no other subject)", field="source_id"
        )
    source_id = _string(data, "source_id", required=True) or ""
    if not source_id or len(source_id) > _SOURCE_ID_CHARS:
        raise InvalidEventError(f"must be 1 to {_SOURCE_ID_CHARS} characters long", field="source_id")
    _no_control_characters(source_id, "source_id")
    return DecisionEvent(source_id=source_id, subject_source=source_id, **common)


def _check_depth(raw: bytes, limit: int) -> None:
    """Refuse JSON nested deeper than ``limit`` before a recursive parser sees it."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return  # cannot be deeper than its number of openers
    depth = 0
    for match in _STRUCTURE.finditer(raw):
        first = raw[match.start()]
        if first in _OPENERS:
            depth += 1
            if depth > limit:
                raise InvalidEventError(f"JSON nested deeper than {limit} levels")
        elif first != 0x22:  # a closing bracket; strings are skipped whole
            depth -= 1


def parse_json(raw: bytes | str, limits: EventLimits = DEFAULT_LIMITS) -> Any:
    """Parse JSON from outside within ``limits`` (size, depth); raise only :class:`InvalidEventError`."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > limits.bytes:
        raise InvalidEventError(f"event of {len(data)} bytes exceeds the limit of {limits.bytes} bytes")
    _check_depth(data, limits.depth)
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidEventError(f"not valid JSON: {exc}") from exc


def event_from_data(data: Any, limits: EventLimits = DEFAULT_LIMITS) -> InputEvent:
    """Validate parsed contract JSON (or a connector's dict of the same shape) as an input event."""
    if not isinstance(data, dict):
        raise InvalidEventError("an event must be a JSON object")
    if data.get("schema") == DECISION_SCHEMA:
        return _decision(data, limits)
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise InvalidEventError(f"unknown field (allowed: {', '.join(sorted(_FIELDS))})", field=unknown[0])
    if data.get("schema") != DOCUMENT_SCHEMA:
        raise InvalidEventError(f"must be {DOCUMENT_SCHEMA!r}", field="schema")
    source_id = _string(data, "source_id", required=True)
    if not source_id or len(source_id) > _SOURCE_ID_CHARS:
        raise InvalidEventError(f"must be 1 to {_SOURCE_ID_CHARS} characters long", field="source_id")
    _no_control_characters(source_id, "source_id")
    version = _integer(data, "version", default=None, minimum=0)
    op = data.get("op")
    if op == "upsert":
        return _upsert(data, source_id, version, limits)
    if op == "delete":
        return DeleteEvent(source_id=source_id, version=version)
    if op == "acl":
        return AclEvent(source_id=source_id, version=version, acl=_acl(data, limits))
    raise InvalidEventError("must be 'upsert', 'delete' or 'acl'", field="op")


def decode_event(raw: bytes | str, limits: EventLimits = DEFAULT_LIMITS) -> InputEvent:
    """Decode and validate one input event; any failure, whatever its cause, is an :class:`InvalidEventError`."""
    try:
        return event_from_data(parse_json(raw, limits), limits)
    except InvalidEventError:
        raise
    except Exception as exc:  # the wall: no input line may raise anything else past the codec
        raise InvalidEventError(f"could not be decoded ({type(exc).__name__}: {exc})") from exc


def encode_event(event: InputEvent) -> bytes:
    """Encode a domain input event as contract JSON (the inverse of :func:`decode_event`)."""
    if isinstance(event, DecisionEvent):
        return _encoder.encode(decision_value(event))
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
        elif event.data is not None:
            data["data"] = base64.b64encode(event.data).decode("ascii")
        else:
            data["text"] = event.text
        data.update(content_type=event.content_type, collection=event.collection, authority=attrs.authority)
        named = {n: getattr(attrs, n) for n in ("uri", "title", "metadata")} | {
            n: getattr(event, n) for n in ("lineage", "lineage_version")
        }
        data.update((name, value) for name, value in named.items() if value is not None)
    return _encoder.encode(data)


def event_key(event: InputEvent) -> str:
    """Return the Kafka key of an input event: its source_id (a preference's too), or a decision's subject."""
    if isinstance(event, DecisionEvent) and event.subject_source is None:
        return event.subject
    return event.source_id


def encode_for_dead_letter(event: InputEvent) -> bytes:
    """Return an event that failed in a handler as contract JSON for its dead letter; this never raises."""
    try:
        return encode_event(event)
    except Exception as exc:
        return f"unencodable event of {event.source_id!r}: {exc!r}".encode("utf-8", "replace")


def encode_output_value(output: Output) -> bytes | None:
    """Encode an output's value as a Kafka record value: JSON, or None for a tombstone."""
    return None if output.value is None else _encoder.encode(output.value)


def encode_output_line(output: Output) -> bytes:
    """Encode an output as one JSONL line ``{"topic", "key", "value"}`` with its newline."""
    return _encoder.encode({"topic": output.topic, "key": output.key, "value": output.value}) + b"\n"


def encode_output_lines(outputs: Sequence[Output]) -> bytes:
    """Encode outputs as :func:`encode_output_line` does each, in one call (an output's fields, in their order)."""
    return _encoder.encode_lines(outputs)


def dead_letter(raw: bytes | str, error: Exception, origin: dict[str, Any]) -> Output:
    """Return the ``dlq`` output for an input that failed; ``origin`` says where it was read.

    ``error`` is the :class:`InvalidEventError` of an input that failed validation, or whatever a handler raised
    on an event that passed it (then the error names its type).
    """
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if isinstance(error, InvalidEventError):
        message, field = str(error), error.field
    else:
        message, field = f"processing failed ({type(error).__name__}: {error})", None
    value = {"schema": DLQ_SCHEMA, "error": message, "field": field, "origin": origin, "raw": text}
    return Output("dlq", None, value)
