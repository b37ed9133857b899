"""Change-data-capture feeds: Debezium change events mapped onto the contract's events (design §7).

A *feed* is a Kafka topic that a Debezium connector writes (one table's changes, or several tables'), with a
mapping from the table's columns to the contract's fields. Feeds are declared in a TOML file that the
``STREAMDEDUP_FEEDS`` setting names (docs/connectors.md)::

    [[feed]]
    name = "documents"                  # what `run --feed` and log lines call it (default: the topic)
    topic = "pg.public.documents"       # the connector's topic
    table = "public.documents"          # optional: records of other tables are dead letters
    source_id = "pg:{table}:{id}"       # template over the row's columns and {db}, {schema}, {table}
    text = "body"                       # column of the document's text
    content_type = "text/markdown"      # fixed, or `content_type_column` (its value wins where not NULL)
    acl = "acl"                         # column: an array of principals, or JSON text of one
    modified_at = "modified_at"         # column (ISO text or epoch microseconds); default: the commit time
    collection = "{space}"              # template; default "default"
    authority = "authority"             # column of integers; default 0
    uri = "https://wiki.example/{id}"   # template
    title = "title"                     # column
    metadata = ["space", "author"]      # columns copied into the source's metadata

How a change event maps (with or without Kafka Connect's ``{"schema", "payload"}`` wrapper):

- ``r`` (snapshot), ``c`` and ``u`` are upserts of the row's ``after`` image. An update whose text column holds
  Debezium's placeholder for an unchanged out-of-line (TOAST) value, or whose ``before`` image (replica identity
  FULL) differs from ``after`` in the ACL column alone, is an ``acl`` event: the text did not change. (Without
  replica identity FULL, what else such an update changed is not applied; an upsert with the placeholder in any
  other mapped column is a dead letter, since an upsert replaces every column.)
- ``d`` is a delete; its ``source_id`` comes from the record's key and the ``before`` image.
- The tombstone after a delete (a null value) maps to nothing: the ``d`` before it carries the delete and its
  position, and a tombstone, which has none, cannot be ordered against the row's other changes. (Read after a
  connector restart that sent a delete again, a tombstone taken as a delete would remove a row inserted again
  since.) A feed topic must therefore keep its ``d`` records: cleanup policy ``delete``, or ``compact`` with a
  ``min.compaction.lag.ms`` above the worker's largest lag.
- **The version comes from the change's log sequence number** (``source.lsn``): a snapshot row's version is the
  snapshot's position, a streamed change's is its own position plus :data:`STREAMED` (2**62). A row's streamed
  changes are in log order, since a writer of a row waits for the one before it to commit; every streamed change
  was committed after the snapshot, so it outranks the snapshot row even when its own position is below the
  snapshot's (a transaction that was open while the snapshot was taken). A connector restarted sends again what it
  had not recorded as sent, with the same positions, which the engine ignores (design §5 I4). A later snapshot
  (a connector reset, an incremental snapshot) fills rows that no streamed change reached and never overrides
  one that did. Positions restart only with another database cluster (a restore, a failover to a replica that was
  behind); such a move needs a new deployment prefix.

Every record the mapping cannot use raises :class:`~streamdedup.errors.InvalidEventError` naming the column and the
reason; the drivers dead-letter it with the connector's key, topic, partition and offset.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from streamdedup.contract.codec import (
    DEFAULT_LIMITS,
    DOCUMENT_SCHEMA,
    EventLimits,
    event_from_data,
    parse_json,
)
from streamdedup.core.model import InputEvent, format_timestamp
from streamdedup.errors import ConfigurationError, InvalidEventError

__all__ = ["STREAMED", "UNAVAILABLE", "FeedDecoder", "FeedMapping", "Feeds", "Template", "load_feeds"]

#: What Debezium's PostgreSQL connector sends for an out-of-line (TOAST) column that an update did not change.
UNAVAILABLE = "__debezium_unavailable_value"
#: Template names that mean the change's source, not a column.
_SOURCE_NAMES = ("db", "schema", "table")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")
_OPS = frozenset("rcud")  # snapshot read, insert (create), update, delete
#: Added to the log position of a streamed change (c, u, d): every streamed change of a row outranks its snapshot
#: row, whatever their positions (module docs).
STREAMED = 1 << 62


class Template:
    """A string with ``{name}`` placeholders filled from a row (``{{`` and ``}}`` are literal braces).

    >>> Template("pg:{table}:{id}").render({"id": 7}, {"table": "documents"})
    'pg:documents:7'
    """

    def __init__(self, text: str, what: str = "template") -> None:
        self.text = text
        self.parts: list[tuple[bool, str]] = []  # (is a name, literal or name)
        at = 0
        for match in _PLACEHOLDER.finditer(text):
            self.parts.append((False, text[at : match.start()]))
            token = match.group(0)
            if token in ("{{", "}}"):
                self.parts.append((False, token[0]))
            elif match.group(1) is None:
                raise ConfigurationError(
                    f"{what}: unmatched {token!r} in template {text!r} (write {token * 2})"
                )
            else:
                self.parts.append((True, match.group(1)))
            at = match.end()
        self.parts.append((False, text[at:]))

    def render(self, row: Mapping[str, Any], source: Mapping[str, Any]) -> str:
        """Fill the template; raise InvalidEventError when a column it names is missing, NULL or not a scalar."""
        out = []
        for is_name, part in self.parts:
            if not is_name:
                out.append(part)
                continue
            value = source.get(part) if part in _SOURCE_NAMES else row.get(part)
            if value is None or value == UNAVAILABLE or isinstance(value, (dict, list)):
                state = "missing or NULL" if value is None or value == UNAVAILABLE else "not a scalar"
                raise InvalidEventError(f"column {part!r} of template {self.text!r} is {state}", field=part)
            out.append(str(value).lower() if isinstance(value, bool) else str(value))
        return "".join(out)


class FeedMapping(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One table's mapping onto the contract (module docs); read from a ``[[feed]]`` table of the feeds file."""

    topic: str
    source_id: str
    text: str
    acl: str
    name: str = ""
    table: str | None = None
    content_type: str = "text/plain"
    content_type_column: str | None = None
    modified_at: str | None = None
    modified_at_unit: Literal["us", "ms", "ns", "days"] = "us"
    collection: str = "default"
    authority: str | None = None
    uri: str | None = None
    title: str | None = None
    metadata: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The feed's name (its topic unless it has one)."""
        return self.name or self.topic


