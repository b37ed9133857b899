"""The LanceDB sink: the index as one table in a local LanceDB directory.

The table, ``chunks``, is created on first use with this schema (and a BTree index on ``chunk_id``, which merges
and lookups by id use): ``chunk_id`` (string, not null), ``text``, ``vector`` (fixed-size list of ``dimensions``
float32), ``content_hash``, ``source_ids`` and ``acl`` (lists of strings), ``modified_at``, ``model``, ``current``
(bool: false for a chunk only outdated versions of a document hold) and ``outdated_by`` (the newest version's
source id, null for a current chunk). Its schema
metadata records the layout (``streamdedup.index``). A table of layout 1 (without ``current`` and ``outdated_by``)
is upgraded when opened (:meth:`LanceDBSink._upgrade`); a table of another layout, of vectors of another length, or
whose rows come from another embedding model is refused rather than mixed.

- :meth:`LanceDBSink.upsert` is one ``merge_insert`` on ``chunk_id`` (replace when matched, insert when not);
  :meth:`LanceDBSink.update_metadata` is one ``merge_insert`` of the columns that change (``chunk_id``, ``text``,
  ``source_ids``, ``acl``, ``modified_at``, ``current``, ``outdated_by``) when matched, so the vector column is
  not rewritten;
  :meth:`LanceDBSink.delete` is one ``delete``. Ids are matched with :mod:`lancedb.expr` expressions, which are no
  SQL text and need no escaping. Each is idempotent.
- :meth:`LanceDBSink.search` is a cosine search (flat, exact, unless an ANN index was added to the table) with the
  readers' filter applied first: ``array_has_any(acl, ['*', <principal>, ...])``, each principal a SQL string
  literal with its quotes doubled (the only escape LanceDB's SQL has), so quotes and backslashes stay data; with
  ``current_only``, ``current = true`` is applied first too.
  :meth:`LanceDBSink.search_many` searches many vectors in one LanceDB search, which scans the table once for all
  of them (256 at a time) and gives each vector the rows, scores and order its own search gives.
- Versions: every write makes a table version and a small data fragment. After every ``optimize_every`` writes the
  sink runs LanceDB's ``optimize``: fragments are compacted, the ``chunk_id`` index takes in the new rows, and
  versions older than ``keep_versions`` are removed (a reader in another process that still reads an older one
  has that long). :meth:`LanceDBSink.optimize` does it on demand.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.expr import Expr, col
from lancedb.index import BTree
from lancedb.table import LanceTable

from streamdedup.errors import ConfigurationError, StateError, StateMismatchError, StreamDedupError
from streamdedup.index.sink import Match, Row, Vectors

__all__ = ["FORMAT", "TABLE", "LanceDBSink", "drop_table", "schema"]

logger = logging.getLogger(__name__)

#: The name of the table in the LanceDB directory.
TABLE = "chunks"
#: The layout version of the table, in its schema metadata; a table of layout 1 is upgraded, of another refused.
FORMAT = "2"  # 2: ``current`` and ``outdated_by``
_FORMAT_KEY = b"streamdedup.index"
#: The older layout a table is upgraded from when opened: layout 2 without the columns it added.
_UPGRADABLE = "1"
_ADDED_COLUMNS = ["current", "outdated_by"]
# Rows per batch when an upgrade copies the table.
_UPGRADE_BATCH = 4096
_ROW_COLUMNS = [
    "chunk_id", "text", "content_hash", "source_ids", "acl", "modified_at", "model", "current", "outdated_by"
]  # fmt: skip
_METADATA_COLUMNS = ["chunk_id", "text", "source_ids", "acl", "modified_at", "current", "outdated_by"]
# Ids per expression: a lookup or a deletion of many ids is split rather than sent as one huge IN list.
_IDS_PER_QUERY = 1000
# Query vectors per search of several: one table scan serves them all, and a group bounds the memory it takes.
_QUERIES_PER_SEARCH = 256


def schema(dimensions: int) -> pa.Schema:
    """Return the table's schema for vectors of ``dimensions``."""
    return pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("text", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dimensions)),
            pa.field("content_hash", pa.string()),
            pa.field("source_ids", pa.list_(pa.string())),
            pa.field("acl", pa.list_(pa.string())),
            pa.field("modified_at", pa.string()),
            pa.field("model", pa.string()),
            pa.field("current", pa.bool_()),
            pa.field("outdated_by", pa.string()),
        ],
        metadata={_FORMAT_KEY: FORMAT.encode()},
    )


