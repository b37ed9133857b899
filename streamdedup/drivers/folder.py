"""A folder as a live feed: every text file is a source, kept in step with the folder (design §6).

- source_id: the file's path relative to the folder, with ``/`` separators;
- content type: from the extension (``.md``/``.markdown`` Markdown, ``.html``/``.htm`` HTML, ``.txt``, ``.text`` and
  ``.rst`` plain text; ``.pdf``, ``.docx``, ``.pptx`` and ``.xlsx`` converted to text with the ``office`` extra;
  other files are not sources). A text file's encoding is detected (:mod:`streamdedup.convert.text`);
- text: the file's bytes go into the upsert's ``data`` and are converted as any such upsert is
  (:mod:`streamdedup.convert`); a file that cannot be is a dead letter naming the file and the reason, and is
  tried again on the next sync when the reason is the machine's (``ConversionError.transient``), else when the
  file changes;
- version: the file's modification time in nanoseconds (raised past the last one seen if the clock went back);
- ACL: from a sidecar ``<file>.acl.json`` (a list of principals, or ``{"acl": [...], "authority": n}``), else the
  default ACL from the settings.

:meth:`FolderFeed.sync` compares the folder with what the state last saw of it (kept in the store's metadata,
committed with the state) and returns upserts for new and changed files and deletes for files that are gone.
With ``--watch`` the runner calls it again after every change watchfiles reports.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from streamdedup.contract.codec import (
    DEFAULT_LIMITS,
    DOCUMENT_SCHEMA,
    EventLimits,
    dead_letter,
    event_from_data,
    parse_json,
)
from streamdedup.convert import ConversionError
from streamdedup.convert.events import converted_in_order
from streamdedup.convert.office import EXTENSIONS
from streamdedup.convert.pool import Converter
from streamdedup.core.messages import Output
from streamdedup.core.model import DeleteEvent, InputEvent, UpsertEvent, format_timestamp
from streamdedup.drivers.embedded import Origin
from streamdedup.drivers.feeds import FeedItem
from streamdedup.errors import InvalidEventError

__all__ = ["CONTENT_TYPES", "SIDECAR_SUFFIX", "FolderFeed"]

CONTENT_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".rst": "text/plain",
    **EXTENSIONS,
}
SIDECAR_SUFFIX = ".acl.json"
#: ``(source_id, version or None if deleted, event or dead letter)``
Item = tuple[str, int | None, InputEvent | Output]


@dataclass
class FolderFeed:
    """Turns the state of a folder into input events."""

    root: Path
    collection: str
    default_acl: tuple[str, ...] = ("*",)
    limits: EventLimits = DEFAULT_LIMITS
    converter: Converter = field(default_factory=Converter)
    known: dict[str, int] = field(default_factory=dict)  # source_id -> last version sent
    # Files whose conversion failed for a reason of this machine's (ConversionError.transient): not marked seen.
    _retry: set[str] = field(default_factory=set)
    # The folder's own path with its links resolved, once a sync (:meth:`_uri`).
    _resolved_root: Path | None = field(default=None, init=False, repr=False)

    @property
    def meta_key(self) -> str:
        """Where the store keeps what this feed last saw of its folder."""
        return f"folder:{self.root.resolve()}"

    def load(self, raw: bytes | None) -> None:
        """Restore what the state last saw of the folder."""
        self.known = json.loads(raw) if raw else {}

    def dump(self) -> bytes:
        """Serialize what the feed has seen, for the store's metadata."""
        return json.dumps(self.known, sort_keys=True).encode()

    def _files(self) -> dict[str, Path]:
        files = {}
        for path in sorted(self.root.rglob("*")):
            if not path.is_file() or path.name.endswith(SIDECAR_SUFFIX):
                continue
            relative = path.relative_to(self.root)
            if any(part.startswith(".") for part in relative.parts):
                continue
            if path.suffix.lower() in CONTENT_TYPES:
                files[relative.as_posix()] = path
        return files

    def _version(self, path: Path) -> tuple[int, os.stat_result, bool]:
        """Return the file's version, its status and whether it has a sidecar (one status call for each)."""
        status = path.stat()
        try:
            sidecar = os.stat(f"{path}{SIDECAR_SUFFIX}")
        except OSError:
            return status.st_mtime_ns, status, False
        return max(status.st_mtime_ns, sidecar.st_mtime_ns), status, True

    def _uri(self, path: Path, source_id: str) -> str:
        """Return the file's absolute ``file:`` URI, symbolic links resolved.

        ``rglob`` does not descend into linked folders, so only the folder itself and the file can be links: the
        folder is resolved once, and a file only where it is a link.
        """
        if path.is_symlink():
            return path.resolve().as_uri()
        if self._resolved_root is None:
            self._resolved_root = self.root.resolve()
        return (self._resolved_root / source_id).as_uri()

    def _sidecar(self, path: Path, present: bool) -> tuple[list[str], int]:
        acl, authority = list(self.default_acl), 0
        sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
        if present:
            data: Any = parse_json(sidecar.read_bytes(), self.limits)
            if isinstance(data, dict):
                authority = data.get("authority", 0)
                data = data.get("acl", acl)
            if not isinstance(data, list):
                raise InvalidEventError("must be a list of principals", field=sidecar.name)
            acl = data
        return acl, authority

    def _upsert(
        self, source_id: str, path: Path, version: int, status: os.stat_result, sidecar: bool
    ) -> InputEvent | Output:
        """Build the file's upsert as a contract event, checked by the same codec rules as any other input;
        ``status`` is the file's, taken for its version, and ``sidecar`` whether it had one then."""
        try:
            size = status.st_size
            if size > self.limits.bytes:
                raise InvalidEventError(
                    f"file of {size} bytes exceeds the limit of {self.limits.bytes} bytes"
                )
            content = path.read_bytes()
            acl, authority = self._sidecar(path, sidecar)
            data = {
                "schema": DOCUMENT_SCHEMA,
                "op": "upsert",
                "source_id": source_id,
                "version": version,
                "modified_at": format_timestamp(status.st_mtime_ns // 1000),
                "acl": acl,
                "authority": authority,
                # The codec checks an upsert's fields as any input's; the file's bytes go into the event after,
                # as they are, rather than into base64 text and back (39 MB of it for the five Django releases).
                "data": "",
                "content_type": CONTENT_TYPES[path.suffix.lower()],
                "collection": self.collection,
                "uri": self._uri(path, source_id),
            }
            event = event_from_data(data, self.limits)
            return msgspec.structs.replace(event, data=content) if isinstance(event, UpsertEvent) else event
        except (InvalidEventError, OSError) as exc:
            error = exc if isinstance(exc, InvalidEventError) else InvalidEventError(str(exc))
            return dead_letter(b"", error, {"file": str(path), "source_id": source_id})

    def _converted(self, items: list[Item]) -> Iterator[Item]:
        """The items with each file's bytes converted to text, in order (dead letters naming the file)."""

        def replace(item: Item, result: UpsertEvent | ConversionError) -> Item:
            source_id, version, _ = item
            if isinstance(result, ConversionError):
                if result.transient:  # not the file's fault: the next sync tries it again
                    self._retry.add(source_id)
                where = {"file": str(self.root / source_id), "source_id": source_id}
                return source_id, version, dead_letter(b"", result, where)
            return source_id, version, result

        return converted_in_order(items, lambda item: item[2], replace, self.converter, self.limits.bytes)

    def sync(self) -> list[Item]:
        """Return ``(source_id, version or None if deleted, event or dead letter)`` that bring the state in step;
        a file's upsert holds its bytes, which :meth:`open` converts.

        Nothing is marked as seen here: :meth:`seen` does that for each batch the runner commits, so a crash
        between batches sends the rest again.
        """
        items: list[Item] = []
        self._resolved_root = None
        files = self._files()
        for source_id, path in files.items():
            try:
                version, status, sidecar = self._version(path)
            except OSError:
                continue  # removed while scanning: the next sync deletes it
            last = self.known.get(source_id)
            if last is not None and version == last:
                continue
            if last is not None and version < last:
                version = last + 1  # the file went back in time; it is still a newer version
            items.append((source_id, version, self._upsert(source_id, path, version, status, sidecar)))
        for source_id in sorted(set(self.known) - set(files)):
            version = max(self.known[source_id] + 1, time.time_ns())
            items.append((source_id, None, DeleteEvent(source_id=source_id, version=version)))
        return items

    def seen(self, items: list[Item]) -> None:
        """Record that these items were processed."""
        for source_id, version, _ in items:
            if source_id in self._retry:
                self._retry.discard(source_id)
                continue
            if version is None:
                self.known.pop(source_id, None)
            else:
                self.known[source_id] = version

    def open(self) -> tuple[int, Iterator[FeedItem]]:
        """Return how many files changed since the last sync, and an item for each (progress in files)."""
        items = self.sync()
        return len(items), (
            FeedItem(
                item, Origin(None, {"file": str(self.root / source_id)}), done, (source_id, version, item)
            )
            for done, (source_id, version, item) in enumerate(self._converted(items), start=1)
        )

    def consumed(self, items: Sequence[FeedItem]) -> dict[str, bytes]:
        """Mark the files of a batch as seen; return the folder's state to commit with it."""
        self.seen([item.key for item in items])
        return {self.meta_key: self.dump()}
