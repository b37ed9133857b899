"""The tables of an index directory, and the one that serves the readers.

An index directory (``lancedb://DIR``) holds one table per *build*: a generation of the deployment's outputs
(docs/generations.md) embedded by one model. The first is ``chunks``; the next ones ``chunks-2``, ``chunks-3``, ...
in the order they were started. ``DIR/streamdedup-catalog.json`` names each table's generation, model and writer
directory, and the table that *serves*: the one readers query (:func:`serving_table`). A new build is written
beside the serving table, and the catalog names it only once it is complete: a reader that resolves the catalog
before each query sees the old table, whole, then the new one, whole, never one half built. The file is replaced
atomically (written beside, then renamed over), so a reader reads the old catalog or the new one.

A directory without a catalog that holds ``chunks`` (an index written before catalogs existed) is read as that one
table, serving, of generation 1.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> catalog = read_catalog(root)
>>> first = catalog.table_for(1, "hash-256")
>>> second = catalog.table_for(2, "hash-256")
>>> (first, second, catalog.table_for(1, "hash-256"))
('chunks', 'chunks-2', 'chunks')
>>> catalog.serve(second), catalog.serve(first)  # a table never serves again after a newer one
(True, False)
>>> write_catalog(root, catalog); serving_table(root)
'chunks-2'
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["CATALOG", "Catalog", "TableEntry", "read_catalog", "serving_table", "updating", "write_catalog"]

#: The catalog's file name in the index directory.
CATALOG = "streamdedup-catalog.json"
_FIRST = "chunks"


@dataclass
class TableEntry:
    """One table of the index: the generation whose outputs it holds, the model of its vectors, its writer's
    directory (relative to the index directory unless absolute)."""

    generation: int
    model: str
    writer: str


@dataclass
class Catalog:
    """The tables of an index directory and the serving one (None: no table is complete yet)."""

    serving: str | None = None
    tables: dict[str, TableEntry] = field(default_factory=dict)

    def table_for(self, generation: int, model: str) -> str:
        """The table of ``generation``'s outputs embedded by ``model``: the existing one, or a new name."""
        for name, entry in self.tables.items():
            if entry.generation == generation and entry.model in (model, ""):
                entry.model = model  # "": an index written before catalogs, whose model its writer checks
                return name
        name = _FIRST if not self.tables else f"{_FIRST}-{max(number(t) for t in self.tables) + 1}"
        self.tables[name] = TableEntry(generation, model, "_writer" if name == _FIRST else f"_writer-{name}")
        return name

    def serve(self, table: str) -> bool:
        """Make ``table`` the serving one if it is newer than the serving one (a table is never replaced by an older
        one, whichever process asks); return whether it serves now."""
        if self.serving is None or number(table) >= number(self.serving):
            self.serving = table
        return self.serving == table


def number(table: str) -> int:
    """The order of a table's build: 1 for ``chunks``, n for ``chunks-n``."""
    return 1 if table == _FIRST else int(table.rsplit("-", 1)[1])


def read_catalog(directory: Path) -> Catalog:
    """The catalog of an index directory (an empty one if none was written; see the module for older indexes)."""
    path = directory / CATALOG
    if not path.exists():
        if (directory / f"{_FIRST}.lance").exists():
            return Catalog(serving=_FIRST, tables={_FIRST: TableEntry(1, "", "_writer")})
        return Catalog()
    data = json.loads(path.read_text(encoding="utf-8"))
    return Catalog(
        serving=data.get("serving"),
        tables={name: TableEntry(**entry) for name, entry in data.get("tables", {}).items()},
    )


def write_catalog(directory: Path, catalog: Catalog) -> None:
    """Replace the catalog atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "serving": catalog.serving,
        "tables": {name: asdict(e) for name, e in sorted(catalog.tables.items())},
    }
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".catalog-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, directory / CATALOG)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@contextmanager
def updating(directory: Path) -> Iterator[Catalog]:
    """Read the catalog, let the caller change it, and write it back, with other writers of the directory (other
    index processes) kept out meanwhile by a lock file."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".catalog.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            catalog = read_catalog(directory)
            yield catalog
            write_catalog(directory, catalog)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def serving_table(directory: str | Path) -> str:
    """The table readers query now (resolve it before each query, or each few: it changes when a build completes).

    ``lancedb.connect(directory).open_table(serving_table(directory))``.
    """
    found = read_catalog(Path(directory)).serving
    return found if found is not None else _FIRST
