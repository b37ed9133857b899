"""``streamdedup calibrate``: what each threshold would merge and flag, as plots, a page, JSON and a table.

The texts come from an input (a JSONL file of input events or a folder, cut into chunks by the engine's own
stages) or from a state directory written by ``streamdedup run``, opened read-only, so a run may hold it at the
same time. The computation is :mod:`streamdedup.query.calibration`'s; this module reads, draws and writes. The plots
need matplotlib, an optional dependency (the ``calibrate`` extra), imported only when the command runs.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import rocksdict
from rich.console import Console
from rich.markup import escape
from rich.progress import MofNCompleteColumn, TaskID
from rich.table import Table

from streamdedup.cli.progress import progress_bar
from streamdedup.cli.run import feed_progress, input_feed
from streamdedup.core.facts import fact_tokens
from streamdedup.core.messages import Output
from streamdedup.core.model import InputEvent
from streamdedup.core.params import EngineParams, candidate_probability, describe_mismatch
from streamdedup.core.policy import CanonicalPolicy
from streamdedup.core.state import ContentRecord
from streamdedup.drivers.feeds import cut_batches
from streamdedup.errors import ConfigurationError, StateError, StateMismatchError
from streamdedup.query.calibration import (
    BIN_WIDTH,
    LOWEST_THRESHOLD,
    RULE,
    Calibration,
    Corpus,
    VerifiedPair,
    calibrate,
    candidate_banding,
    corpus_from_contents,
    corpus_from_events,
    jaccard_histogram,
    pair_outcome,
    word_diff,
)
from streamdedup.settings import Settings
from streamdedup.store.base import PARAMS_KEY
from streamdedup.store.rocksdb import read_only

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["PLOTS", "calibrate_command", "figures", "read_state_corpus", "summary_table"]

#: The plots written to ``--out``, by name.
PLOTS = {"jaccard": "jaccard.png", "thresholds": "thresholds.png", "reduction": "reduction.png"}
_JSON = "calibration.json"
_PAGE = "index.html"
_STEPS = {
    "signatures": "signatures",
    "bands": "LSH bands",
    "verification": "verifying pairs",
    "thresholds": "thresholds",
}


def calibrate_command(
    settings: Settings,
    input: Path | None,
    state: Path | None,
    out: Path,
    samples: int,
    console: Console,
    *,
    collection: str | None = None,
) -> None:
    """Calibrate on INPUT or on the texts of ``state``; write the plots, index.html and JSON to ``out``."""
    started = time.monotonic()
    _check_matplotlib()
    params = settings.engine_params()
    if state is not None:
        corpus = read_state_corpus(state, params, console)
        described = {"kind": "state", "path": str(state)}
    elif input is not None:
        corpus = _input_corpus(settings, input, collection, console)
        described = {"kind": "input", "path": str(input)}
    else:
        raise ConfigurationError("give exactly one of INPUT and --state")
    with progress_bar(console, MofNCompleteColumn(), label="calibrate") as progress:
        tasks: dict[str, TaskID] = {}

        def report(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = progress.add_task(_STEPS.get(step, step), total=total)
            progress.update(tasks[step], completed=done, total=total)

        result = calibrate(corpus, params, samples=samples, progress=report)
    out.mkdir(parents=True, exist_ok=True)
    data = {**figures(result), "input": described}
    _write_plots(result, out)
    data["seconds"] = round(time.monotonic() - started, 3)
    (out / _JSON).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / _PAGE).write_text(_page(data), encoding="utf-8")
    console.print(summary_table(result))
    suggestion = result.suggestion
    console.print(f"[bold]suggested threshold {suggestion.threshold:.2f}[/bold]: {escape(suggestion.reason)}")
    console.print(
        f"wrote {escape(str(out / _PAGE))} with its plots and {escape(_JSON)} in {data['seconds']:.1f} s"
    )


def figures(result: Calibration) -> dict[str, Any]:
    """Return a calibration's figures as plain data: what the JSON file holds and the page shows."""
    params = result.params
    bands, rows = candidate_banding(params)
    by_hash = {t.content_hash: t for t in result.corpus.texts}

    def side(content_hash: str) -> dict[str, Any]:
        text = by_hash[content_hash]
        return {
            "content_hash": content_hash,
            "source_id": text.rank.source_id,
            "readers": list(text.readers),
            "positions": text.positions,
            "facts": fact_tokens(text.norm),
            "text": text.text,
        }

    def sample(pair: VerifiedPair) -> dict[str, Any]:
        diff = word_diff(by_hash[pair.better].text, by_hash[pair.worse].text)
        return {
            "jaccard": pair.jaccard,
            "outcome": pair_outcome(pair, params.threshold),
            "better": side(pair.better),
            "worse": side(pair.worse),
            "diff": [[op.tag, op.a, op.b] for op in diff],
        }

    corpus = result.corpus
    return {
        "schema": "streamdedup.query.calibration/v1",
        "threshold": params.threshold,
        "parameters": {
            "shingle_size": params.shingle_size,
            "num_perm": params.num_perm,
            "seed": params.seed,
            "min_shingles": params.min_shingles,
            "canonical_policy": list(params.canonical_policy),
            "engine_banding": {
                "bands": params.bands,
                "rows": params.rows,
                "recall_at_threshold": params.recall_at_threshold,
            },
            "candidate_banding": {
                "bands": bands,
                "rows": rows,
                "for_threshold": LOWEST_THRESHOLD,
                "recall_at_lowest": candidate_probability(LOWEST_THRESHOLD, bands, rows),
                "recall_at_threshold": candidate_probability(params.threshold, bands, rows),
            },
        },
        "corpus": {
            "positions": corpus.positions,
            "texts": len(corpus.texts),
            "exact_copies": corpus.positions - len(corpus.texts),
            "candidate_pairs": result.candidates,
            "verified_pairs_in_range": sum(1 for p in result.pairs if p.jaccard >= LOWEST_THRESHOLD),
        },
        "histogram": {"bin_width": BIN_WIDTH, "counts": result.histogram},
        "thresholds": [{**asdict(r), "reduction": r.reduction} for r in result.rows],
        "suggestion": {**asdict(result.suggestion), "rule": RULE},
        "samples": {"above": [sample(p) for p in result.above], "below": [sample(p) for p in result.below]},
    }


