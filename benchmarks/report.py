"""Write docs/benchmarks.md (and its plots) from the results in benchmarks/results/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DOCS = Path(__file__).resolve().parents[1] / "docs"
PLOTS = DOCS / "benchmarks"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _bar(path: Path, labels: list[str], values: list[float], title: str, xlabel: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(labels) + 1.2))
    ax.barh(labels, values, color="#4c72b0")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.invert_yaxis()
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:,.2f}" if v < 100 else f" {v:,.0f}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _line(path: Path, xs: list[float], series: dict[str, list[float]], title: str, xlabel: str) -> None:
    fig, axes = plt.subplots(len(series), 1, figsize=(7, 2.4 * len(series)), sharex=True)
    axes = axes if len(series) > 1 else [axes]
    for ax, (name, ys) in zip(axes, series.items(), strict=True):
        ax.plot(xs, ys, marker="o", markersize=3)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].set_title(title)
    axes[-1].set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _check(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _machine(result: dict[str, Any]) -> str:
    m = result["machine"]
    return (
        f"{m['cpu']}, {m['cores']} cores, {m['memory']}, Python {m['python']}, {m['system']}; run {m['date']}"
    )


def _signatures(lines: list[str]) -> None:
    result = _load("signatures")
    if result is None:
        lines.append("_Not run yet: `python -m benchmarks.signatures`._\n")
        return
    lines += [
        f"Machine: {_machine(result)}. Command: `{result['command']}`.\n",
        "128 permutations, word 5-gram shingles, full path from normalized text to signature, same chunks for",
        "every method.\n",
    ]
    verdicts = []
    for index, (corpus, data) in enumerate(result["corpora"].items()):
        rates, ratio, to_rensa = (
            data["chunks_per_second"],
            data["ratio_to_datasketch_bulk"],
            data["ratio_to_rensa"],
        )
        plot = f"signatures-{index}.png"
        _bar(PLOTS / plot, list(ratio), list(ratio.values()), f"{corpus}: throughput / datasketch bulk",
             "ratio to datasketch MinHash.bulk (same run)")  # fmt: skip
        lines += [
            f"**{corpus}** ({data['chunks']:,} chunks, mean {data['mean_words']:.0f} words)\n",
            "| method | chunks/s | ratio to datasketch bulk | ratio to rensa |",
            "|---|---:|---:|---:|",
            *(f"| {n} | {rates[n]:,.0f} | {ratio[n]:.2f} | {to_rensa[n]:.2f} |" for n in rates),
            "",
            f"![{corpus}](benchmarks/{plot})\n",
        ]
        verdicts += [
            f"- {corpus}: {ratio['streamdedup']:.1f}x datasketch bulk (target 5x, {_check(ratio['streamdedup'] >= 5)});"
            f" {to_rensa['streamdedup']:.2f}x rensa (target 1x, {_check(to_rensa['streamdedup'] >= 1)}).",
        ]
    acc = result["accuracy"]
    ours, theirs = acc["mae"]["streamdedup"], acc["mae"]["datasketch MinHash (SHA-1)"]
    lines += [
        f"Accuracy on {acc['pairs']:,} pairs (overlapping chunks of Django 4.2 and 5.2 with exact Jaccard from 0.2 "
        "to 1, found by an exact-shingle index, and 500 random pairs; mean "
        f"exact Jaccard {acc['mean exact jaccard']:.3f}): mean absolute error of the estimate against the exact "
        "shingle-set Jaccard, same pairs for every method.\n",
        "| method | MAE |",
        "|---|---:|",
        *(f"| {name} | {mae:.4f} |" for name, mae in acc["mae"].items()),
        "",
        *verdicts,
        f"- Accuracy at least datasketch's: MAE {ours:.4f} vs {theirs:.4f}, {_check(ours <= theirs * 1.02)} "
        "(within 2%, the sampling noise at this many pairs).",
        "",
    ]


SECTIONS = [("Signatures", _signatures)]


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
