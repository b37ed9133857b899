"""The growth runs' part of the Embedded engine section: windows, stages, work, and the runs beside them."""

from __future__ import annotations

from typing import Any


def checks_per_new_text(messages: dict[str, int]) -> float:
    """Return the candidate checks (``VerifyRequest``) per new text joining its bands (``BandJoin``) among a growth
    window's messages counted by kind."""
    return messages.get("VerifyRequest", 0) / max(messages.get("BandJoin", 0), 1)


def growth_rows(windows: list[dict[str, Any]]) -> list[str]:
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


def stage_growth(windows: list[dict[str, Any]]) -> list[str]:
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


def work_growth(windows: list[dict[str, Any]]) -> list[str]:
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


def flat_growth(flat: dict[str, Any] | None) -> list[str]:
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


def memory_growth(
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


def datasketch_growth(loop: dict[str, Any] | None, engine: list[dict[str, Any]]) -> list[str]:
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