class FeedDecoder:
    """Maps the change events of one topic (or of a named feed, in a file) onto input events."""

    def __init__(self, mappings: Sequence[FeedMapping], limits: EventLimits = DEFAULT_LIMITS) -> None:
        self.mappings = tuple(mappings)
        self.limits = limits
        self._templates = {
            m: (
                Template(m.source_id, "source_id"),
                Template(m.collection, "collection"),
                Template(m.uri, "uri") if m.uri is not None else None,
            )
            for m in self.mappings
        }

    def decode(self, value: bytes | None, key: bytes | None = None) -> InputEvent | None:
        """Return the input event a change event means, or None for a tombstone (module docs).

        Any record the mapping cannot use raises InvalidEventError, whatever its bytes.
        """
        if value is None or value.strip() in (b"", b"null"):
            return None
        try:
            return self._decode(parse_json(value, self.limits), key)
        except InvalidEventError:
            raise
        except Exception as exc:  # the wall, as in decode_event: nothing else escapes
            raise InvalidEventError(f"could not be mapped ({type(exc).__name__}: {exc})") from exc

    def _decode(self, data: Any, key: bytes | None) -> InputEvent | None:
        change = _payload(data)
        if change is None:
            return None  # a tombstone wrapped as {"schema": ..., "payload": null}
        if not isinstance(change, dict) or "op" not in change:
            raise InvalidEventError("not a Debezium change event (no 'op')", field="op")
        source = change.get("source")
        if not isinstance(source, dict):
            raise InvalidEventError("a change event needs its 'source' block", field="source")
        mapping = self._mapping(source)
        op = change["op"]
        if not isinstance(op, str) or op not in _OPS:
            raise InvalidEventError(
                f"operation {op!r} is not mapped (only r, c, u and d are: a truncate is not a row's change)",
                field="op",
            )
        lsn = source.get("lsn")
        if isinstance(lsn, bool) or not isinstance(lsn, int) or not 0 <= lsn < STREAMED:
            raise InvalidEventError(
                "needs the change's log sequence number, the version of a row (a PostgreSQL connector's)",
                field="source.lsn",
            )
        version = lsn if op == "r" else STREAMED + lsn
        source_id_template = self._templates[mapping][0]
        if op == "d":
            # The key's columns win over the before image's, which holds only them under the default identity.
            row = {**_row(change.get("before"), "before", required=False), **_key_row(key, self.limits)}
            source_id = self._source_id(source_id_template, row, source)
            return self._contract({"op": "delete", "source_id": source_id, "version": version}, mapping)
        row = _row(change.get("after"), "after", required=True)
        source_id = self._source_id(source_id_template, row, source)
        before = change.get("before")
        if row.get(mapping.text) == UNAVAILABLE or (
            isinstance(before, dict) and _only_acl_changed(mapping, before, row)
        ):
            acl = self._acl(mapping, row)
            return self._contract(
                {"op": "acl", "source_id": source_id, "version": version, "acl": acl}, mapping
            )
        return self._upsert(mapping, row, source, source_id, version)

    def _mapping(self, source: Mapping[str, Any]) -> FeedMapping:
        table, schema = source.get("table"), source.get("schema")
        names = {f"{schema}.{table}", str(table)} if schema else {str(table)}
        for mapping in self.mappings:
            if mapping.table is None or mapping.table in names:
                return mapping
        raise InvalidEventError(
            f"no feed maps table {'.'.join(str(n) for n in (schema, table) if n)!r} of this topic",
            field="source.table",
        )

    def _source_id(self, template: Template, row: Mapping[str, Any], source: Mapping[str, Any]) -> str:
        try:
            return template.render(row, source)
        except InvalidEventError as exc:
            raise InvalidEventError(f"source_id: {exc}", field=exc.field) from exc

    def _acl(self, mapping: FeedMapping, row: Mapping[str, Any]) -> Any:
        """Return the ACL column's value as the contract's ``acl`` (JSON text parsed), which the event's own
        validation checks; raise for Debezium's placeholder."""
        value = row.get(mapping.acl)
        if isinstance(value, str) and value != UNAVAILABLE:
            try:
                value = parse_json(value, self.limits)
            except InvalidEventError:
                raise InvalidEventError(
                    "must be an array of principals or JSON text of one", field=mapping.acl
                ) from None
        if _unavailable(value):
            raise InvalidEventError(
                "is unchanged out-of-line data, which Debezium does not send: with the text unchanged too there "
                "is nothing to apply (REPLICA IDENTITY FULL on the table makes it send both)",
                field=mapping.acl,
            )
        return value

    def _upsert(
        self,
        mapping: FeedMapping,
        row: Mapping[str, Any],
        source: Mapping[str, Any],
        source_id: str,
        lsn: int,
    ) -> InputEvent:
        _, collection, uri = self._templates[mapping]
        for column in (mapping.title, mapping.modified_at, mapping.authority, mapping.content_type_column,
                       *mapping.metadata):  # fmt: skip
            if column is not None and _unavailable(row.get(column)):
                raise InvalidEventError(
                    "is unchanged out-of-line data, which Debezium does not send, and an upsert replaces every "
                    "mapped column: give the table REPLICA IDENTITY FULL, with which it sends them all",
                    field=column,
                )
        text = row.get(mapping.text)
        if not isinstance(text, str):
            state = "NULL" if text is None else f"a {type(text).__name__}, not text"
            raise InvalidEventError(f"is {state}", field=mapping.text)
        content_type = mapping.content_type
        if mapping.content_type_column is not None and row.get(mapping.content_type_column) is not None:
            content_type = row[mapping.content_type_column]
        event: dict[str, Any] = {
            "op": "upsert",
            "source_id": source_id,
            "version": lsn,
            "modified_at": _modified_at(mapping, row, source),
            "acl": self._acl(mapping, row),
            "text": text,
            "content_type": content_type,
            "collection": collection.render(row, source),
        }
        if mapping.authority is not None and row.get(mapping.authority) is not None:
            event["authority"] = row[mapping.authority]
        if uri is not None:
            event["uri"] = uri.render(row, source)
        if mapping.title is not None and row.get(mapping.title) is not None:
            event["title"] = row[mapping.title]
        if mapping.metadata:
            event["metadata"] = {column: row.get(column) for column in mapping.metadata}
        return self._contract(event, mapping)

    def _contract(self, event: dict[str, Any], mapping: FeedMapping) -> InputEvent:
        """Validate an event as the contract does; an error names the column the field came from."""
        columns = {
            "text": mapping.text,
            "acl": mapping.acl,
            "modified_at": mapping.modified_at,
            "authority": mapping.authority,
            "title": mapping.title,
            "content_type": mapping.content_type_column,
        }
        try:
            return event_from_data({"schema": DOCUMENT_SCHEMA, **event}, self.limits)
        except InvalidEventError as exc:
            column = columns.get(exc.field or "") or exc.field
            message = str(exc).removeprefix(f"{exc.field}: ") if exc.field else str(exc)
            raise InvalidEventError(f"{message} (the contract's {exc.field!r})", field=column) from exc


