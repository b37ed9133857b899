"""What ``streamdedup calibrate`` draws and writes for a calibration: its plots and its HTML page.

The plots need matplotlib, an optional dependency (the ``calibrate`` extra), imported only when they are drawn. The
page is self-contained (texts escaped, the plots linked) and is made from the calibration's figures, the same
values as its JSON.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamdedup.query.calibration import LOWEST_THRESHOLD, RULE, Calibration, jaccard_histogram

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["JSON_FILE", "PAGE_FILE", "PLOTS", "page", "write_plots"]

#: The figures as JSON, and the page, written to ``--out``.
JSON_FILE = "calibration.json"
PAGE_FILE = "index.html"
#: The plots written to ``--out``, by name.
PLOTS = {"jaccard": "jaccard.png", "thresholds": "thresholds.png", "reduction": "reduction.png"}


def _figure() -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - optional, see the module
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def write_plots(result: Calibration, out: Path) -> None:
    """Draw the Jaccard histogram, the merges and flags, and the reduction, each against the threshold."""
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 - optional, see the module

    current, suggested = result.params.threshold, result.suggestion.threshold

    def lines(axes: Any) -> None:
        axes.axvline(current, color="0.2", linestyle="--", label=f"current threshold {current:.2f}")
        if abs(suggested - current) > 1e-9:
            axes.axvline(
                suggested, color="tab:green", linestyle=":", linewidth=2, label=f"suggested {suggested:.2f}"
            )

    same = jaccard_histogram([p for p in result.pairs if not p.fact_conflict])
    different = jaccard_histogram([p for p in result.pairs if p.fact_conflict])
    width = 1 / len(same)
    lefts = [i * width for i in range(len(same))]
    figure = _figure()
    axes = figure.add_subplot()
    axes.axvspan(
        0, LOWEST_THRESHOLD, color="0.92", label=f"below {LOWEST_THRESHOLD}: partial (LSH recall drops)"
    )
    axes.bar(lefts, same, width=width, align="edge", color="tab:blue", label="same facts")
    axes.bar(
        lefts, different, width=width, align="edge", bottom=same, color="tab:orange", label="fact conflict"
    )
    lines(axes)
    axes.set(
        xlim=(0, 1), xlabel="verified Jaccard", ylabel="candidate pairs", title="Jaccard of candidate pairs"
    )
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend(loc="upper right")
    figure.savefig(out / PLOTS["jaccard"])

    rows = result.rows
    xs = [r.threshold for r in rows]
    figure = _figure()
    axes = figure.add_subplot()
    axes.plot(xs, [r.merged for r in rows], marker="o", color="tab:blue", label="merged texts (near copies)")
    axes.plot(
        xs, [r.near_pairs for r in rows], marker=".", linestyle="--", color="tab:cyan", label="near pairs"
    )
    axes.plot(
        xs, [r.fact_conflict for r in rows], marker="s", color="tab:orange", label="fact_conflict flags"
    )
    axes.plot(xs, [r.acl_boundary for r in rows], marker="^", color="tab:red", label="acl_boundary flags")
    lines(axes)
    axes.set(xlabel="threshold", ylabel="count", title="Merges and flags against the threshold")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend()
    figure.savefig(out / PLOTS["thresholds"])

    figure = _figure()
    axes = figure.add_subplot()
    axes.plot(xs, [100 * r.reduction for r in rows], marker="o", color="tab:purple", label="reduction")
    lines(axes)
    axes.set(xlabel="threshold", ylabel="% of positions", title="Reduction: 1 - chunks / positions")
    axes.legend()
    figure.savefig(out / PLOTS["reduction"])


_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222 }
table { border-collapse: collapse; margin: 1em 0 }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: right; vertical-align: top }
tr.current td { background: #fdecea } tr.suggested td { background: #e8f5e9 }
.suggestion { border-left: 4px solid #2e7d32; background: #f1f8e9; padding: .6em 1em }
.pair td { text-align: left; width: 50%; white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 13px }
del { background: #ffcdd2; text-decoration: none } ins { background: #c8e6c9; text-decoration: none }
img { max-width: 100%; border: 1px solid #eee } .muted { color: #666 } code { background: #f4f4f4 }
"""


def page(figures: dict[str, Any]) -> str:
    """Return the self-contained HTML page of a calibration's figures (texts escaped; the plots linked)."""
    e = html.escape
    corpus, suggestion, params = figures["corpus"], figures["suggestion"], figures["parameters"]
    current = figures["threshold"]
    candidate = params["candidate_banding"]
    rows = []
    for row in figures["thresholds"]:
        marks = []
        if abs(row["threshold"] - current) < 1e-9:
            marks.append("current")
        if abs(row["threshold"] - suggestion["threshold"]) < 1e-9:
            marks.append("suggested")
        cells = [f"{row['threshold']:.2f} {' '.join(marks)}"] + [
            f"{row[name]:,}"
            for name in (
                "pairs",
                "near_pairs",
                "fact_conflict_pairs",
                "acl_boundary_pairs",
                "merged",
                "fact_conflict",
                "acl_boundary",
                "chunks",
                "exact",
                "near",
            )
        ]
        cells.append(f"{row['reduction']:.2%}")
        rows.append(f"<tr class='{' '.join(marks)}'>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    plots = "".join(
        f"<p><a href='{e(name)}'><img src='{e(name)}' alt='{e(key)} plot'></a></p>"
        for key, name in PLOTS.items()
    )
    knee = "none" if suggestion["knee"] is None else f"{suggestion['knee']:.2f}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>streamdedup calibration</title><style>{_STYLE}</style></head>