@contextmanager
def _calling(what: str, directory: Path) -> Iterator[None]:
    try:
        yield
    except StreamDedupError:
        raise
    except Exception as exc:
        raise StateError(f"LanceDB could not {what} in {directory}: {exc}") from exc


def _last_per_id(rows: Sequence[Row]) -> list[int]:
    """Return the indices of the last row of each chunk id, in order: applying rows in order leaves the last."""
    last = {row.chunk_id: n for n, row in enumerate(rows)}
    return sorted(last.values())


def _groups(ids: Iterable[str]) -> Iterator[list[str]]:
    unique = sorted(set(ids))
    for start in range(0, len(unique), _IDS_PER_QUERY):
        yield unique[start : start + _IDS_PER_QUERY]


def _sql_string(value: str) -> str:
    """Return ``value`` as a SQL string literal: quotes doubled; a backslash is no escape in LanceDB's SQL.

    (``lancedb.expr.lit(...).to_sql()`` leaves a doubled quote in the value as it is, which reads back as one.)

    >>> print(_sql_string("o'k"), _sql_string("''"), _sql_string("a\\\\b"))
    'o''k' '''''' 'a\\b'
    """
    return "'" + value.replace("'", "''") + "'"


def _check_principals(principals: Collection[str] | None) -> None:
    if isinstance(principals, str):
        raise ConfigurationError(f"principals is a list of principals, not the string {principals!r}")


def _readable_by(principals: Collection[str]) -> str:
    """Return the filter of rows readable by ``principals``: their ``acl`` holds ``"*"`` or one of them."""
    literals = ", ".join(_sql_string(p) for p in sorted({"*", *principals}))
    return f"array_has_any(acl, [{literals}])"


def _row(values: dict[str, Any]) -> Row:
    return Row(
        chunk_id=str(values["chunk_id"]),
        text=str(values["text"]),
        content_hash=str(values["content_hash"]),
        source_ids=tuple(values["source_ids"] or ()),
        acl=tuple(values["acl"] or ()),
        modified_at=str(values["modified_at"]),
        model=str(values["model"]),
        outdated_by=None if values["outdated_by"] is None else str(values["outdated_by"]),
    )


def drop_table(directory: Path, table: str) -> None:
    """Remove a table of the index directory (one that no longer serves: streamdedup.index.catalog)."""
    with _calling("drop a table", directory):
        lancedb.connect(directory).drop_table(table)


