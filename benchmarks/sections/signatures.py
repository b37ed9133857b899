"""The Signatures section: chunks/s of each signature method and their accuracy."""

from __future__ import annotations

from benchmarks.sections.figures import (
    PLOTS,
    bar_chart,
    check,
    load_result,
    machine_of,
)


def section(lines: list[str]) -> None:
    result = load_result("signatures")
    if result is None:
        lines.append("_Not run yet: `python -m benchmarks.signatures`._\n")
        return
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.\n",
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
        bar_chart(PLOTS / plot, list(ratio), list(ratio.values()), f"{corpus}: throughput / datasketch bulk",
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
            f"- {corpus}: {ratio['streamdedup']:.1f}x datasketch bulk (target 5x, {check(ratio['streamdedup'] >= 5)});"
            f" {to_rensa['streamdedup']:.2f}x rensa (target 1x, {check(to_rensa['streamdedup'] >= 1)}).",
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
        f"- Accuracy at least datasketch's: MAE {ours:.4f} vs {theirs:.4f}, {check(ours <= theirs * 1.02)} "
        "(within 2%, the sampling noise at this many pairs).",
        "",
    ]
