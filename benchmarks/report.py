"""Write docs/benchmarks.md (and its plots) from the results in benchmarks/results/."""

from __future__ import annotations

from pathlib import Path

from benchmarks.sections import (
    burst,
    cdc_latency,
    convert_formats,
    copies,
    dense,
    engine,
    failover,
    floor,
    index,
    lineages,
    popularity,
    profile,
    rebuild,
    retrieval,
    signatures,
    state,
    streaming,
)
from benchmarks.sections.figures import DOCS, PLOTS

SECTIONS = [
    ("Signatures", signatures.section),
    ("Where the time goes", profile.section),
    ("Embedded engine", engine.section),
    ("Popularity", popularity.section),
    ("Dense neighbourhoods", dense.section),
    ("Streaming on the broker", streaming.section),
    ("A burst on a running worker", burst.section),
    ("Failover", failover.section),
    ("State", state.section),
    ("Rebuilding from the retained record", rebuild.section),
    ("A feed of copies: `streamdedup run` beside the seeds' loop", copies.section),
    ("Retrieval", retrieval.section),
    ("Index writer", index.section),
    ("Versions of one document: semantic flags and lineages", lineages.section),
    ("Floors", floor.section),
    ("Deletion propagation from a database", cdc_latency.section),
    ("Documents as files are kept (PDF, Office, legacy encodings)", convert_formats.section),
]


def write_report() -> Path:
    """Regenerate docs/benchmarks.md from every result file present."""
    PLOTS.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Benchmarks",
        "",
        "Each figure is a ratio to a baseline measured in the same run, on the same machine. Results come from",
        "`benchmarks/results/*.json`; every benchmark rewrites this page when it finishes. They never run in the",
        "test suite. Run them from a clone after `make setup`, e.g. `.venv/bin/python -m benchmarks.signatures`.",
        "",
    ]
    for title, section in SECTIONS:
        lines += [f"## {title}", ""]
        section(lines)
    path = DOCS / "benchmarks.md"
    path.write_text("\n".join(lines) + "\n")
    return path


if __name__ == "__main__":
    print(write_report())