def summary_table(result: Calibration) -> Table:
    """Return the console's table: the outcome at each threshold, the current and suggested ones marked."""
    current, suggested = result.params.threshold, result.suggestion.threshold
    table = Table(
        title=f"calibration: {len(result.corpus.texts):,} distinct texts, {result.corpus.positions:,} positions",
        caption="◆ current threshold  ★ suggested",
        header_style="bold",
        box=None,
        pad_edge=False,
    )
    for name in ("threshold", "pairs", "merged", "fact flags", "acl flags", "chunks", "reduction"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for row in result.rows:
        marks = "".join(
            mark for mark, value in (("◆", current), ("★", suggested)) if abs(row.threshold - value) < 1e-9
        )
        table.add_row(
            f"{row.threshold:.2f}",
            f"{row.pairs:,}",
            f"{row.merged:,}",
            f"{row.fact_conflict:,}",
            f"{row.acl_boundary:,}",
            f"{row.chunks:,}",
            f"{row.reduction:.2%}",
            marks,
        )
    return table


def _check_matplotlib() -> None:
    """Fail before any long work if the plots cannot be drawn."""
    try:
        import matplotlib  # noqa: PLC0415 - an optional dependency, loaded only by this command
    except ImportError as exc:
        raise ConfigurationError(
            "calibrate draws its plots with matplotlib, which is not installed: "
            "pip install 'streamdedup[calibrate]'"
        ) from exc
    del matplotlib


def _input_corpus(settings: Settings, source: Path, collection: str | None, console: Console) -> Corpus:
    """Cut INPUT into texts with the engine's stages, batch by batch as ``run`` does, with a progress bar."""
    feed = input_feed(settings, source, collection)
    column = feed_progress(feed)
    letters = 0
    with progress_bar(console, column, label="calibrate") as progress:
        total, items = feed.open()
        task = progress.add_task(f"reading {source.name}", total=total or None)

        def batches() -> Iterator[list[InputEvent]]:
            # Batches count dead letters as run's do, so boilerplate learned in one batch applies from the next.
            nonlocal letters
            for batch in cut_batches(items, settings.batch_size, settings.batch_chars):
                events = [i.item for i in batch if not isinstance(i.item, Output)]
                letters += len(batch) - len(events)
                if events:  # a batch of dead letters alone changes nothing
                    yield events
                progress.update(task, completed=batch[-1].done)
            progress.update(task, completed=total)

        corpus = corpus_from_events(batches(), settings.engine_params())
    if letters:
        console.print(
            f"{letters:,} input item(s) were not valid events and are left out (a run dead-letters them)"
        )
    return corpus


def read_state_corpus(state: Path, params: EngineParams, console: Console) -> Corpus:
    """Return the live texts of a state directory written by ``run``, opened read-only.

    The texts are calibrated under ``params``; where the state was built under others, the console says which.
    Nothing of the state is written, and a run may hold it meanwhile (rocksdict rewrites its own small config
    file on every open, with what the store wrote there).
    """
    with read_only(state, ("content", "meta")) as rdict:
        raw = rdict.get_column_family("meta").get(PARAMS_KEY.encode("utf-8"))
        if raw is None:
            raise StateError(
                f"the state at {state} records no engine parameters; it was not written by 'run'"
            )
        _compare(json.loads(raw), params, state, console)
        records = _content_records(rdict.get_column_family("content"))
        corpus = corpus_from_contents(records, CanonicalPolicy(params.canonical_policy))
    return corpus


def _compare(stored: dict[str, Any], params: EngineParams, state: Path, console: Console) -> None:
    """Refuse a state of another format; name the parameters it was built under that differ from ``params``."""
    wanted = params.fingerprint()
    if stored.get("format") != wanted["format"]:
        raise StateMismatchError(
            f"the state at {state} has format {stored.get('format')} (this version reads format "
            f"{wanted['format']}): its texts were normalized differently"
        )
    # What a calibration explores, or never uses, is left out: only what changes the texts or their pairs counts.
    explored = {"threshold", "bands", "rows", "lsh_min_recall", "max_candidates", "max_chunk_sources"}
    differences = describe_mismatch(
        {k: v for k, v in stored.items() if k not in explored},
        {k: v for k, v in wanted.items() if k not in explored},
    )
    if differences is not None:
        console.print(
            escape(
                f"note: the state at {state} was built with {differences}; the calibration uses the settings"
            )
        )


def _content_records(family: rocksdict.Rdict) -> Iterator[tuple[str, ContentRecord]]:
    """Yield every content record of the content stage, in every partition the store holds."""
    decoder = msgspec.msgpack.Decoder(ContentRecord)
    for address, value in family.items():
        if not isinstance(address, bytes) or not isinstance(value, bytes):  # pragma: no cover - raw mode
            continue
        key = address[2:].decode("utf-8")  # keys are the partition (two bytes), then the UTF-8 key
        # A content record's key is its content hash; the stage's other records (refs, ids) have NUL-separated keys.
        if "\x00" not in key:
            yield key, decoder.decode(value)


def _figure() -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - optional, see the module
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _write_plots(result: Calibration, out: Path) -> None:
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


def _page(figures: dict[str, Any]) -> str:
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
<li>Figures: <a href="{_JSON}">{_JSON}</a>.</li>
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
