"""What every section of the page uses: the saved results, the machine line, the plots and the targets' verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

RESULTS = Path(__file__).resolve().parents[1] / "results"
DOCS = Path(__file__).resolve().parents[2] / "docs"
PLOTS = DOCS / "benchmarks"


def load_result(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def bar_chart(path: Path, labels: list[str], values: list[float], title: str, xlabel: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(labels) + 1.2))
    ax.barh(labels, values, color="#4c72b0")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.invert_yaxis()
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > 100:
        ax.set_xscale("log")  # ratios far below 1 would otherwise be bars too short to see
        ax.set_xlabel(f"{xlabel}, log scale")
    ax.margins(x=0.12)  # room for the value labels
    for i, v in enumerate(values):
        text = f" {v:,.0f}" if v >= 100 else f" {v:.2g}" if v < 0.1 else f" {v:,.2f}"
        ax.text(v, i, text, va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def line_chart(path: Path, xs: list[float], series: dict[str, list[float]], title: str, xlabel: str) -> None:
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


def check(ok: bool) -> str:
    return "met" if ok else "**missed**"


def machine_of(result: dict[str, Any]) -> str:
    m = result["machine"]
    return (
        f"{m['cpu']}, {m['cores']} cores, {m['memory']}, Python {m['python']}, {m['system']}; run {m['date']}"
        + (f" at commit {m['commit']}" if m.get("commit") else "")
    )


def goal_line(name: str, value: float, target: float, fmt: str = ".2f", note: str = "") -> str:
    """Return a line saying whether ``value`` reaches ``target`` (at least), and by what factor it misses."""
    ok = value >= target
    miss = "" if ok else f" (short by a factor of {target / value:,.2f})" if value > 0 else ""
    return f"- Target: {name} at least {target:{fmt}}: {value:{fmt}}, {check(ok)}{miss}{note}."
