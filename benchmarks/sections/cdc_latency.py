"""The Deletion propagation from a database section: a row's DELETE or ACL change to the LanceDB index."""

from __future__ import annotations

from typing import Any

from benchmarks.sections.figures import RESULTS, check, load_result, machine_of

#: The acceptance bound: p99 from the statement's commit to the index, at 20 changes/s.
TARGET_SECONDS = 2.0

DELETE_ROWS = [
    ("t0 -> feed record", "`d` record on the connector's topic (Connect's timestamp)"),
    ("t0 -> mapping record", "source mapping's tombstone (worker's timestamp)"),
    ("t0 -> mapping record received", "... received by a consumer here"),
    ("t0 -> chunk record", "chunk's tombstone (worker's timestamp)"),
    ("t0 -> chunk record received", "... received by a consumer here"),
    ("t0 -> index", "**row gone from the LanceDB table**"),
]
DELETE_STAGES = [
    ("connector (t0 -> feed record)", "connector: commit to `d` record (Debezium, Connect's producer)"),
    ("worker (feed record -> trigger record)", "worker: `d` record to mapping tombstone"),
    ("index writer (trigger record -> index)", "index writer: mapping tombstone to row gone"),
]
DELETE_OFF_PATH = ("worker (mapping record -> chunk record)", "worker: mapping tombstone to chunk tombstone")
ACL_ROWS = [
    ("t0 -> feed record", "`u` record on the connector's topic (Connect's timestamp)"),
    ("t0 -> mapping record", "source mapping record (worker's timestamp)"),
    ("t0 -> chunk record", "chunk record with the new `acl` (worker's timestamp)"),
    ("t0 -> chunk record received", "... received by a consumer here"),
    ("t0 -> index", "**index row's `acl` equal to the new ACL**"),
]
ACL_STAGES = [
    ("connector (t0 -> feed record)", "connector: commit to `u` record"),
    ("worker (feed record -> trigger record)", "worker: `u` record to chunk record"),
    ("index writer (trigger record -> index)", "index writer: chunk record to row updated"),
]


def _ms(value: float) -> str:
    return f"{1000 * value:,.0f}"


def _table(latency: dict[str, Any], rows: list[tuple[str, str]]) -> list[str]:
    out = ["| from the commit (t0) to | p50 ms | p90 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|"]
    for key, label in rows:
        s = latency.get(key)
        if s:
            out.append(f"| {label} | {_ms(s['p50'])} | {_ms(s['p90'])} | {_ms(s['p99'])} | {_ms(s['max'])} |")
    return out


