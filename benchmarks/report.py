"""Write docs/benchmarks.md (and its plots) from the results in benchmarks/results/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def checks_per_new_text(messages: dict[str, int]) -> float:
    """Return the candidate checks (``VerifyRequest``) per new text joining its bands (``BandJoin``) among a growth
    window's messages counted by kind."""
    return messages.get("VerifyRequest", 0) / max(messages.get("BandJoin", 0), 1)


RESULTS = Path(__file__).resolve().parent / "results"
DOCS = Path(__file__).resolve().parents[1] / "docs"
PLOTS = DOCS / "benchmarks"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _bar(path: Path, labels: list[str], values: list[float], title: str, xlabel: str) -> None:
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
        + (f" at commit {m['commit']}" if m.get("commit") else "")
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


def _engine(lines: list[str]) -> None:
    result = _load("engine")
    if result is None:
        lines.append("_Not run yet: `python -m benchmarks.engine`._\n")
        return
    django, growth = result["django"], result["growth"]
    windows = growth["windows"]
    xs = [w["chunks"] / 1000 for w in windows]
    _line(PLOTS / "engine-growth.png", xs, {
        "throughput / first window": [w["chunks_per_second"] / windows[0]["chunks_per_second"] for w in windows],
        "RSS / first window": [w["rss_bytes"] / windows[0]["rss_bytes"] for w in windows],
    }, "Embedded engine as the state grows", "chunk positions in the state (thousands)")  # fmt: skip
    ratio = django["ratio_to_signatures"]
    throughput = growth["throughput_ratio_end_to_start"]
    memory = growth["rss_ratio_end_to_start"]
    lines += [
        f"Machine: {_machine(result)}. Command: `{result['command']}`.\n",
        f"**Django docs** ({django['files']:,} files of five releases, {django['chunks']:,} chunks, "
        f"{django['exact']:,} exact and {django['near']:,} near copies, {django['canonical']:,} canonical chunks), "
        f"embedded runner, RocksDB state, batches of {django.get('batch', 256):,} documents:\n",
        "| | chunks/s | ratio to datasketch bulk |",
        "|---|---:|---:|",
        *(
            [
                f"| datasketch `MinHash.bulk` signatures alone, same chunks (baseline) | "
                f"{django['datasketch_bulk_chunks_per_second']:,.0f} | 1.00 |"
            ]
            if "datasketch_bulk_chunks_per_second" in django
            else []
        ),
        f"| the engine's signature kernel alone, same chunks | {django['signature_chunks_per_second']:,.0f} | "
        f"{django['signature_chunks_per_second'] / django.get('datasketch_bulk_chunks_per_second', 1):.2f} |",
        f"| engine end to end | {django['chunks_per_second']:,.0f} | {django.get('ratio_to_datasketch_bulk', 0):.2f} |",
        *(
            [
                f"| engine end to end, two worker processes (`--workers 2`) | "
                f"{django['workers_2_chunks_per_second']:,.0f} | {django['workers_2_ratio_to_datasketch_bulk']:.2f} |"
            ]
            if "workers_2_chunks_per_second" in django
            else []
        ),
        *(
            [
                f"| engine end to end on its Python kernels (no compiled ones; "
                f"{django['python_kernels_ratio_to_compiled']:.2f} of the compiled engine) | "
                f"{django['python_kernels_chunks_per_second']:,.0f} | "
                f"{django['python_kernels_ratio_to_datasketch_bulk']:.2f} |"
            ]
            if "python_kernels_chunks_per_second" in django
            else []
        ),
        "",
        *_cli_lines(result.get("cli")),
        f"**Growth** to {windows[-1]['chunks']:,} chunk positions ({growth['canonical']:,} canonical chunks, "
        f"{growth['exact']:,} exact and {growth['near']:,} near copies; {growth['disk_bytes'] / 2**20:,.0f} MiB on "
        "disk):\n",
        *_growth_rows(windows),
        "![growth](benchmarks/engine-growth.png)\n",
        *_stage_growth(windows),
        *_work_growth(windows),
        *_flat_growth(result.get("growth_flat")),
        *_memory_growth(result.get("growth_memory"), growth, result.get("growth_flat")),
        *_datasketch_growth(result.get("growth_datasketch"), windows),
        f"- Engine end to end / its own signature kernel alone: {ratio:.2f}.",
        *(
            [_target("engine end to end / datasketch bulk, Django", django["ratio_to_datasketch_bulk"], 1.0)]
            if "ratio_to_datasketch_bulk" in django
            else []
        ),
        *(
            [
                _target(
                    "the same with `--workers 2` (two processes; the baseline uses one core)",
                    django["workers_2_ratio_to_datasketch_bulk"],
                    1.0,
                )
            ]
            if "workers_2_ratio_to_datasketch_bulk" in django
            else []
        ),
        *(
            [
                _target(
                    "`streamdedup run` / datasketch bulk script, from launch",
                    result["cli"]["ratio_to_datasketch_bulk"],
                    1.0,
                )
            ]
            if "cli" in result
            else []
        ),
        f"- Target: throughput at the largest state at least 0.8 of the start: {throughput:.2f}, "
        f"{_check(throughput >= 0.8)}.",
        *(
            [
                f"- The same at the machine's speed of each window (the fixed work took "
                f"{windows[-1]['fixed_work_seconds'] / windows[0]['fixed_work_seconds']:.2f}x as long in the last "
                f"window as in the first): {growth['throughput_ratio_end_to_start_at_machine_speed']:.2f}."
            ]
            if "throughput_ratio_end_to_start_at_machine_speed" in growth
            else []
        ),
        f"- Target: resident memory not growing with the state: RSS x{memory:.2f} while the state grew "
        f"x{growth['state_ratio_end_to_start']:.0f}, {_check(memory < 0.5 * growth['state_ratio_end_to_start'])}.",
        "",
    ]


def _cli_lines(cli: dict[str, Any] | None) -> list[str]:
    if cli is None:
        return []
    return [
        f"**As a user runs it**: a pre-chunked JSONL feed of {cli['positions']:,} positions (documents of ten Django",
        "chunks); wall time from launch to exit, best of three:\n",
        "| | seconds | ratio (datasketch time / this time) |",
        "|---|---:|---:|",
        f"| a script that reads the file and calls `MinHash.bulk` (baseline) | "
        f"{cli['datasketch_script_seconds']:.2f} | 1.00 |",
        f"| `streamdedup run` | {cli['streamdedup_run_seconds']:.2f} | {cli['ratio_to_datasketch_bulk']:.2f} |",
        "",
    ]


