"""Which chunks are outdated: only older versions of a document hold them (docs/lineages.md).

The engine marks such a chunk's ``canonical-chunks`` record with ``"current": false`` and ``"outdated_by"``, the
source id of the newest version of the document; a current chunk's record has neither key. The safety net and
the adapters drop outdated chunks with ``current_only``, on by default: only a source in a lineage (a rule of
``STREAMDEDUP_LINEAGE_RULES``, or the ``lineage`` its upsert names) can make a chunk outdated, so where no lineage
is in use the default drops nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["outdated_by"]


def outdated_by(record: Mapping[str, Any] | None) -> str | None:
    """Return the ``outdated_by`` of a chunk record that says ``"current": false``, else None (absent: current).

    >>> outdated_by({"current": False, "outdated_by": "5.0/intro.txt"}), outdated_by({"chunk_id": "c1"})
    ('5.0/intro.txt', None)
    """
    if record is None or record.get("current", True) is not False:
        return None
    return str(record.get("outdated_by") or "")