def _stages(latency: dict[str, Any], stages: list[tuple[str, str]]) -> list[str]:
    total = latency["t0 -> index"]["mean"]
    out = [
        "| stage | p50 ms | p90 ms | p99 ms | max ms | share of the mean |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, label in stages:
        s = latency.get(key)
        if s:
            out.append(
                f"| {label} | {_ms(s['p50'])} | {_ms(s['p90'])} | {_ms(s['p99'])} | {_ms(s['max'])} | "
                f"{s['mean'] / total:.0%} |"
            )
    return out


def _cpu(phase: dict[str, Any]) -> str:
    parts = ", ".join(f"{name} {value:.1f} s" for name, value in phase["cpu_seconds"].items())
    return (
        f"CPU seconds over the phase's {phase['wall_seconds']:.0f} s: {parts}; the benchmark's index reader "
        f"{phase['index_poller_cpu_seconds']:.1f} s."
    )


def _comparisons() -> list[dict[str, Any]]:
    found = [load_result(path.stem) for path in sorted(RESULTS.glob("cdc_latency-*.json"))]
    return sorted((r for r in found if r is not None), key=lambda r: int(r["poll_interval_ms"]))


def _p(latency: dict[str, Any], key: str) -> str:
    s = latency.get(key)
    return f"{_ms(s['p50'])} / {_ms(s['p99'])} / {_ms(s['max'])}" if s else ""


def section(lines: list[str]) -> None:
    result = load_result("cdc_latency")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.cdc_latency` (`make bench-cdc`).", ""]
        return
    deletes, acl = result["phases"]["deletes"], result["phases"]["acl"]
    d, a = deletes["latency"], acl["latency"]
    d99, a99 = d["t0 -> index"]["p99"], a["t0 -> index"]["p99"]
    poll = result["poll_interval_ms"]
    off = d.get(DELETE_OFF_PATH[0])
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}` (`make bench-cdc`).",
        "",
        "How long a row deleted in PostgreSQL stays searchable in the index. Everything runs on the machine, on free",
        "loopback ports, in a temporary directory removed at the end: the project's broker (`deploy/kafka/broker.sh`,",
        "Apache Kafka 4.4.0, KRaft, one node), PostgreSQL (`deploy/postgres/postgres.sh`), Kafka Connect in",
        "standalone mode with Debezium's PostgreSQL connector (`deploy/connect/connect.sh`; pgoutput, JSON without",
        f"the schema wrapper, **`poll.interval.ms={poll}`**, Debezium's default being 500), one `streamdedup worker`",
        "reading the connector's topic through a feeds file (the mapping of [From a database](connectors.md)), with",
        f"default settings ({result['partitions']} partitions, `STREAMDEDUP_FETCH_WAIT={result['fetch_wait']:g}`), and",
        f"`streamdedup index --into lancedb://DIR --follow` with the {result['embedder']} embedder.",
        "",
        f"The table `documents` gets {result['rows']} rows of distinct single paragraphs before the connector",
        "starts (its snapshot), so each row is the only source of its chunk and its delete is the chunk's end. Once",
        f"the index holds a row per chunk ({result['snapshot_seconds']:.0f} s after Connect was started):",
        "",
        f"1. **Deletes**: {result['deletes']} rows deleted one per transaction (autocommit) at {result['rate']:g}/s,",
        "   scheduled by absolute time.",
        f"2. **ACL changes**: {result['acl_changes']} `update documents set acl = ... where id = ...` of remaining",
        f"   rows at {result['rate']:g}/s.",
        "",
        "t0 is the wall time at which the statement's commit returned. A record's time is its Kafka timestamp",
        "(CreateTime: Connect's producer for the connector's topic, the worker's for the outputs), on this machine's",
        "clock like t0; *received* is when a consumer in the benchmark got the record. A thread of the benchmark",
        f"reads the index every {result['index_poll_ms']:g} ms (the table's latest version, for the chunk ids still",
        f"pending; a read took {result['index_read_ms_mean']:.0f} ms on average), so an index time is late by up to a",
        "read interval.",
        "",
        f"### Deletes ({d['t0 -> index']['n']} rows)",
        "",
        f"Load average (1, 5, 15 min): {deletes['load_before']} before, {deletes['load_after']} after.",
        "",
        *_table(d, DELETE_ROWS),
        "",
        "The stages on the index's path, each from the end of the one before. The index writer removes a row as",
        "soon as its view holds no source of the chunk, which the mapping's tombstone tells it; the chunk's",
        "tombstone, one stage hop later, is not on its path"
        + (
            f" (mapping tombstone to chunk tombstone: p50 {_ms(off['p50'])} ms, p99 {_ms(off['p99'])} ms)."
            if off
            else "."
        ),
        "",
        *_stages(d, DELETE_STAGES),
        "",
        _cpu(deletes),
        "",
        f"### ACL changes ({a['t0 -> index']['n']} rows)",
        "",
        f"Load average (1, 5, 15 min): {acl['load_before']} before, {acl['load_after']} after.",
        "",
        *_table(a, ACL_ROWS),
        "",
        *_stages(a, ACL_STAGES),
        "",
        _cpu(acl),
        "",
        f"- Target: p99 from the DELETE's commit to the index row gone under {TARGET_SECONDS:g} s at "
        f"{result['rate']:g} deletes/s: {d99:.2f} s, {check(d99 < TARGET_SECONDS)}.",
        f"- Target: p99 from the ACL change's commit to the index row's `acl` under {TARGET_SECONDS:g} s: "
        f"{a99:.2f} s, {check(a99 < TARGET_SECONDS)}.",
        "",
    ]
    others = _comparisons()
    if not others:
        return
    lines += [
        "**The connector's poll interval.** Debezium's PostgreSQL task sleeps `poll.interval.ms` whenever the",
        "replication stream has nothing to read, and its queue then waits up to `poll.interval.ms` again for a batch",
        "to fill (2,048 events) before Kafka Connect gets it, so at a few changes a second a change waits for up to",
        "twice the interval before it is on the topic. The same benchmark with other values (`--poll-interval-ms N`,",
        "each its own run, `benchmarks/results/cdc_latency-pollN.json`; the load is the 1-minute average before the",
        "deletes and after the ACL changes), p50 / p99 / max in ms:",
        "",
        "| `poll.interval.ms` | run | commit to feed record | deletes: commit to index | ACL: commit to index |",
        "|---:|---|---:|---:|---:|",
    ]
    for run in sorted([result, *others], key=lambda r: int(r["poll_interval_ms"])):
        rd, ra = run["phases"]["deletes"], run["phases"]["acl"]
        lines.append(
            f"| {run['poll_interval_ms']} | {run['machine']['date']}, load {rd['load_before'][0]:g} to "
            f"{ra['load_after'][0]:g} | "
            f"{_p(rd['latency'], 't0 -> feed record')} | {_p(rd['latency'], 't0 -> index')} | "
            f"{_p(ra['latency'], 't0 -> index')} |"
        )
    lines.append("")