def _growth_rows(windows: list[dict[str, Any]]) -> list[str]:
    """The growth table; with each window's fixed-work time, also its throughput at the first window's speed."""
    first = windows[0]
    fixed = "fixed_work_seconds" in first
    head = "| chunks in state | chunks/s | ratio to first window | RSS (MiB) | ratio to first window |"
    rule = "|---:|---:|---:|---:|---:|"
    if fixed:
        head += " fixed work (s) | ratio to first window at the machine's speed |"
        rule += "---:|---:|"
    cpu = "background_cpu_seconds" in first
    if cpu:
        head += " engine thread CPU (s) | background CPU (s) |"
        rule += "---:|---:|"
    rows = []
    for w in windows:
        ratio = w["chunks_per_second"] / first["chunks_per_second"]
        row = (
            f"| {w['chunks']:,} | {w['chunks_per_second']:,.0f} | {ratio:.2f} | {w['rss_bytes'] / 2**20:,.0f} | "
            f"{w['rss_bytes'] / first['rss_bytes']:.2f} |"
        )
        if fixed:
            speed = w["fixed_work_seconds"] / first["fixed_work_seconds"]
            row += f" {w['fixed_work_seconds']:.3f} | {ratio * speed:.2f} |"
        if cpu:
            row += f" {w['engine_thread_cpu_seconds']:.1f} | {w['background_cpu_seconds']:.1f} |"
        rows.append(row)
    note = (
        ["", "Fixed work: the same 100 positions through the engine on a new in-memory state after every batch, "
         "outside the window's time, summed over the window; nothing in the growing state touches it. A window's "
         "rate at the machine's speed is its rate times how much longer the fixed work took than in the first "
         "window. The fixed work shares the machine with the run's own RocksDB flushes and compactions, which grow "
         "with the state, as well as with other work on the machine: the rate at the machine's speed leaves out "
         "some of the engine's own cost at scale, and the truth lies between the two ratios."]
        if fixed
        else []
    )  # fmt: skip
    if cpu:
        note += [
            "",
            "CPU: of the thread that runs the engine (the fixed work left out), and of the process's other threads, "
            "RocksDB's flushes and compactions, over the window; a compaction rewrites a family's bottom level "
            f"whole. Background CPU over the run: {sum(w['background_cpu_seconds'] for w in windows):,.0f} s.",
        ]
    return [head, rule, *rows, *note, ""]


def _stage_growth(windows: list[dict[str, Any]]) -> list[str]:
    if "stage_seconds" not in windows[0]:
        return []
    first, last = windows[0]["stage_seconds"], windows[-1]["stage_seconds"]
    rows = [f"| {stage} | {first.get(stage, 0):.1f} | {last.get(stage, 0):.1f} | "
            f"{last.get(stage, 0) / max(first.get(stage, 0), 1e-9):.2f} |" for stage in sorted(first)]  # fmt: skip
    return [
        "Handler time per 50,000 chunks, first and last window (the rest of the time is commits and the driver):\n",
        "| stage | first window (s) | last window (s) | ratio |",
        "|---|---:|---:|---:|",
        *rows,
        "",
    ]


def _work_growth(windows: list[dict[str, Any]]) -> list[str]:
    """What the first and the last window did: new texts, candidate checks, and state reads per stage."""
    first, last = windows[0], windows[-1]
    if "messages" not in first:
        return []

    rows = [
        f"| new texts joining their bands (`BandJoin`) | {first['messages'].get('BandJoin', 0):,} | "
        f"{last['messages'].get('BandJoin', 0):,} |",
        f"| candidate checks (`VerifyRequest`) | {first['messages'].get('VerifyRequest', 0):,} | "
        f"{last['messages'].get('VerifyRequest', 0):,} |",
        f"| candidate checks a new text | {checks_per_new_text(first['messages']):.2f} | "
        f"{checks_per_new_text(last['messages']):.2f} |",
    ]
    for stage in sorted(set(first["reads"]) | set(last["reads"])):
        a = first["reads"].get(stage, {"keys": 0, "found": 0})
        b = last["reads"].get(stage, {"keys": 0, "found": 0})
        rows.append(
            f"| {stage} state reads: keys asked (found) | {a['keys']:,} ({a['found']:,}) | "
            f"{b['keys']:,} ({b['found']:,}) |"
        )
    return [
        "What the first and the last window did:\n",
        "| | first window | last window |",
        "|---|---:|---:|",
        *rows,
        "",
    ]