<body>
<h1>Threshold calibration</h1>
<p>{e(figures["input"]["kind"])} <code>{e(figures["input"]["path"])}</code>: {corpus["positions"]:,} chunk positions,
{corpus["texts"]:,} distinct normalized texts ({corpus["exact_copies"]:,} exact copies);
{corpus["candidate_pairs"]:,} candidate pairs verified, {corpus["verified_pairs_in_range"]:,} of them at
J &ge; {LOWEST_THRESHOLD}. Current threshold {current:.2f}; shingles of {params["shingle_size"]} words,
{params["num_perm"]} permutations, seed {params["seed"]}. Candidates from {candidate["bands"]} bands of
{candidate["rows"]} rows (the banding for J = {candidate["for_threshold"]}: a pair there is a candidate with
probability {candidate["recall_at_lowest"]:.4f}, at J = {current:.2f} with {candidate["recall_at_threshold"]:.6f}).</p>
<div class="suggestion"><p><strong>Suggested threshold {suggestion["threshold"]:.2f}</strong>:
{e(suggestion["reason"])}. Knee {knee}, fact limit {suggestion["fact_limit"]:.2f}.</p>
<p class="muted">Rule: {e(RULE)}</p></div>
<h2>Each threshold</h2>
<p class="muted">Pairs: verified pairs at or above the threshold: near (same facts, readers covered), fact_conflict
(different numbers, dates, versions or negations: never merged), acl_boundary (same facts, but the worse-ranked
text's readers are not all readers of the better-ranked one). Outcome: the engine's decision for every text, best
ranked first: texts merged as near copies, the flags a run raises, the canonical chunks, and how the positions map
(exact copies, near copies); reduction = 1 &minus; chunks / positions.</p>
<table><tr><th>threshold</th><th>pairs</th><th>near pairs</th><th>fact_conflict pairs</th><th>acl_boundary pairs</th>
<th>merged texts</th><th>fact_conflict flags</th><th>acl_boundary flags</th><th>chunks</th><th>exact positions</th>
<th>near positions</th><th>reduction</th></tr>
{"".join(rows)}</table>
<h2>Plots</h2>{plots}
<h2>Pairs just above {current:.2f}</h2>
<p class="muted">Left: the better-ranked text, the one the other would join; right: the other. Words only one
of them has are marked, as are fact tokens the other lacks.</p>
{_samples(figures["samples"]["above"])}
<h2>Pairs just below {current:.2f}</h2>{_samples(figures["samples"]["below"])}
<h2>How to read this</h2>
<ul class="muted">
<li>Texts are the distinct normalized chunk texts, with every live position, the union of their sources' readers
and their rank under the canonical policy ({e(", ".join(params["canonical_policy"]))}).</li>
<li>A pair found here may be missed by a run: the engine bands for its own threshold and verifies at most
<code>max_candidates</code> candidates per text; and a run raises a text's fact_conflict flag once in its life, so
one whose texts changed over time may count flags against texts that are gone.</li>
<li>The histogram below {LOWEST_THRESHOLD} is partial: pairs there become candidates with a falling probability.</li>
<li>Figures: <a href="{JSON_FILE}">{JSON_FILE}</a>.</li>
</ul>
</body></html>
"""


_OUTCOMES = {
    "near": "near copies: the right text would join the left one",
    "fact_conflict": "fact_conflict: they state different facts, so they are flagged, never merged",
    "acl_boundary": "acl_boundary: readers of the right text cannot all read the left one, so no merge",
    "below": "below the threshold: kept apart",
}


def _samples(pairs: list[dict[str, Any]]) -> str:
    """Render sample pairs side by side: the better-ranked text left, the other right, words that differ marked."""
    if not pairs:
        return "<p class='muted'>none</p>"
    e = html.escape
    parts = []
    for pair in pairs:
        left = "".join(_marked(tag, a, "del") for tag, a, _ in pair["diff"])
        right = "".join(_marked(tag, b, "ins") for tag, _, b in pair["diff"])
        better, worse = pair["better"], pair["worse"]
        heads = []
        for side, other, element in ((better, worse, "del"), (worse, better, "ins")):
            facts = " ".join(
                e(token) if token in other["facts"] else f"<{element}>{e(token)}</{element}>"
                for token in side["facts"]
            )
            heads.append(
                f"<th>{e(side['source_id'])}: {side['positions']} position(s), readers "
                f"{e(', '.join(side['readers']))}<br>facts: <code>{facts or '(none)'}</code></th>"
            )
        parts.append(
            f"<h3>J = {pair['jaccard']:.4f}: {e(_OUTCOMES.get(pair['outcome'], pair['outcome']))}</h3>"
            f"<table class='pair'><tr>{''.join(heads)}</tr><tr><td>{left}</td><td>{right}</td></tr></table>"
        )
    return "".join(parts)


def _marked(tag: str, words: str, element: str) -> str:
    """Escape a diff step's words; mark them unless both texts have them (the space after stays unmarked)."""
    if tag == "equal" or not words:
        return html.escape(words)
    stripped = words.rstrip()
    return f"<{element}>{html.escape(stripped)}</{element}>{html.escape(words[len(stripped) :])}"