class Feeds:
    """Every feed of a deployment, by topic."""

    def __init__(self, mappings: Iterable[FeedMapping], limits: EventLimits = DEFAULT_LIMITS) -> None:
        self.mappings = tuple(mappings)
        self.limits = limits
        by_topic: dict[str, list[FeedMapping]] = {}
        for mapping in self.mappings:
            by_topic.setdefault(mapping.topic, []).append(mapping)
        for topic, group in by_topic.items():
            if len(group) > 1 and any(m.table is None for m in group):
                raise ConfigurationError(
                    f"feeds file: topic {topic!r} has {len(group)} feeds, so each needs a 'table' to tell its "
                    "records apart"
                )
        self._decoders = {topic: FeedDecoder(group, limits) for topic, group in by_topic.items()}

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics the feeds read."""
        return tuple(self._decoders)

    def for_topic(self, topic: str) -> FeedDecoder:
        """Return the decoder of a feed topic."""
        return self._decoders[topic]

    def named(self, name: str) -> FeedDecoder:
        """Return a decoder of the feeds with this name or topic (``run --feed NAME``)."""
        chosen = [m for m in self.mappings if name in (m.label, m.topic)]
        if not chosen:
            known = ", ".join(sorted({m.label for m in self.mappings})) or "none"
            raise ConfigurationError(f"no feed is called {name!r} (the feeds file has: {known})")
        return FeedDecoder(chosen, self.limits)


class _FeedsFile(msgspec.Struct, forbid_unknown_fields=True):
    feed: list[FeedMapping] = msgspec.field(default_factory=list)


def load_feeds(path: Path, limits: EventLimits = DEFAULT_LIMITS) -> Feeds:
    """Read a feeds file (module docs); raise ConfigurationError naming what is wrong in it."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the feeds file {path}: {exc.strerror or exc}") from exc
    try:
        parsed = msgspec.toml.decode(raw, type=_FeedsFile)
    except msgspec.ValidationError as exc:
        raise ConfigurationError(f"the feeds file {path}: {exc}") from exc
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"the feeds file {path} is not TOML: {exc}") from exc
    if not parsed.feed:
        raise ConfigurationError(f"the feeds file {path} declares no [[feed]]")
    for mapping in parsed.feed:
        for name, text in (("source_id", mapping.source_id), ("collection", mapping.collection)):
            Template(text, f"{path}: feed {mapping.label!r}: {name}")
        if mapping.uri is not None:
            Template(mapping.uri, f"{path}: feed {mapping.label!r}: uri")
    return Feeds(parsed.feed, limits)