class LanceDBSink:
    """A :class:`~streamdedup.index.sink.Sink` on a table (``chunks`` unless told) of a local LanceDB directory.

    ``model``, when given, must be the model of the rows the table already holds. ``optimize_every`` writes (0:
    never) are followed by :meth:`optimize`, which keeps versions younger than ``keep_versions``.
    """

    def __init__(
        self,
        directory: str | Path,
        dimensions: int,
        *,
        model: str | None = None,
        table: str = TABLE,
        optimize_every: int = 100,
        keep_versions: timedelta = timedelta(minutes=10),
    ) -> None:
        if dimensions < 1:
            raise ConfigurationError(f"an index needs vectors of at least 1 dimension, not {dimensions}")
        if optimize_every < 0:
            raise ConfigurationError(f"optimize_every must be 0 (never) or more, not {optimize_every}")
        if keep_versions <= timedelta(0):
            # LanceDB would remove the version a concurrent reader is reading.
            raise ConfigurationError(f"keep_versions must be longer than zero, not {keep_versions}")
        self.directory = Path(directory)
        self.name = table
        self._dimensions = dimensions
        self._optimize_every = optimize_every
        self._keep_versions = keep_versions
        self._writes = 0
        with _calling("open the index", self.directory):
            self._db = lancedb.connect(self.directory)
            try:
                found = self._db.open_table(table)
            except ValueError:  # no such table yet
                found = self._db.create_table(table, schema=schema(dimensions))  # indexed by _index_ids
                logger.info(
                    "created the index table %s in %s (%d dimensions)", table, self.directory, dimensions
                )
        if not isinstance(found, LanceTable):  # what a local directory always gives
            raise StateError(f"{self.directory} is not a local LanceDB directory")
        self.table: LanceTable = found
        older = self._check_layout()
        stored = self._stored_model()
        self._model = stored or model
        if model is not None and stored is not None and model != stored:
            raise StateMismatchError(
                f"the index in {self.directory} holds vectors of the model {stored!r}, not {model!r}; "
                "index into an empty directory to change models"
            )
        if older:
            self._upgrade()
        self._index_ids()

    def _check_layout(self) -> bool:
        """Refuse a table this sink cannot use; return whether it is of layout 1, which :meth:`_upgrade` upgrades."""
        found = self.table.schema
        layout = (found.metadata or {}).get(_FORMAT_KEY)
        older_names = [name for name in schema(1).names if name not in _ADDED_COLUMNS]
        older = layout == _UPGRADABLE.encode() and found.names == older_names
        if layout != FORMAT.encode() and not older:
            raise StateMismatchError(
                f"the table {self.name!r} in {self.directory} is not a streamdedup index of layout {FORMAT} "
                f"(its layout: {None if layout is None else layout.decode()!r}); index into an empty directory"
            )
        size = found.field("vector").type.list_size
        if size != self._dimensions:
            raise StateMismatchError(
                f"the index in {self.directory} holds vectors of {size} dimensions, not {self._dimensions}; "
                "index into an empty directory to change models"
            )
        return older

    def _upgrade(self) -> None:
        """Upgrade a table of layout 1 to layout 2: every row gets ``current`` true and ``outdated_by`` null.

        That is right for every row: the versions that wrote layout 1 outdated no chunk, and chunks become outdated
        only under lineage rules, which change the engine's parameters, so their outputs are indexed anew anyway.

        LanceDB 0.40 has no call that sets a local table's schema metadata alone (``add_columns`` and
        ``update_field_metadata`` leave it as it is; an append or a ``merge_insert`` keeps the table's own), so the
        layout is written as when the table is created: by rows written under a schema that carries it. The rows
        are read in batches and written back with the two columns in one ``add(mode="overwrite")``, under the
        table's own fields and metadata plus the two columns and layout 2. Vectors are copied, not embedded again;
        the files of layout 1 stay until :meth:`optimize` removes versions older than ``keep_versions``.

        A crash midway is safe to re-run: the overwrite is one commit, so before it the table is still of layout 1
        and the next open upgrades it from the start; after it only the ``chunk_id`` index can be missing (an
        overwrite drops indices), and every open builds that index when it is missing (:meth:`_index_ids`). An ANN
        index someone added to ``vector`` is dropped too (searches stay exact, flat); add it again if wanted. Rows
        that a writer of an older version adds during the upgrade would be lost: stop older writers first.
        """
        found = self.table.schema
        upgraded = pa.schema(
            [*found, *(schema(self._dimensions).field(name) for name in _ADDED_COLUMNS)],
            metadata={**(found.metadata or {}), _FORMAT_KEY: FORMAT.encode()},
        )

        def batches(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
            for batch in reader:
                size = batch.num_rows
                added = [pa.array([True] * size, pa.bool_()), pa.nulls(size, pa.string())]
                yield pa.RecordBatch.from_arrays([*batch.columns, *added], schema=upgraded)

        with _calling("upgrade the index", self.directory):
            rows = self.table.count_rows()
            reader = self.table.search().select(found.names).limit(None).to_batches(batch_size=_UPGRADE_BATCH)
            self.table.add(pa.RecordBatchReader.from_batches(upgraded, batches(reader)), mode="overwrite")
        logger.info(
            "upgraded the index table %s in %s from layout %s to %s: %d rows, each current, outdated by none",
            self.name, self.directory, _UPGRADABLE, FORMAT, rows,
        )  # fmt: skip

    def _index_ids(self) -> None:
        """Build the ``chunk_id`` index when the table lacks it: after an upgrade, or a crash right after creating."""
        with _calling("index chunk ids", self.directory):
            if not any(index.columns == ["chunk_id"] for index in self.table.list_indices()):
                self.table.create_index("chunk_id", config=BTree())

    def _stored_model(self) -> str | None:
        with _calling("read the index", self.directory):
            found = self.table.search().select(["model"]).limit(1).to_arrow()
        return None if found.num_rows == 0 else str(found.column("model")[0].as_py())

    @property
    def dimensions(self) -> int:
        """Return the length of every vector the table holds."""
        return self._dimensions

    @property
    def model(self) -> str | None:
        """Return the embedding model id of the rows held (or the one the sink was opened for), or None."""
        return self._model

    def upsert(self, rows: Sequence[Row], vectors: Vectors) -> None:
        """Insert rows, or replace the rows of the same chunk ids whole (of repeated ids, the last wins)."""
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.shape != (len(rows), self._dimensions):
            raise ConfigurationError(
                f"{len(rows)} rows need vectors of shape ({len(rows)}, {self._dimensions}), not {matrix.shape}"
            )
        if not rows:
            return
        models = sorted({row.model for row in rows})
        if len(models) > 1:
            raise ConfigurationError(f"rows of one model at a time, not of {', '.join(models)}")
        if self._model is not None and models != [self._model]:
            raise StateMismatchError(
                f"the index in {self.directory} holds vectors of the model {self._model!r}; rows of "
                f"{models[0]!r} cannot join them"
            )
        keep = _last_per_id(rows)
        kept = [rows[n] for n in keep]
        data = self._arrow(kept, schema(self._dimensions).names, matrix[keep])
        with _calling("write rows", self.directory):
            self.table.merge_insert(
                "chunk_id"
            ).when_matched_update_all().when_not_matched_insert_all().execute(data)
        self._model = kept[0].model
        self._wrote()

    def update_metadata(self, rows: Sequence[Row]) -> None:
        """Set what is not the vector (``text``, ``source_ids``, ``acl``, ``modified_at``, ``current``,
        ``outdated_by``) of existing rows; vectors stay as they are."""
        if not rows:
            return
        kept = [rows[n] for n in _last_per_id(rows)]
        with _calling("update rows", self.directory):
            self.table.merge_insert("chunk_id").when_matched_update_all().execute(
                self._arrow(kept, _METADATA_COLUMNS)
            )
        self._wrote()

    def delete(self, chunk_ids: Collection[str]) -> None:
        """Delete the rows of ``chunk_ids`` (ids the table does not hold are skipped)."""
        if not chunk_ids:
            return
        with _calling("delete rows", self.directory):
            for group in _groups(chunk_ids):
                self.table.delete(col("chunk_id").isin(group))
        self._wrote()

    def rows(self, chunk_ids: Iterable[str]) -> dict[str, Row]:
        """Return the rows held for ``chunk_ids``, by chunk id (ids the table does not hold are left out)."""
        found: dict[str, Row] = {}
        for group in _groups(chunk_ids):
            for values in self._select(col("chunk_id").isin(group), _ROW_COLUMNS).to_pylist():
                found[str(values["chunk_id"])] = _row(values)
        return found

    def vectors(self, chunk_ids: Iterable[str]) -> dict[str, Vectors]:
        """Return the vectors held for ``chunk_ids``, by chunk id."""
        found: dict[str, Vectors] = {}
        for group in _groups(chunk_ids):
            data = self._select(col("chunk_id").isin(group), ["chunk_id", "vector"])
            matrix = self._matrix(data.column("vector"))
            for n, chunk_id in enumerate(data.column("chunk_id").to_pylist()):
                found[str(chunk_id)] = matrix[n]
        return found

    def chunk_ids(self) -> list[str]:
        """Return the chunk id of every row, sorted."""
        data = self._select(None, ["chunk_id"])
        return sorted(str(chunk_id) for chunk_id in data.column("chunk_id").to_pylist())

    def search(
        self,
        vector: Vectors,
        k: int,
        *,
        principals: Collection[str] | None = None,
        current_only: bool = False,
    ) -> list[Match]:
        """Return the ``k`` rows nearest to ``vector`` by cosine, nearest first; with ``principals``, readable ones.

        A caller holding only ``"*"``, or no principal, reads rows whose ``acl`` holds ``"*"``. With
        ``current_only``, rows whose ``current`` is false are not searched.
        """
        _check_principals(principals)
        if k < 1:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape != (self._dimensions,):
            raise ConfigurationError(
                f"a query vector needs {self._dimensions} dimensions, not {query.shape[0]}"
            )
        with _calling("search", self.directory):
            found = self._nearest(query, k, principals, current_only).to_arrow()
        return [Match(_row(values), 1.0 - float(values["_distance"])) for values in found.to_pylist()]

    def search_many(
        self, vectors: Vectors, k: int, *, principals: Collection[str] | None = None
    ) -> list[list[Match]]:
        """Return what :meth:`search` returns for each row of ``vectors``: one search of many vectors per group.

        LanceDB's search of several vectors shares one scan of the table among them, computes each distance as
        the search of one vector does and returns each vector's rows nearest first, so the matches, their scores
        and their order are those of one search per vector.
        """
        _check_principals(principals)
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self._dimensions:
            raise ConfigurationError(f"query vectors need shape (n, {self._dimensions}), not {queries.shape}")
        if k < 1:
            return [[] for _ in queries]
        found: list[list[Match]] = []
        for start in range(0, len(queries), _QUERIES_PER_SEARCH):
            group = queries[start : start + _QUERIES_PER_SEARCH]
            if len(group) == 1:  # LanceDB searches one vector as one, without a query_index column
                found.append(self.search(group[0], k, principals=principals))
                continue
            with _calling("search", self.directory):
                data = self._nearest(list(group), k, principals).to_arrow()
            matches: list[list[Match]] = [[] for _ in group]
            for values in data.to_pylist():
                matches[int(values["query_index"])].append(
                    Match(_row(values), 1.0 - float(values["_distance"]))
                )
            found += matches
        return found

    def count(self) -> int:
        """Return how many rows the table holds."""
        with _calling("count rows", self.directory):
            return int(self.table.count_rows())

    def optimize(self) -> None:
        """Compact the table's fragments, bring the id index up to date and remove versions past ``keep_versions``."""
        with _calling("optimize the index", self.directory):
            self.table.optimize(cleanup_older_than=self._keep_versions)
        self._writes = 0

    def close(self) -> None:
        """Release the table (LanceDB holds no lock or open file between calls, so this only drops references)."""
        self.table = None  # type: ignore[assignment]
        self._db = None  # type: ignore[assignment]

    def _wrote(self) -> None:
        self._writes += 1
        if self._optimize_every and self._writes >= self._optimize_every:
            self.optimize()

    def _nearest(
        self, query: Any, k: int, principals: Collection[str] | None, current_only: bool = False
    ) -> Any:
        """Return the cosine search of ``query`` (one vector, or a list of them), readers' filter first."""
        search = self.table.search(query, vector_column_name="vector", query_type="vector")
        search = search.distance_type("cosine")
        filters = [] if principals is None else [_readable_by(principals)]
        if current_only:
            filters.append("current = true")
        if filters:
            search = search.where(" AND ".join(f"({f})" for f in filters), prefilter=True)
        return search.select([*_ROW_COLUMNS, "_distance"]).limit(k)

    def _select(self, where: Expr | None, columns: list[str]) -> pa.Table:
        with _calling("read the index", self.directory):
            query = self.table.search()
            if where is not None:
                query = query.where(where)
            return query.select(columns).limit(None).to_arrow()

    def _matrix(self, column: pa.ChunkedArray) -> Vectors:
        values = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
        return np.asarray(values, dtype=np.float32).reshape(-1, self._dimensions)

    def _arrow(self, rows: Sequence[Row], columns: list[str], vectors: Vectors | None = None) -> pa.Table:
        full = schema(self._dimensions)
        data: dict[str, Any] = {
            "chunk_id": [row.chunk_id for row in rows],
            "text": [row.text for row in rows],
            "content_hash": [row.content_hash for row in rows],
            "source_ids": [list(row.source_ids) for row in rows],
            "acl": [list(row.acl) for row in rows],
            "modified_at": [row.modified_at for row in rows],
            "model": [row.model for row in rows],
            "current": [row.current for row in rows],
            "outdated_by": [row.outdated_by for row in rows],
        }
        if vectors is not None:
            flat = pa.array(vectors.reshape(-1), type=pa.float32())
            data["vector"] = pa.FixedSizeListArray.from_arrays(flat, self._dimensions)
        return pa.table(
            {name: data[name] for name in columns}, schema=pa.schema([full.field(name) for name in columns])
        )