def _flat_growth(flat: dict[str, Any] | None) -> list[str]:
    """The growth run with drawn words as new texts (``--generator flat``), when it was run."""
    if flat is None:
        return []
    windows = flat["windows"]
    first, last = windows[0], windows[-1]
    checks = [checks_per_new_text(w["messages"]) for w in windows]
    quiet = [w for w in windows[len(windows) // 2 :] if w["background_cpu_seconds"] < 1.0]
    lines = [
        f"The same run with the new texts made of drawn corpus words (`python -m benchmarks.engine --generator "
        f"flat`), so that a new text's candidates do not grow with the state ({checks[0]:.2f} checks a new text in "
        f"the first window, {checks[-1]:.2f} in the last): last window / first "
        f"{last['chunks_per_second'] / first['chunks_per_second']:.2f} ({first['chunks_per_second']:,.0f} and "
        f"{last['chunks_per_second']:,.0f} chunks/s), engine thread CPU {first['engine_thread_cpu_seconds']:.1f} "
        f"and {last['engine_thread_cpu_seconds']:.1f} s.",
    ]
    if quiet:
        best = max(w["chunks_per_second"] for w in quiet)
        lines[-1] += (
            f" Of the second half's windows, those with less than 1 s of background CPU (no compaction beside "
            f"them) ran at up to {best / first['chunks_per_second']:.2f} of the first."
        )
    return [*lines, ""]


def _memory_growth(
    memory: dict[str, Any] | None, halves: dict[str, Any], flat: dict[str, Any] | None
) -> list[str]:
    """The growth runs with the state in memory (``--memory-growth``) beside the RocksDB ones, when run."""
    if memory is None:
        return []

    def ratios(run: dict[str, Any]) -> str:
        rates = [w["chunks_per_second"] for w in run["windows"]]
        last_four = len(rates[-4:]) / sum(1 / rate for rate in rates[-4:])
        return f"{rates[-1] / rates[0]:.2f} | {last_four / rates[0]:.2f}"

    rows = [("RocksDB (the target's)", "halves", halves), ("RocksDB", "flat", flat)]
    rows += [(f"in memory{_when(run)}", generator, run) for generator, run in memory.items()]
    return [
        "The growth runs with the state in memory (`python -m benchmarks.engine --memory-growth`: the engine's "
        "dictionary store, no RocksDB), beside the RocksDB ones; each ratio is of one run's windows:\n",
        "| state | new texts | last window / first | last four windows / first |",
        "|---|---|---:|---:|",
        *(f"| {state} | {generator} | {ratios(run)} |" for state, generator, run in rows if run is not None),
        "",
    ]


def _when(run: dict[str, Any]) -> str:
    """`` (run <date> at commit <commit>)`` for a run that records its machine, else nothing."""
    m = run.get("machine")
    return f" (run {m['date']} at commit {m['commit']})" if m else ""


def _datasketch_growth(loop: dict[str, Any] | None, engine: list[dict[str, Any]]) -> list[str]:
    """The growth feed through a datasketch loop (``--datasketch-growth``), when it was run."""
    if loop is None:
        return []
    windows = loop["windows"]
    first, last = windows[0], windows[-1]
    lines = [
        "The same feed through the loop a datasketch user writes (`python -m benchmarks.engine "
        "--datasketch-growth`: new texts' `MinHash.bulk` signatures, an in-memory `MinHashLSH` with the engine's "
        "bands and rows, every candidate verified by the exact Jaccard of the shingle sets; nothing persisted, no "
        f"output). A run of its own{_when(loop)}, so compare each column's ratio, not its rates with the "
        "engine's:\n",
        "| | chunks/s | signatures (s) | LSH (s) | verification (s) | candidate checks a new text |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, window in (("first window", first), ("last window", last)):
        seconds = window["seconds"]
        lines.append(
            f"| {name} | {window['chunks_per_second']:,.0f} | {seconds.get('signatures', 0):.2f} | "
            f"{seconds.get('lsh', 0):.2f} | {seconds.get('verification', 0):.2f} | "
            f"{window['checks_per_new_text']:.2f} |"
        )
    rates = sorted(w["chunks_per_second"] / first["chunks_per_second"] for w in windows)
    lines += [
        "",
        f"- The loop's last window / its first: {loop['throughput_ratio_end_to_start']:.2f} (its slowest window "
        f"{rates[0]:.2f}, its median {rates[len(rates) // 2]:.2f}; "
        "its LSH times jump in the windows where Python's garbage collector walks the index); the engine's, above: "
        f"{engine[-1]['chunks_per_second'] / engine[0]['chunks_per_second']:.2f}.",
        "",
    ]
    return lines


def _target(name: str, value: float, target: float, fmt: str = ".2f", note: str = "") -> str:
    """Return a line saying whether ``value`` reaches ``target`` (at least), and by what factor it misses."""
    ok = value >= target
    miss = "" if ok else f" (short by a factor of {target / value:,.2f})" if value > 0 else ""
    return f"- Target: {name} at least {target:{fmt}}: {value:{fmt}}, {_check(ok)}{miss}{note}."


def _streaming(lines: list[str]) -> None:
    result = _load("streaming")
    if result is None:
        lines.append("_Not run yet: `python -m benchmarks.streaming` (starts its own broker)._\n")
        return
    if "embedded" not in result:
        lines.append(
            "_Results of an older version of the benchmark: run `python -m benchmarks.streaming`._\n"
        )
        return
    one, two, embedded, quix = result["one_worker"], result["two_workers"], result["embedded"], result["quix"]
    passthrough = result["passthrough_chunks_per_second"]
    chunks = one["chunks"]
    quix_after = quix["processing_chunks_per_s"] or quix["chunks_per_s"]

    def per_cpu(run: dict[str, Any], key: str) -> float:
        return float(run.get("best_chunks_per_cpu_second") or run[key])

    rows = [
        ("aiokafka consume-and-produce passthrough (baseline, best of "
         f"{result.get('passthrough_runs', 1)})", passthrough, None),
        (f"embedded engine in one process (RocksDB, batches of {embedded['batch']}, same events)",
         embedded["chunks_per_second"], per_cpu(embedded, "chunks_per_cpu_second")),
        ("streamdedup, 1 worker (first produce to last record written)", one["chunks_per_second"],
         per_cpu(one, "chunks_per_cpu_second")),
        ("streamdedup, 2 workers (CPU of both)", two["chunks_per_second"], per_cpu(two, "chunks_per_cpu_second")),
        ("Quix Streams peer, exact-only, from launch", quix["chunks_per_s"], quix["chunks_per_cpu_s"]),
        (f"Quix Streams peer, after its startup ({quix['startup_seconds']:.1f} s)", quix_after,
         per_cpu(quix, "processing_chunks_per_cpu_s")),
    ]  # fmt: skip
    _bar(PLOTS / "streaming.png", [r[0].split(" (")[0] for r in rows[1:]], [r[1] for r in rows[1:]],
         "Streaming: chunks/s on the same feed and broker", "chunks/s (same run)")  # fmt: skip
    table = [
        f"| {label} | {rate:,.0f} | {rate / passthrough:.3f} | {'' if cpu is None else f'{cpu:,.0f}'} |"
        for label, rate, cpu in rows
    ]
    targets = result.get("targets", {})
    r_embedded = result["ratio_one_worker_to_embedded"]
    r_cpu = result["ratio_two_to_one_per_cpu_second"]
    r_quix = one["chunks_per_second"] / quix_after
    busy = sum(one["cpu_seconds"]) / one["seconds"]
    lines += [
        f"Machine: {_machine(result)}. Command: `{result['command']}`. Broker: Apache Kafka 4.4.0 (KRaft, one node,",
        f"same machine). {result['documents']:,} documents of {result['chunks_per_document']} real Django chunks "
        f"({chunks:,} chunks), {result['partitions']} partitions; every row from the same run, on the same broker",
        "and the same events (the Quix peer gets them as one message per chunk). A worker is timed once its group is",
        "stable and it is healthy (partition stores recovered; as the peer is timed after its startup), from the",
        "first produce until the last record it",
        "wrote; its CPU is user + system of its process over the same window (psutil). The embedded engine, the",
        f"workers and the peer each ran {result.get('repeats', 1)} times, interleaved; the table shows each one's "
        "best chunks/s and best chunks per CPU-s (every run below).\n",
        "| | chunks/s | ratio to passthrough | chunks per CPU-s |",
        "|---|---:|---:|---:|",
        *table,
        "",
        "![streaming](benchmarks/streaming.png)\n",
        *_all_runs(result),
        *_streaming_traffic(result),
        *_latency_line(result),
        _target("one worker / embedded engine (chunks/s)", r_embedded, targets.get("one_worker_to_embedded", 0.5)),
        _target("two workers' chunks per CPU-s / one worker's", r_cpu, targets.get("two_to_one_per_cpu_second", 0.9),
                note=f"; two workers / one in chunks/s: {result['ratio_two_workers_to_one']:.2f}x on "
                f"{result['machine']['cores']} cores shared with the broker"),
        _target("one worker / Quix Streams peer after its startup (chunks/s)", r_quix,
                targets.get("one_worker_to_quix", 1.0),
                note=f"; from the peer's launch: {result['ratio_one_worker_to_quix']:.2f}; per CPU-s: "
                f"{result['ratio_one_worker_to_quix_per_cpu_second']:.2f} of the peer's"),
        "",
        f"One worker used {sum(one['cpu_seconds']):.1f} CPU-s in {one['seconds']:.1f} s: busy {busy:.0%} of the "
        "time (the rest it waited for Kafka: each call waits for its outputs, then for its changelog call)"
        + _machine_share(one, result["machine"]["cores"]) + ". "
        f"The embedded engine alone, with no Kafka at all, reaches {embedded['chunks_per_second'] / quix_after:.2f} "
        "of the Quix peer's rate: the peer hashes each chunk once and keeps one state record per distinct text, "
        "where the engine also computes MinHash signatures, writes 21 LSH buckets per new text and verifies near "
        "candidates.",
        "",
        *_streaming_profile(result),
    ]  # fmt: skip


def _all_runs(result: dict[str, Any]) -> list[str]:
    names = {"embedded": "embedded engine", "one_worker": "1 worker", "two_workers": "2 workers",
             "quix": "Quix peer after startup"}  # fmt: skip
    found = [(label, result[key].get("all_runs")) for key, label in names.items()]
    if not any(runs for _, runs in found):
        return []

    def run_text(run: Any) -> str:
        return f"{run[0]:,.0f} ({run[1]:,.0f} per CPU-s)" if isinstance(run, list) else f"{run:,.0f}"

    text = "; ".join(f"{label} {', '.join(run_text(r) for r in runs)}" for label, runs in found if runs)
    return [f"Chunks/s of every run, in order: {text}.\n"]


def _machine_share(run: dict[str, Any], cores: int) -> str:
    machine = run.get("machine_cpu_seconds")
    if machine is None:
        return ""
    window = run["seconds_until_committed"]
    return (
        f"; the whole machine used {machine:.1f} of the {cores * window:.1f} CPU-s its {cores} cores had in the "
        f"window ({machine - sum(run['cpu_seconds']):.1f} CPU-s for the broker, the producer and anything else)"
    )


def _streaming_traffic(result: dict[str, Any]) -> list[str]:
    one = result["one_worker"]
    chunks = one["chunks"]
    metrics = one["metrics"]
    sends = metrics["sends"]
    written = one["records_written"]
    calls = metrics.get("calls", {})
    return [
        "Kafka traffic of the one-worker run, from its `/metrics` (before producing and once idle) and the topics'",
        "end offsets:\n",
        "| | count | per input chunk |",
        "|---|---:|---:|",
        f"| send calls (record batches, `streamdedup_kafka_sends_total`) | {sum(sends.values()):,.0f} | "
        f"{one['sends_per_chunk']:.3f} |",
        *(f"| … of kind `{kind}` | {n:,.0f} | {n / chunks:.3f} |" for kind, n in sorted(sends.items())),
        f"| changelog records (`streamdedup_changelog_records_total`) | {metrics['changelog_records']:,.0f} | "
        f"{one['changelog_records_per_chunk']:.2f} |",
        f"| changelog topics' end offsets | {written['changelog']:,} | {written['changelog'] / chunks:.2f} |",
        *(
            f"| … of changelog `{name}` | {n:,} | {n / chunks:.2f} |"
            for name, n in written.get("changelog_by_stage", {}).items()
        ),
        f"| stage topic records | {written['stage']:,} | {written['stage'] / chunks:.3f} |",
        f"| output topic records | {written['output']:,} | {written['output'] / chunks:.2f} |",
        *(
            f"| handler calls, stage `{stage}` | {n:,.0f} | {n / chunks:.3f} |"
            for stage, n in sorted(calls.items())
        ),
        "",
    ]


def _latency_line(result: dict[str, Any]) -> list[str]:
    latency = result.get("latency_at_half_rate")
    if not latency:
        return []
    return [
        f"Latency at half the one-worker rate ({latency['chunks_per_second']:,.0f} chunks/s, {latency['events']:,} "
        f"documents): p50 {latency['p50_s'] * 1000:,.0f} ms, p99 {latency['p99_s'] * 1000:,.0f} ms from input to its "
        "source mapping on the output topic.\n",
    ]


def _streaming_profile(result: dict[str, Any]) -> list[str]:
    profiled = result.get("profiled_one_worker") or {}
    profile = profiled.get("profile")
    if not profile:
        return []
    engine = profile["parts"].get("engine handlers (Engine.handle)", 0.0)
    one, embedded = result["one_worker"], result["embedded"]
    cpu_one = one["chunks"] / one.get("best_chunks_per_cpu_second", one["chunks_per_cpu_second"])
    cpu_embedded = embedded["chunks"] / embedded.get(
        "best_chunks_per_cpu_second", embedded["chunks_per_cpu_second"]
    )
    return [
        f"Where one worker's time went, from a second one-worker run under py-spy ({profiled['chunks_per_second']:,.0f}"
        f" chunks/s under the sampler; {profile['samples']:,} samples of the active stack; a sample counts for every",
        "part on its stack, so parts that call one another overlap):",
        "",
        "| part | share of samples |",
        "|---|---:|",
        *(f"| {part} | {share:.0%} |" for part, share in profile["parts"].items()),
        "",
        "Frames where the samples were taken (own time):",
        "",
        "| frame | share |",
        "|---|---:|",
        *(f"| `{frame}` | {share:.1%} |" for frame, share in profile["top_frames"][:10]),
        "",
        f"The engine's handlers hold {engine:.0%} of the worker's samples; the rest is the Kafka driver (decoding "
        "and encoding stage batches, building record batches, the producer, a RocksDB write batch per call) and "
        f"the event loop. In CPU-seconds for the same {one['chunks']:,} chunks: the worker {cpu_one:.1f}, the embedded "
        f"engine {cpu_embedded:.1f} ({cpu_one / cpu_embedded:.2f}x).",
        "",
    ]


def _state(lines: list[str]) -> None:
    result = _load("state")
    if result is None:
        lines.append("_Not run yet: `python -m benchmarks.state` (starts its own broker)._\n")
        return
    embedded, kafka = result["embedded"], result["kafka"]
    lines += [
        f"Machine: {_machine(result)}. Command: `{result['command']}`.\n",
        "| measure | value |",
        "|---|---:|",
        f"| unique chunks in the state (Django docs, five releases) | {embedded['unique_chunks']:,} |",
        "| bytes on disk per unique chunk (RocksDB, flushed and compacted) | "
        f"{embedded['bytes_per_unique_chunk']:,.0f} |",
        f"| of which chunk text kept in the records (uncompressed) | "
        f"{embedded['text_bytes'] / embedded['unique_chunks']:,.0f} |",
        f"| bytes per unique chunk without the stored text | {embedded['bytes_per_unique_chunk_without_text']:,.0f} |",
        f"| embedded: reopen the state and process one event | {embedded['embedded_restart_seconds']:.2f} s |",
        "",
        *_state_worker(kafka),
        *_state_families(embedded),
    ]


def _state_worker(kafka: dict[str, Any]) -> list[str]:
    if "restart_kept" not in kafka:
        return [
            f"Worker: first run over {kafka['documents']:,} documents {kafka['first_run_seconds']:.1f} s; restart "
            f"with local state {kafka['restart_kept_seconds']:.1f} s; rebuilt from the changelogs "
            f"{kafka['restart_rebuilt_seconds']:.1f} s (an older version of the benchmark).",
            "",
        ]
    before, targets = kafka.get("before", {}), kafka.get("targets", {})
    kept, rebuilt = kafka["restart_kept"], kafka["restart_rebuilt"]

    def row(label: str, key: str | None, value: float) -> str:
        old = before.get(key or "")
        target = targets.get(key or "")
        verdict = "" if target is None else f"at most {target:g} s, {_check(value <= target)}"
        shown = f"{value:.2f}" if value < 10 else f"{value:.1f}"
        return f"| {label} | {'' if old is None else f'{old:.1f} s'} | {shown} s | {verdict} |"

    return [
        f"**The worker** after the Django 4.2 docs ({kafka['documents']:,} documents; its changelogs then hold "
        f"{kafka['changelog_records']:,} records, its data directory {kafka['data_dir_bytes'] / 2**20:,.0f} MiB). "
        "A restart is timed from the process's launch, with one new document produced as it starts; *before* is "
        "the worker on Faust tables (47.2 s and 3.6 s were until the group had committed the new document).\n",
        "| measure | before | now | target |",
        "|---|---:|---:|---|",
        row(f"first run over {kafka['documents']:,} documents (launch to all committed)", "first_run_seconds",
            kafka["first_run_seconds"]),
        row("restart with local state: until the new document's source mapping is written",
            "restart_kept_seconds", kept["first_event_seconds"]),
        row("… until its web server answers (interpreter, imports, start)", None,
            kept.get("web_answers_seconds") or 0.0),
        row("… until healthy (group joined, stores recovered)", None, kept["healthy_seconds"]),
        row("restart with an empty data directory, stores rebuilt from the changelogs: until the new document's "
            "source mapping is written", "restart_rebuilt_seconds", rebuilt["first_event_seconds"]),
        row("… until its web server answers (interpreter, imports, start)", None,
            rebuilt.get("web_answers_seconds") or 0.0),
        row("… until healthy (group joined, stores recovered)", None, rebuilt["healthy_seconds"]),
        "",
        "The workers' own figures (`streamdedup_recovery_seconds`, `streamdedup_recovered_records_total`): "
        f"with local state, {kept['worker_recovery_seconds']:.2f} s and {kept['recovered_records']:,.0f} records "
        f"replayed; rebuilt, {rebuilt['worker_recovery_seconds']:.2f} s and {rebuilt['recovered_records']:,.0f} "
        f"records ({rebuilt['recovered_records'] / max(rebuilt['worker_recovery_seconds'], 1e-9):,.0f} records/s).",
        "",
        *_restart_runs(kafka),
        *_rebuild_records(kafka),
    ]  # fmt: skip


def _restart_runs(kafka: dict[str, Any]) -> list[str]:
    kept, rebuilt = kafka.get("restart_kept_runs"), kafka.get("restart_rebuilt_runs")
    if not kept or not rebuilt:
        return []

    def seconds(runs: list[dict[str, Any]]) -> str:
        def one(run: dict[str, Any]) -> str:
            if run.get("machine_cpu_seconds") is None:
                return f"{run['first_event_seconds']:.2f} s"
            cores = run["machine_cpu_seconds"] / run["window_seconds"]
            return f"{run['first_event_seconds']:.2f} s ({cores:.1f} cores busy)"

        return ", ".join(one(run) for run in runs)

    return [
        f"Each restart ran {len(kept)} times; the table shows the fastest (until the new document's mapping, and how "
        "busy the whole machine was meanwhile, the worker included: with "
        f"local state {seconds(kept)}; rebuilt {seconds(rebuilt)}).",
        "",
    ]


def _rebuild_records(kafka: dict[str, Any]) -> list[str]:
    by_stage = kafka.get("changelog_records_by_stage")
    if not by_stage:
        return []
    total = sum(by_stage.values())
    return [
        "What a rebuild replays, per stage changelog (records written by the first run; no key is written often "
        "enough for compaction to matter):",
        "",
        "| stage | records | share |",
        "|---|---:|---:|",
        *(
            f"| {stage} | {n:,} | {n / total:.0%} |"
            for stage, n in sorted(by_stage.items(), key=lambda kv: -kv[1])
        ),
        "",
    ]


_FAMILY_ROLES = {
    "source": "per document: its content hashes, what each content answered, its last mapping",
    "content": "per distinct text: its texts once, signature, counts, first sources, neighbours, cluster; "
    "one ref record per (text, source) holding it",
    "band": "per LSH bucket: the contents in it",
    "collection": "per collection: documents per normalized line (boilerplate)",
    "view": "per output key: the last digest sent",
}


def _state_families(embedded: dict[str, Any]) -> list[str]:
    families = embedded.get("families")
    if not families:
        return []
    unique = embedded["unique_chunks"]
    total = sum(f["bytes"] for f in families.values())
    largest = max(families, key=lambda name: families[name]["bytes"])
    return [
        "Where the bytes are: keys and records per state family, before RocksDB's block compression",
        f"({total / 2**20:,.0f} MiB in all, {embedded['disk_bytes'] / 2**20:,.0f} MiB on disk):",
        "",
        "| family | holds | records | MiB | bytes per unique chunk |",
        "|---|---|---:|---:|---:|",
        *(
            f"| {name} | {_FAMILY_ROLES.get(name, '')} | {f['records']:,} | {f['bytes'] / 2**20:,.1f} | "
            f"{f['bytes'] / unique:,.0f} |"
            for name, f in families.items()
        ),
        "",
        f"The {largest} family is the largest ({families[largest]['bytes'] / total:.0%} of the bytes).",
        *(
            [
                f"Of the content family, {families['content']['ref_records']:,} ref records take "
                f"{families['content']['ref_bytes'] / 2**20:,.1f} MiB."
            ]
            if "ref_records" in families.get("content", {})
            else []
        ),
        "",
    ]


def _profile(lines: list[str]) -> None:
    result = _load("profile")
    if result is None:
        lines.append("_Not run yet: `python -m benchmarks.profile`._\n")
        return
    total = result["total_seconds"]
    per_chunk = total / result["chunks"] * 1e6
    lines += [
        f"Machine: {_machine(result)}. Command: `{result['command']}`.\n",
        f"Django 4.2 docs, {result['files']:,} files, {result['chunks']:,} chunks ({result['canonical']:,} "
        f"canonical), embedded runner with RocksDB state: {total:.1f} s, {per_chunk:.0f} µs per chunk.\n",
        "| part | seconds | share | messages handled |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | {value:.2f} | {value / total:.0%} | {result['messages'].get(name, 0):,} |"
            for name, value in sorted(result["seconds"].items(), key=lambda kv: -kv[1])
        ),
        "",
        "Messages by kind: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(result["message_kinds"].items(), key=lambda kv: -kv[1]))
        + ".\n",
        "What limits the engine: not signatures (one compiled pass, under a microsecond per chunk) but the work",
        "per copy and per state record around them. The content stage (compiled) reads, settles and rewrites a",
        "content's record for every reference update and writes its chunk record again; a batch's records are",
        "then written to RocksDB in one commit, a Python call per key into rocksdict; the source stage chunks,",
        "normalizes and hashes documents and writes what a version tells its contents in compiled calls, and keeps",
        "its records in Python. Each new distinct text also costs a handful of messages between",
        "stages and one LSH bucket read-modify-write per band (21 with the default banding). The floors below say",
        "how much of that the job needs.",
        "",
    ]


def _popularity(lines: list[str]) -> None:
    result = _load("popularity")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.popularity`.", ""]
        return
    lines += [
        f"Machine: {_machine(result)}. Command: `{result['command']}`.",
        "",
        f"{result['sources']:,} sources, each one document of two chunks: a passage every source shares and a text",
        "of its own. Each source is newer than the last, so the shared chunk's canonical source moves with every",
        f"batch. Embedded runner, RocksDB state, batches of {result.get('batch', 256):,} documents; windows of "
        f"{result['window']:,} sources.",
        "",
        "| sources so far | sources/s | ratio to first window |",
        "|---:|---:|---:|",
    ]
    first = result["windows"][0]["per_second"]
    for window in result["windows"]:
        lines.append(
            f"| {window['sources']:,} | {window['per_second']:,.0f} | {window['per_second'] / first:.2f} |"
        )
    size = result["largest_chunk_record_bytes"]
    lines += [
        "",
        _target("last window / first window (sources/s)", result["ratio_last_to_first"], 0.8),
        f"- Target: largest `canonical-chunks` record under 64 KiB: {size:,} bytes, {_check(size < 65536)}.",
        "",
    ]


def _dense(lines: list[str]) -> None:
    result = _load("dense")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.dense`.", ""]
        return
    copies, seconds, flags = result["copies"], result["seconds"], result["fact_conflict_flags"]
    lines += [
        f"Machine: {_machine(result)}. Command: `{result['command']}`.",
        "",
        f"{copies:,} copies of a support macro, each with its own customer number: every pair is above the",
        "threshold and states a different fact, so nothing merges. `streamdedup run` over a JSONL file, RocksDB",
        "state, from launch to exit. Baseline in the same run: as many unrelated texts of the same length.",
        "",
        "| feed | seconds | fact_conflict flags | canonical chunks |",
        "|---|---:|---:|---:|",
        f"| {copies:,} near copies | {seconds:.2f} | {flags:,} | {result['outputs'].get('canonical-chunks', 0):,} |",
        f"| {copies:,} unrelated texts | {result['baseline_seconds']:.2f} | 0 | |",
        "",
        f"- Near copies / unrelated texts (time): {result['ratio_to_baseline']:.2f}.",
        f"- Target: under 10 s: {seconds:.2f} s, {_check(seconds < 10)}.",
        f"- Target: at most {copies:,} flags: {flags:,}, {_check(flags <= copies)}.",
        "",
    ]


def _retrieval(lines: list[str]) -> None:
    result = _load("retrieval")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.retrieval`.", ""]
        return
    found, cal = result["eval"], result["calibration"]
    plain, dedup = found["without_dedup"], found["with_dedup"]
    releases = " and ".join(result["releases"])
    lines += [
        f"Machine: {_machine(result)}. Command: `{result['command']}`.",
        "",
        f"The documentation of Django {releases} ({result['files']:,} files, each release dated to its release day,",
        f"one collection). `streamdedup eval -k {found['k']}` with {found['queries']} queries from the docs'",
        f"headings, BM25 ({found['bm25']['implementation']}) over every live chunk position against canonical",
        f"chunks only ({result['eval_seconds']:.1f} s from launch):",
        "",
        "| | without dedup | with dedup |",
        "|---|---:|---:|",
        f"| entries (embedding calls) | {plain['entries']:,} | {dedup['entries']:,} |",
        f"| redundant share of a top-{found['k']} (mean) | {plain['redundant_share']:.1%} | "
        f"{dedup['redundant_share']:.1%} |",
        f"| queries whose top-{found['k']} repeats a passage | {plain['queries_with_redundancy']:,} | "
        f"{dedup['queries_with_redundancy']:,} |",
        f"| distinct chunks per top-{found['k']} (mean) | {plain['distinct_chunks']:.2f} | "
        f"{dedup['distinct_chunks']:.2f} |",
        f"| unique sources per top-{found['k']} (mean) | {plain['unique_sources']:.2f} | "
        f"{dedup['unique_sources']:.2f} |",
        "",
        f"Embedding calls saved: {found['embedding_calls_saved']:,}. Review flags: "
        + ", ".join(f"{reason} {count:,}" for reason, count in found["review_flags"].items())
        + ".",
        "",
        f"`streamdedup calibrate` on the same folder ({result['calibrate_seconds']:.1f} s from launch): "
        f"{cal['corpus']['texts']:,} distinct texts, {cal['corpus']['candidate_pairs']:,} candidate pairs.",
        "",
        "| threshold | near pairs | merged texts | fact_conflict flags | acl_boundary flags | reduction |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in cal["thresholds"]:
        lines.append(
            f"| {row['threshold']:.2f} | {row['near_pairs']:,} | {row['merged']:,} | {row['fact_conflict']:,} | "
            f"{row['acl_boundary']:,} | {row['reduction']:.2%} |"
        )
    lines += [
        "",
        f"Suggested threshold: {cal['suggestion']['threshold']:.2f} ({cal['suggestion']['reason']}).",
        "",
        "![merges and flags against the threshold](benchmarks/retrieval-thresholds.png)",
        "",
    ]


def _index(lines: list[str]) -> None:
    result = _load("index")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.index`.", ""]
        return
    sample, engine, cli, replay = result["sample"], result["engine"], result["cli"], result["replay"]
    timed, bare = result["timed"], result["bare"]
    releases = " and ".join(result["releases"])
    relations = ", ".join(f"{n:,} {relation}" for relation, n in engine["relations"].items())
    pages = sample.get("pages") or []
    listed = (
        ["", "Pages: " + ", ".join(f"`{page}`" for page in pages) + "."]
        if pages and len(pages) <= 40
        else ["", "The pages are listed in `benchmarks/results/index.json`."]
        if pages
        else []
    )
    parts, calls, items = timed["parts"], timed["calls"], timed.get("items", {})
    seconds = timed["seconds"]
    share = timed["shares"]
    labels = {
        "embed": "model: `embed` (tokenizer and onnxruntime)",
        "upsert": "database: `upsert` (rows with vectors, one `merge_insert`)",
        "update_metadata": "database: `update_metadata` (rows without vectors)",
        "delete": "database: `delete`",
        "search": "database: `search` (semantic neighbours of each new row)",
        "rows": "database: `rows` (what the table holds of a batch's chunks)",
        "optimize": "database: `optimize` (compaction, every 100 writes)",
        "view stage": "rest: view, staging records (RocksDB reads)",
        "view commit": "rest: view, committing a batch (RocksDB write batch)",
        "vector cache": "rest: vector cache (RocksDB reads and writes)",
        "other": "rest: other (reading the file, rows from the view, decisions, flag checks)",
    }
    rates = [
        (
            "bare `OnnxEmbedder.embed`, same texts, batch 32, one call (baseline)",
            bare["embeddings_per_second"],
        ),
        ("the writer's own `embed` calls", timed["model_embeddings_per_second"]),
        ("the writer in process (first batch read to last commit)", timed["embeddings_per_second"]),
        ("`streamdedup index` from launch to exit", cli["embeddings_per_second"]),
    ]
    lines += [
        f"Machine: {_machine(result)}. Command: `{result['command']}`.",
        "",
        f"The documentation of Django {releases}, each release dated to its release day, one collection, as in",
        f"[Retrieval](#retrieval). Indexed: {sample['what']}. The ONNX embedder makes 10 to 35 embeddings a",
        "second on one core of this machine (as busy as it is), and the benchmark embeds every text three times,",
        "so both releases whole (about 35,000 canonical chunks, `--all`) would take over an hour: by default it",
        "indexes this fixed sample and finishes in minutes (`--sources N` for more pages).",
        *listed,
        "",
        f"`streamdedup run` made {engine['documents']:,} documents into {engine['positions']:,} chunk positions",
        f"(by relation: {relations}) and {engine['canonical_chunks']:,} canonical chunks "
        f"({engine['run_seconds']:.1f} s from launch). Then",
        "`streamdedup index --into lancedb://DIR --from outputs.jsonl` with the default embedder (all-MiniLM-L6-v2",
        "int8 on onnxruntime, one thread, batches of 32), as a user runs it; the same run again in the benchmark's",
        "process into an empty index, with the LanceDB sink's methods, the model and the view's RocksDB calls timed;",
        "and the bare embedder on the texts the writer embedded, in the same run.",
        "",
        "| | |",
        "|---|---:|",
        f"| chunk positions | {cli['positions']:,} |",
        f"| canonical chunks (rows in the index) | {cli['rows']:,} |",
        f"| texts embedded | {cli['embedded']:,} |",
        f"| embedding calls saved by dedup | {cli['embedding_calls_saved']:,} |",
        f"| semantic flags | {cli['review_flags']:,} |",
        f"| `streamdedup index`, seconds from launch | {cli['seconds']:.1f} |",
        f"| replay of the same file: texts embedded | {replay['embedded']:,} |",
        f"| replay: seconds from launch | {replay['seconds']:.1f} |",
        "",
        "| | embeddings/s | ratio to the bare embedder |",
        "|---|---:|---:|",
        *(f"| {label} | {rate:.2f} | {rate / bare['embeddings_per_second']:.2f} |" for label, rate in rates),
        "",
        f"Where the writer's time goes, in process: {seconds:.1f} s for {timed['embedded']:,} texts in "
        f"{timed['embed_calls']:,} `embed` calls (loading the model, {timed['model_load_seconds']:.1f} s, and "
        f"opening the index and the writer, {timed['open_seconds']:.1f} s, apart). Items are texts, rows or ids.",
        "",
        "| part | seconds | share | calls | items |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {labels.get(name, name)} | {value:.2f} | {value / seconds:.1%} | {_count(calls.get(name))} | "
            f"{_count(items.get(name))} |"
            for name, value in parts.items()
        ),
        f"| **model / database / rest** | | {share['model']:.0%} / {share['database']:.0%} / "
        f"{share['rest']:.0%} | | |",
        "",
        *_index_replay(replay, cli["seconds"]),
        f"- `streamdedup index` embeddings/s from launch / the bare embedder's on the same texts: "
        f"{result['ratio_to_bare']:.2f} (in process: {result['ratio_to_bare_in_process']:.2f}).",
        f"- Replay embeds nothing: {replay['embedded']:,} texts, {_check(replay['embedded'] == 0)}.",
        "",
    ]


def _count(value: int | None) -> str:
    return f"{value:,}" if value else ""


def _index_replay(replay: dict[str, Any], cli_seconds: float) -> list[str]:
    timed = replay.get("timed")
    if not timed:
        return []
    parts, calls, items = timed["parts"], timed.get("calls", {}), timed.get("items", {})
    database = sum(parts.get(name, 0.0) for name in ("upsert", "update_metadata", "delete", "search", "rows",
                                                      "optimize"))  # fmt: skip
    view = sum(parts.get(name, 0.0) for name in ("view stage", "view commit", "vector cache"))
    writes = ", ".join(
        f"{name} {calls[name]:,} ({items.get(name, 0):,} {unit})"
        for name, unit in (
            ("upsert", "rows"),
            ("update_metadata", "rows"),
            ("delete", "ids"),
            ("search", "rows"),
        )
        if calls.get(name)
    )
    return [
        "The replay reads the same file under a name the writer has not read, into the same index: every record "
        "is applied again and every vector comes from the writer's cache. Its time from launch is mostly the "
        f"command's start (interpreter, imports, the model): {replay['seconds']:.1f} s of the first run's "
        f"{cli_seconds:.1f} s. In process it took {timed['seconds']:.1f} s ({timed['embedded']:,} texts embedded): "
        f"database {database:.2f} s, view and cache {view:.2f} s, other {parts.get('other', 0.0):.2f} s"
        + (
            f". The sink calls it made ({writes}) come from the superseded records the file also holds: applied "
            "again over the final view, a batch brings back for a while chunks that later records removed (written "
            "again from the cache, searched for semantic neighbours, deleted again) and earlier metadata of rows "
            "that later records set right again."
            if writes
            else "; it wrote nothing to the sink."
        ),
        "",
    ]


_FLOOR_ROWS = {
    "engine": "the engine, embedded (RocksDB state)",
    "engine_bands_in_memory": "the engine with its band family in a dict (nothing persisted)",
    "exact": "floor `exact`: hash, one record per document and per text",
    "lsh_rocksdb": "floor `lsh_rocksdb`: also LSH buckets, one record each (as the engine keeps them)",
    "lsh_memory": "floor `lsh_memory`: also LSH buckets, in a dict in memory with a log record per batch",
    "lsh_sorted": "floor `lsh_sorted`: the same, as sorted NumPy runs looked up a batch at a time",
    "datasketch_bulk": "datasketch `MinHash.bulk` signatures alone (the engine benchmark's baseline)",
    "quix_peer": "the Quix Streams peer after its startup, Kafka included (the streaming benchmark's)",
}
_FEED_TITLES = {
    "streaming": "the streaming benchmark's feed (pre-chunked documents of five Django chunks)",
    "django": "the docs of five Django releases (text upserts, the engine benchmark's feed)",
}


def _floor(lines: list[str]) -> None:
    result = _load("floor")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.floor`.", ""]
        return
    lines += [
        f"Machine: {_machine(result)}. Command: `{result['command']}`.",
        "",
        "A floor is a plain loop doing only the storage work the engine cannot avoid, on the project's RocksDB",
        "store with the engine's chunker, normalization and signature kernel, in batches of "
        f"{result['batch']} documents: no verification, ACLs, versions, deletions, canonical choice or output",
        "records (`benchmarks/floor.py` says exactly what each does; `make bench-floor` adds the Quix peer's row).",
        "CPU time per input chunk, each contender's",
        f"least of {result['repeat']} interleaved runs:",
        "",
    ]
    for feed, found in result["feeds"].items():
        per_chunk = found["cpu_us_per_chunk"]
        counts = found["counts"].get("lsh_rocksdb", {})
        lines += [
            f"**{_FEED_TITLES.get(feed, feed)}**: {found['chunks']:,} chunks, {counts.get('new_texts', 0):,} "
            f"distinct texts, {counts.get('candidates', 0):,} bucket candidates",
            "",
            "| | CPU µs per chunk | engine / this | this / datasketch bulk | this / Quix peer |",
            "|---|---:|---:|---:|---:|",
            *(
                f"| {label} | {per_chunk[name]:,.1f} | {per_chunk['engine'] / per_chunk[name]:.2f} | "
                f"{per_chunk[name] / per_chunk['datasketch_bulk']:.2f} | "
                + (f"{per_chunk[name] / per_chunk['quix_peer']:.2f} |" if "quix_peer" in per_chunk else " |")
                for name, label in _FLOOR_ROWS.items()
                if name in per_chunk
            ),
            "",
        ]
    lines += [
        "Reading it: a target that asks the engine to beat a baseline is out of reach for every implementation",
        "whose floor alone costs more CPU than the baseline (`this / datasketch bulk` or `this / Quix peer` above 1;",
        "the floors have no Kafka, so beside the peer they flatter the worker).",
        "",
        *(_floor_reading(feed, found["cpu_us_per_chunk"]) for feed, found in result["feeds"].items()),
        "",
        "The machine's speed drifts within a run; each contender's least CPU time is kept, so ratios between rows",
        "move by some 10% from run to run (see `runs` in `benchmarks/results/floor.json`).",
        "",
    ]


def _floor_reading(feed: str, per_chunk: dict[str, float]) -> str:
    """Say, for one feed, how far the engine is from its own floor and what keeping its buckets in memory gives."""
    engine, floor = per_chunk["engine"], per_chunk["lsh_rocksdb"]
    bands = per_chunk.get("engine_bands_in_memory")
    return (
        f"- {feed}: the engine costs {engine / floor:.1f}x the floor of its own storage design (`lsh_rocksdb`), "
        f"which is {floor / per_chunk['datasketch_bulk']:.2f} of datasketch bulk"
        + (f" and {floor / per_chunk['quix_peer']:.2f} of the Quix peer" if "quix_peer" in per_chunk else "")
        + (
            f"; with its buckets in memory the engine costs {bands / engine:.2f} of itself: "
            "what any change to where it keeps its buckets can give."
            if bands
            else "."
        )
    )


SECTIONS = [
    ("Signatures", _signatures),
    ("Where the time goes", _profile),
    ("Embedded engine", _engine),
    ("Popularity", _popularity),
    ("Dense neighbourhoods", _dense),
    ("Streaming on the broker", _streaming),
    ("State", _state),
    ("Retrieval", _retrieval),
    ("Index writer", _index),
    ("Floors", _floor),
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