def _payload(data: Any) -> Any:
    """Return a record's change event, unwrapped from Kafka Connect's ``{"schema", "payload"}`` if wrapped."""
    if isinstance(data, dict) and "payload" in data and "schema" in data and len(data) == 2:
        return data["payload"]
    return data


def _row(value: Any, name: str, *, required: bool) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise InvalidEventError("must be the row's columns", field=name)
    return value


def _key_row(key: bytes | None, limits: EventLimits) -> dict[str, Any]:
    """Return the key columns of a record's key (``{"id": ...}``, wrapped or not); {} without a usable key."""
    if not key:
        return {}
    try:
        data = _payload(parse_json(key, limits))
    except InvalidEventError:
        return {}
    return data if isinstance(data, dict) else {}


def _only_acl_changed(mapping: FeedMapping, before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether a full ``before`` image differs from ``after`` in the ACL column and in no other column."""
    if set(before) != set(after) or before.get(mapping.acl) == after.get(mapping.acl):
        return False
    return all(before[column] == after[column] for column in after if column != mapping.acl)


#: Microseconds in one unit of an integer time column (Debezium's MicroTimestamp, Timestamp, NanoTimestamp, Date).
_UNITS = {"us": 1, "ms": 1000, "ns": 0.001, "days": 86_400_000_000}


def _modified_at(mapping: FeedMapping, row: Mapping[str, Any], source: Mapping[str, Any]) -> Any:
    """Return the modification time as the contract writes it: the column's, or the change's source time (the
    commit's for a streamed change, the read's for a snapshot row)."""
    field, scale = mapping.modified_at, _UNITS[mapping.modified_at_unit]
    if field is None:
        field, value, scale = "source.ts_us", source.get("ts_us"), 1
        if not isinstance(value, int) and isinstance(source.get("ts_ms"), int):
            field, value, scale = "source.ts_ms", source["ts_ms"], 1000
    else:
        value = row.get(field)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return format_timestamp(int(value * scale))
        except (OverflowError, ValueError):
            raise InvalidEventError("is out of range as a time since the epoch", field=field) from None
    return value


def _unavailable(value: Any) -> bool:
    """Whether a column holds Debezium's placeholder for an unchanged out-of-line value (in an array: its only
    element, as Debezium sends a text array's)."""
    return value == UNAVAILABLE or (isinstance(value, list) and UNAVAILABLE in value)
