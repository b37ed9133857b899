"""Deletion propagation from a database: a row's DELETE (or ACL change) to its chunk gone from the index.

    python -m benchmarks.cdc_latency                         # 240 deletes and 200 ACL changes at 20/s (~3 min)
    python -m benchmarks.cdc_latency --poll-interval-ms 500  # Debezium's default poll interval
    python -m benchmarks.cdc_latency --profile               # py-spy on the worker and the index writer too

Everything runs on this machine, on free loopback ports, in a temporary directory that is removed at the end (on
failure and Ctrl-C too): the project's broker (deploy/kafka/broker.sh), a PostgreSQL cluster
(deploy/postgres/postgres.sh), Kafka Connect with Debezium's PostgreSQL connector (deploy/connect/connect.sh), one
``streamdedup worker`` reading the connector's topic through a feeds file, and ``streamdedup index --into
lancedb://DIR --follow`` with the default embedder.

1. The table ``documents`` gets ``--rows`` rows, each a distinct single paragraph, before the connector starts, so
   they arrive as its snapshot. The benchmark waits until the view holds one single-source chunk per row and the
   index holds a row per chunk.
2. Deletes: ``--deletes`` rows deleted one per transaction (autocommit) at ``--rate`` per second, scheduled by
   absolute time. t0 is the wall time at which the DELETE's commit returned. From t0 it measures: the ``d`` record
   on the connector's topic (its timestamp: Connect's producer, CreateTime), the source mapping's tombstone and the
   chunk's tombstone (their timestamps: the worker's producer; and when this process received them), and the row
   gone from the LanceDB table, which a thread of this process reads every ``--index-poll-ms`` (the table's latest
   version each time) for the chunk ids still pending.
3. ACL changes: ``--acl-changes`` ``update documents set acl = ...`` of remaining rows at the same rate; t0 to the
   chunk record carrying the new ACL and to the index row's ``acl`` field equal to it.

Every timestamp is this machine's wall clock (the producers run here too), in milliseconds for Kafka's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cdc_stack import (
    ACLS,
    DRAIN_SECONDS,
    POLL_INTERVAL_MS,
    PREFIX,
    SETTLE_SECONDS,
    SPACES,
    Services,
    Stop,
    cpu_seconds,
    log,
    paragraphs,
    terminate,
)
from benchmarks.cdc_watch import IndexWatch, TopicWatch, loadavg, stats
from benchmarks.common import machine, save


def until(condition: Any, what: str, seconds: float, services: Services) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = condition()
        if found:
            return found
        services.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {seconds} s")
        time.sleep(0.5)


def schedule(count: int, rate: float, action: Any) -> list[tuple[float, float]]:
    """Run ``action(i)`` for i in range(count) at ``rate`` per second by absolute time; return (due, t0) pairs,
    t0 being the wall time at which the action (a committed statement) returned."""
    start = time.time() + 0.2
    out = []
    for i in range(count):
        due = start + i / rate
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        action(i)
        out.append((due, time.time()))
    return out


def py_spy(pid: int, path: Path, seconds: int) -> subprocess.Popen[bytes] | None:
    found = Path(sys.executable).with_name("py-spy")
    binary = str(found) if found.exists() else shutil.which("py-spy")
    if binary is None:
        return None
    return subprocess.Popen(
        [binary, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "200", "--format", "raw",
         "--output", str(path), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import psycopg

    from streamdedup.cli.topic_io import materialize
    from streamdedup.drivers.kafka.admin import ensure_topics
    from streamdedup.settings import Settings

    embedder = args.embedder
    if embedder is None:
        try:
            from streamdedup.index.embeddings import OnnxEmbedder

            OnnxEmbedder().embed(["a test"])
            embedder_used = "onnx (default)"
        except Exception as exc:
            log(f"the default embedder is unavailable ({exc!r}); using the tests' callable embedder")
            embedder = "callable:tests.integration.embedder:embedder"
            embedder_used = embedder
    else:
        embedder_used = embedder
    services = Services(root, args.poll_interval_ms, embedder)
    try:
        log(
            f"starting the broker on 127.0.0.1:{services.kafka_port} and PostgreSQL on 127.0.0.1:{services.pg_port}"
        )
        services.start_broker_and_postgres()
        settings = Settings(broker=services.broker, topic_prefix=PREFIX)
        db = psycopg.connect(
            f"host=127.0.0.1 port={services.pg_port} user=postgres dbname=bench", autocommit=True
        )
        services._stops.append(db.close)
        db.execute(
            "create table documents (id bigint primary key, space text not null, body text, acl text[], "
            "modified_at timestamptz not null default now(), title text)"
        )
        rng = random.Random(5)
        texts = paragraphs(args.rows)
        with db.cursor() as cursor:
            values = [
                (i + 1, rng.choice(SPACES), texts[i], rng.choice(ACLS), f"Document {i + 1}")
                for i in range(args.rows)
            ]
            cursor.executemany(
                "insert into documents (id, space, body, acl, title) values (%s, %s, %s, %s, %s)", values
            )
        log(
            f"{args.rows} rows inserted; starting the worker, the index writer ({embedder_used}) and Kafka Connect"
        )
        asyncio.run(ensure_topics(settings))
        services.start_worker()
        services.start_index()
        started = time.monotonic()
        services.start_connect()
        log(
            f"the connector streams ({time.monotonic() - started:.1f} s); waiting for the snapshot in the index"
        )

        def view_complete() -> Any:
            view = asyncio.run(materialize(settings))
            return view if len(view.mappings) == args.rows and len(view.chunks) == args.rows else None

        view = until(view_complete, "the worker's view did not hold every row", SETTLE_SECONDS, services)
        import lancedb

        def index_rows() -> int:
            if not (services.index_dir / "chunks.lance").exists():
                return 0
            table = lancedb.connect(services.index_dir).open_table("chunks")
            return int(table.count_rows())

        until(lambda: index_rows() == len(view.chunks), "the index did not hold every chunk", SETTLE_SECONDS,
              services)  # fmt: skip
        snapshot_seconds = time.monotonic() - started
        log(
            f"snapshot indexed: {len(view.chunks)} chunks, {snapshot_seconds:.1f} s after the connector started"
        )
        chunk_of: dict[int, str] = {}
        for row_id in range(1, args.rows + 1):
            chunks = view.mappings[f"pg:documents:{row_id}"]["chunks"]
            assert len(chunks) == 1, f"row {row_id} has {len(chunks)} chunks"
            chunk_id = chunks[0]["chunk_id"]
            assert view.chunks[chunk_id]["source_count"] == 1, f"row {row_id}'s chunk has other sources"
            chunk_of[row_id] = chunk_id
        ids = list(range(1, args.rows + 1))
        rng.shuffle(ids)
        deleted, changed = ids[: args.deletes], ids[args.deletes : args.deletes + args.acl_changes]

        topics = TopicWatch(settings)
        topics.start()
        index = IndexWatch(services.index_dir, args.index_poll_ms / 1000)
        index.start()
        services._stops.append(index.close)
        services._stops.append(topics.close)
        time.sleep(2)  # let the watchers settle

        pids = services.pids()
        phases: dict[str, Any] = {}
        for phase in ("deletes", "acl"):
            count = len(deleted) if phase == "deletes" else len(changed)
            seconds = count / args.rate
            profiles = {}
            if args.profile:
                for name in ("worker", "index"):
                    spy = py_spy(services.processes[name].pid, root / f"{phase}-{name}.txt", int(seconds) + 3)
                    if spy is not None:
                        profiles[name] = spy
            cpu_before, load_before, wall_before = cpu_seconds(pids), loadavg(), time.monotonic()
            poll_cpu_before = index.cpu_seconds
            log(f"{phase}: {count} at {args.rate:g}/s (load average {load_before})")
            new_acl = {row_id: [f"user:u{row_id}", "group:acl-change"] for row_id in changed}

            def act(i: int, phase: str = phase, new_acl: dict[int, list[str]] = new_acl) -> None:
                if phase == "deletes":
                    row_id = deleted[i]
                    index.expect_gone(chunk_of[row_id])
                    db.execute("delete from documents where id = %s", (row_id,))
                else:
                    row_id = changed[i]
                    index.expect_acl(chunk_of[row_id], new_acl[row_id])
                    db.execute("update documents set acl = %s where id = %s", (new_acl[row_id], row_id))

            timing = schedule(count, args.rate, act)
            until(lambda: index.pending() == 0, f"{phase}: the index did not show every change", DRAIN_SECONDS,
                  services)  # fmt: skip
            time.sleep(1.0)
            wall = time.monotonic() - wall_before
            cpu_after, load_after = cpu_seconds(pids), loadavg()
            for spy in profiles.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    spy.wait(seconds + 30)
            if index.error is not None:
                raise index.error
            rows = deleted if phase == "deletes" else changed
            records = topics.snapshot()
            phases[phase] = measure(phase, rows, timing, records, chunk_of, index, new_acl)
            phases[phase].update(
                {
                    "load_before": load_before,
                    "load_after": load_after,
                    "wall_seconds": wall,
                    "schedule_lag": stats([t0 - due for due, t0 in timing]),
                    "cpu_seconds": {k: cpu_after[k] - cpu_before.get(k, 0.0) for k in cpu_after},
                    "index_poller_cpu_seconds": index.cpu_seconds - poll_cpu_before,
                }
            )
            if profiles:
                phases[phase]["profiles"] = {
                    name: summarize_profile(root / f"{phase}-{name}.txt") for name in profiles
                }
            show(phase, phases[phase])
        return {
            "embedder": embedder_used,
            "rows": args.rows,
            "deletes": len(deleted),
            "acl_changes": len(changed),
            "rate": args.rate,
            "poll_interval_ms": args.poll_interval_ms,
            "index_poll_ms": args.index_poll_ms,
            "snapshot_seconds": snapshot_seconds,
            "index_reads": index.reads,
            "index_read_ms_mean": 1000 * index.read_seconds / max(1, index.reads),
            "partitions": settings.partitions,
            "fetch_wait": settings.fetch_wait,
            "phases": phases,
            "connector_properties": services.connector_properties(),
        }
    finally:
        log("stopping everything")
        services.close()


def measure(
    phase: str,
    rows: list[int],
    timing: list[tuple[float, float]],
    records: list[tuple[str, Any, Any, float, float]],
    chunk_of: dict[int, str],
    index: IndexWatch,
    new_acl: dict[int, list[str]],
) -> dict[str, Any]:
    """Match each change with the records and the index reading that show it; return the latencies in seconds."""
    first: dict[tuple[str, Any], tuple[float, float]] = {}
    for kind, key, value, stamp, received in records:
        if kind == "feed":
            if value is None:
                continue
            op = value.get("op")
            if phase == "deletes" and op == "d":
                first.setdefault(("feed", key), (stamp, received))
            elif phase == "acl" and op == "u":
                first.setdefault(("feed", key, json.dumps(sorted(value["after"]["acl"]))), (stamp, received))
        elif kind == "mapping" and (value is None) == (phase == "deletes"):
            first.setdefault(("mapping", key), (stamp, received))
        elif kind == "chunk":
            if phase == "deletes" and value is None:
                first.setdefault(("chunk", key), (stamp, received))
            elif phase == "acl" and value is not None:
                first.setdefault(("chunk", key, json.dumps(sorted(value["acl"]))), (stamp, received))
    series: dict[str, list[float]] = {}
    missing: dict[str, int] = {}

    def add(name: str, value: float | None) -> None:
        if value is None:
            missing[name] = missing.get(name, 0) + 1
        else:
            series.setdefault(name, []).append(value)

    for row_id, (_, t0) in zip(rows, timing, strict=False):
        chunk_id = chunk_of[row_id]
        if phase == "deletes":
            feed = first.get(("feed", row_id))
            mapping = first.get(("mapping", f"pg:documents:{row_id}"))
            chunk = first.get(("chunk", chunk_id))
            done = index.gone.get(chunk_id)
        else:
            acl = json.dumps(sorted(new_acl[row_id]))
            feed = first.get(("feed", row_id, acl))
            mapping = first.get(("mapping", f"pg:documents:{row_id}"))
            chunk = first.get(("chunk", chunk_id, acl))
            done = index.acl.get(chunk_id)
        add("t0 -> feed record", feed and feed[0] - t0)
        add("t0 -> mapping record", mapping and mapping[0] - t0)
        add("t0 -> mapping record received", mapping and mapping[1] - t0)
        add("t0 -> chunk record", chunk and chunk[0] - t0)
        add("t0 -> chunk record received", chunk and chunk[1] - t0)
        add("t0 -> index", None if done is None else done - t0)
        # The stages on the index's path, each from the end of the one before. A delete reaches the index with
        # the mapping's tombstone (the writer's view then holds no source of the chunk), whichever comes first.
        add("connector (t0 -> feed record)", feed and feed[0] - t0)
        if phase == "deletes":
            add("worker (feed record -> mapping record)", feed and mapping and mapping[0] - feed[0])
            add("worker (mapping record -> chunk record)", mapping and chunk and chunk[0] - mapping[0])
            trigger = min((r[0] for r in (mapping, chunk) if r), default=None)
        else:
            add("worker (feed record -> mapping record)", feed and mapping and mapping[0] - feed[0])
            add("worker (feed record -> chunk record)", feed and chunk and chunk[0] - feed[0])
            trigger = chunk and chunk[0]
        add(
            "index writer (trigger record -> index)",
            None if trigger is None or done is None else done - trigger,
        )
        if feed is not None and trigger is not None:
            add("worker (feed record -> trigger record)", trigger - feed[0])
    return {
        "latency": {name: stats(values) for name, values in series.items()},
        "missing": missing,
        "samples": {name: [round(v, 4) for v in values] for name, values in series.items()},
    }


def summarize_profile(path: Path) -> dict[str, Any]:
    """The heaviest leaf frames and a few named parts of a py-spy raw profile."""
    if not path.exists():
        return {}
    total = 0
    own: dict[str, int] = {}
    parts = {
        "idle (epoll / select / sleep / waits)": (
            "select.epoll",
            "EpollSelector.select",
            "time.sleep",
            "wait (",
        ),
        "lancedb": ("lancedb", "lance"),
        "rocksdb / view": ("rocksdict", "live_view"),
        "engine handlers": ("Engine.handle",),
        "aiokafka": ("aiokafka",),
    }
    hits = dict.fromkeys(parts, 0)
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        leaf = stack.rsplit(";", 1)[-1]
        own[leaf] = own.get(leaf, 0) + count
        for part, markers in parts.items():
            if any(m in stack for m in markers):
                hits[part] += count
    if not total:
        return {}
    top = sorted(own.items(), key=lambda kv: -kv[1])[:12]
    return {"samples": total, "parts": {p: h / total for p, h in hits.items()},
            "top_frames": [[frame, n / total] for frame, n in top]}  # fmt: skip


def show(phase: str, result: dict[str, Any]) -> None:
    log(
        f"{phase}: load average {result['load_before']} -> {result['load_after']}; missing {result['missing']}"
    )
    for name, s in result["latency"].items():
        if s:
            print(f"    {name:50s} p50 {1000 * s['p50']:7.0f} ms  p90 {1000 * s['p90']:7.0f}  "
                  f"p99 {1000 * s['p99']:7.0f}  max {1000 * s['max']:7.0f}  (n={s['n']})")  # fmt: skip
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in result["cpu_seconds"].items())
    print(f"    CPU seconds: {cpu}; index poller {result['index_poller_cpu_seconds']:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=480, help="rows in the table (default %(default)s)")
    parser.add_argument("--deletes", type=int, default=240, help="rows deleted (default %(default)s)")
    parser.add_argument("--acl-changes", type=int, default=200, help="ACL changes (default %(default)s)")
    parser.add_argument("--rate", type=float, default=20.0, help="changes per second (default %(default)s)")
    parser.add_argument("--poll-interval-ms", type=int, default=POLL_INTERVAL_MS,
                        help="the connector's poll.interval.ms (Debezium's default: 500)")  # fmt: skip
    parser.add_argument("--index-poll-ms", type=float, default=20.0,
                        help="how often the benchmark reads the index table (default %(default)s ms)")  # fmt: skip
    parser.add_argument(
        "--embedder", default=None, help="STREAMDEDUP_EMBEDDER of the index writer (default: onnx)"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy on the worker and the index writer")
    parser.add_argument("--no-save", action="store_true", help="print the results; do not write them")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (its logs)")
    args = parser.parse_args()
    if args.deletes + args.acl_changes > args.rows:
        parser.error("--rows must be at least --deletes plus --acl-changes")
    command = "python -m benchmarks.cdc_latency" + "".join(
        f" {flag} {value}"
        for flag, value, default in (
            ("--rows", args.rows, 480), ("--deletes", args.deletes, 240), ("--acl-changes", args.acl_changes, 200),
            ("--rate", args.rate, 20.0), ("--poll-interval-ms", args.poll_interval_ms, POLL_INTERVAL_MS),
            ("--index-poll-ms", args.index_poll_ms, 20.0), ("--embedder", args.embedder, None),
        )
        if value != default
    ) + (" --profile" if args.profile else "")  # fmt: skip
    signal.signal(signal.SIGTERM, terminate)
    run_info = {"machine": machine(), "command": command}
    root = Path(
        tempfile.mkdtemp(prefix="streamdedup-cdc-", dir="/var/tmp" if Path("/var/tmp").is_dir() else None)
    )
    root.chmod(0o755)  # PostgreSQL runs as another user when this runs as root: it must reach its directory
    began = time.monotonic()
    try:
        result = run(args, root)
    except (KeyboardInterrupt, Stop):
        log("interrupted; everything started was stopped")
        raise SystemExit(130) from None
    finally:
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    result["benchmark_seconds"] = time.monotonic() - began
    if not args.no_save:
        # The standard run is the section's; one with another poll interval is a comparison row beside it.
        name = (
            "cdc_latency"
            if args.poll_interval_ms == POLL_INTERVAL_MS
            else f"cdc_latency-poll{args.poll_interval_ms}"
        )
        print(save(name, result, run=run_info))


if __name__ == "__main__":
    main()
