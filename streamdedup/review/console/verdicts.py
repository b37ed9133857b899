"""The calibration sample's verdicts, kept in a JSON file so that a reload or a restart keeps them.

The file holds one entry per judged pair, keyed like a review flag (``"<hash_a>:<hash_b>"``, lower hash first),
with what the statistics need (the pair's Jaccard and whether its facts differ), who judged it and when. It is
rewritten whole through a temporary file and a rename, so a crash leaves the old file or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from streamdedup.errors import StateError
from streamdedup.review.console.stats import Verdict

__all__ = ["VERDICTS_SCHEMA", "VERDICT_KINDS", "VerdictFile"]

VERDICTS_SCHEMA = "streamdedup.review-verdicts/v1"
#: A verdict says whether merging the pair is right.
VERDICT_KINDS = ("correct", "incorrect")


class VerdictFile:
    """The verdicts of one reviewer's calibration sample, in a JSON file at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def load(self) -> dict[str, dict[str, Any]]:
        """Return every verdict by pair key (none when the file does not exist yet)."""
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StateError(f"cannot read the verdicts in {self.path}: {exc}") from exc
        if not isinstance(data, dict) or data.get("schema") != VERDICTS_SCHEMA:
            raise StateError(f"{self.path} is not a verdicts file ({VERDICTS_SCHEMA})")
        verdicts = data.get("verdicts")
        return (
            {str(k): v for k, v in verdicts.items() if isinstance(v, dict)}
            if isinstance(verdicts, dict)
            else {}
        )

    def verdicts(self) -> list[Verdict]:
        """Return the verdicts as the statistics take them."""
        return [
            Verdict(float(v["jaccard"]), v["verdict"] == "correct", bool(v.get("fact_conflict", False)))
            for v in self.load().values()
            if v.get("verdict") in VERDICT_KINDS and isinstance(v.get("jaccard"), (int, float))
        ]

    def record(
        self, key: str, verdict: str | None, *, jaccard: float, fact_conflict: bool, by: str
    ) -> dict[str, dict[str, Any]]:
        """Record ``verdict`` on the pair ``key`` (None removes it) and return every verdict."""
        if verdict is not None and verdict not in VERDICT_KINDS:
            raise ValueError(f"a verdict is one of {', '.join(VERDICT_KINDS)}, not {verdict!r}")
        with self._lock:
            verdicts = self.load()
            if verdict is None:
                verdicts.pop(key, None)
            else:
                verdicts[key] = {
                    "verdict": verdict,
                    "jaccard": jaccard,
                    "fact_conflict": fact_conflict,
                    "by": by,
                    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            self._write(verdicts)
        return verdicts

    def _write(self, verdicts: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"schema": VERDICTS_SCHEMA, "verdicts": verdicts}, indent=2, sort_keys=True) + "\n"
        handle, temporary = tempfile.mkstemp(prefix=".verdicts-", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(body)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
