"""A real database's changes through Kafka Connect and Debezium into the worker, deduplicated end to end.

PostgreSQL (deploy/postgres/postgres.sh), Kafka Connect with the Debezium PostgreSQL connector
(deploy/connect/connect.sh) and the session's broker; the worker reads the connector's topic through a feeds
file. Three tables go to one topic (Kafka Connect's RegexRouter): ``documents`` and ``pages`` are mapped, ``notes``
is not. Every change the test makes is also written down, independently of the mapping, as the contract event it
means; the worker's view must equal an embedded run of those events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from streamdedup.contract.codec import parse_timestamp
from streamdedup.core.engine import Engine
from streamdedup.core.messages import STAGES
from streamdedup.core.model import AclEvent, DeleteEvent, InputEvent, SourceAttrs, UpsertEvent
from streamdedup.core.output_view import View
from streamdedup.drivers.kafka.admin import consumer_lag
from streamdedup.settings import Settings
from streamdedup.testing.random_feeds import ParagraphPool
from tests.helpers import embedded_review_keys, run_embedded, unflagged
from tests.integration.harness import REPO, Deployment, Worker, dlq_records, free_port, until

pytestmark = pytest.mark.integration

POSTGRES = REPO / "deploy" / "postgres" / "postgres.sh"
CONNECT = REPO / "deploy" / "connect" / "connect.sh"
SPACES = ("eng", "sales", "support")
ACLS = (["group:all"], ["group:eng"], ["group:sales"], ["group:eng", "user:ana"], ["group:hr"])
MAX_EVENT_BYTES = 200_000  # the worker's bound on one record, so that a huge row is a dead letter
START = datetime(2026, 11, 1, tzinfo=timezone.utc)

TABLES = """
create table documents (
    id bigint primary key, space text not null, body text, acl text[], modified_at timestamptz not null,
    title text, authority int not null default 0);
alter table documents alter column body set storage external;  -- a long body is stored out of line, uncompressed
create table pages (slug text primary key, html text, readers jsonb, updated timestamptz not null);
alter table pages replica identity full;  -- updates carry the whole row before and after
create table notes (id bigint primary key, body text);
"""


@pytest.fixture(scope="module")
def postgres() -> Iterator[dict[str, str]]:
    """A PostgreSQL cluster of the test module's own, with logical decoding."""
    env = {**os.environ, "PG_PORT": str(free_port()), "PG_DB": "cdc", "PG_KEEP_DATA": "0"}
    started = subprocess.run(
        [str(POSTGRES), "start"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert started.returncode == 0, f"PostgreSQL did not start:\n{started.stderr}"
    try:
        yield env
    finally:
        subprocess.run([str(POSTGRES), "wipe"], env=env, capture_output=True, timeout=120, check=False)


class Database:
    """The test's tables, and the contract events that each change it makes means."""

    def __init__(self, env: dict[str, str]) -> None:
        self.connection = psycopg.connect(
            f"host=127.0.0.1 port={env['PG_PORT']} user=postgres dbname={env['PG_DB']}", autocommit=True
        )
        self.events: list[InputEvent] = []
        self.documents: dict[int, dict[str, Any]] = {}
        self.pages: dict[str, dict[str, Any]] = {}
        self.hostile: list[str] = []  # what each dead letter must say, in the order made
        self.clock = 0

    def sql(self, statement: str, *args: Any) -> None:
        self.connection.execute(statement, args or None)

    def _version(self) -> int:
        self.clock += 1
        return self.clock

    def _moment(self) -> str:
        return (START + timedelta(minutes=self.clock)).isoformat()

    def put_document(self, row_id: int, space: str, body: str, acl: list[str], authority: int = 0) -> None:
        version = self._version()
        row = {"id": row_id, "space": space, "body": body, "acl": acl, "modified_at": self._moment(),
               "title": f"Document {row_id}", "authority": authority}  # fmt: skip
        self.sql(
            "insert into documents values (%s, %s, %s, %s, %s, %s, %s) on conflict (id) do update set "
            "space = excluded.space, body = excluded.body, acl = excluded.acl, modified_at = excluded.modified_at, "
            "title = excluded.title, authority = excluded.authority",
            row_id, space, body, acl, row["modified_at"], row["title"], authority,
        )  # fmt: skip
        self.documents[row_id] = row
        self.events.append(
            UpsertEvent(
                source_id=f"pg:documents:{row_id}",
                version=version,
                text=body,
                collection=space,
                attrs=SourceAttrs(
                    acl=tuple(sorted(set(acl))),
                    modified_at=parse_timestamp(row["modified_at"]),
                    authority=authority,
                    uri=f"https://wiki.example/{space}/{row_id}",
                    title=row["title"],
                    metadata={"space": space},
                ),
            )
        )

    def change_acl(self, row_id: int, acl: list[str]) -> None:
        self.sql("update documents set acl = %s where id = %s", acl, row_id)
        self.documents[row_id]["acl"] = acl
        self.events.append(
            AclEvent(source_id=f"pg:documents:{row_id}", version=self._version(), acl=tuple(sorted(set(acl))))
        )

    def delete_document(self, row_id: int) -> None:
        self.sql("delete from documents where id = %s", row_id)
        del self.documents[row_id]
        self.events.append(DeleteEvent(source_id=f"pg:documents:{row_id}", version=self._version()))

    def put_page(self, slug: str, html: str, readers: list[str]) -> None:
        version = self._version()
        updated = self._moment()
        self.sql(
            "insert into pages values (%s, %s, %s, %s) on conflict (slug) do update set html = excluded.html, "
            "readers = excluded.readers, updated = excluded.updated",
            slug, html, json.dumps(readers), updated,
        )  # fmt: skip
        self.pages[slug] = {"html": html, "readers": readers}
        self.events.append(
            UpsertEvent(
                source_id=f"pg:pages:{slug}",
                version=version,
                text=html,
                content_type="text/html",
                collection="pages",
                attrs=SourceAttrs(acl=tuple(sorted(set(readers))), modified_at=parse_timestamp(updated)),
            )
        )

    def change_readers(self, slug: str, readers: list[str]) -> None:
        self.sql("update pages set readers = %s where slug = %s", json.dumps(readers), slug)
        self.pages[slug]["readers"] = readers
        self.events.append(
            AclEvent(source_id=f"pg:pages:{slug}", version=self._version(), acl=tuple(sorted(set(readers))))
        )

    def delete_page(self, slug: str) -> None:
        self.sql("delete from pages where slug = %s", slug)
        del self.pages[slug]
        self.events.append(DeleteEvent(source_id=f"pg:pages:{slug}", version=self._version()))

    def hostile_rows(self, first_id: int) -> None:
        """A row of each kind the mapping cannot use; each must become one dead letter naming why."""
        moment = self._moment()
        self.sql(
            "insert into documents values (%s, 'eng', null, '{group:eng}', %s, 't', 0)", first_id, moment
        )
        self.hostile.append("body: is NULL")
        self.sql(
            "insert into documents values (%s, 'eng', 'A text.', '{\"\"}', %s, 't', 0)", first_id + 1, moment
        )
        self.hostile.append("acl: must be a list of non-empty principal strings")
        self.sql("insert into documents values (%s, 'eng', %s, '{group:eng}', %s, 't', 0)",
                 first_id + 2, "word " * (MAX_EVENT_BYTES // 4), moment)  # fmt: skip
        self.hostile.append(f"exceeds the limit of {MAX_EVENT_BYTES} bytes")
        self.sql(
            "insert into pages values (%s, '<p>Hi</p>', '{\"group\": \"eng\"}', %s)",
            f"bad-{first_id}",
            moment,
        )
        self.hostile.append("readers: must be a list of non-empty principal strings")
        self.sql("insert into notes values (%s, 'A note no feed maps.')", first_id)
        self.hostile.append("source.table: no feed maps table 'public.notes'")

    def close(self) -> None:
        self.connection.close()


class Connect:
    """A Kafka Connect worker with the Debezium PostgreSQL connector on the test's tables."""

    def __init__(self, root: Path, broker: str, pg: dict[str, str], topic: str) -> None:
        self.name = f"it-{uuid.uuid4().hex[:8]}"
        slot = self.name.replace("-", "_")
        self.config = root / "connector.properties"
        self.config.write_text(
            "\n".join(
                [
                    f"name={self.name}",
                    "connector.class=io.debezium.connector.postgresql.PostgresConnector",
                    "tasks.max=1",
                    "database.hostname=127.0.0.1",
                    f"database.port={pg['PG_PORT']}",
                    "database.user=postgres",
                    f"database.dbname={pg['PG_DB']}",
                    "plugin.name=pgoutput",
                    f"slot.name={slot}",
                    f"publication.name={slot}",
                    "publication.autocreate.mode=filtered",
                    f"topic.prefix={self.name}",
                    "table.include.list=public.documents,public.pages,public.notes",
                    "snapshot.mode=initial",
                    "poll.interval.ms=50",
                    "tombstones.on.delete=true",
                    "unavailable.value.placeholder=__debezium_unavailable_value",
                    # every table's changes go to one topic, in which the feeds tell the tables apart
                    "transforms=route",
                    "transforms.route.type=org.apache.kafka.connect.transforms.RegexRouter",
                    "transforms.route.regex=.*",
                    f"transforms.route.replacement={topic}",
                    "topic.creation.default.replication.factor=1",
                    "topic.creation.default.partitions=3",
                    "",
                ]
            )
        )
        self.env = {
            **os.environ,
            "CONNECT_PORT": str(free_port()),
            "CONNECT_HOME_DIR": str(root / "connect"),
            "KAFKA_BOOTSTRAP": broker.removeprefix("kafka://"),
            "CONNECT_SCHEMAS_ENABLE": "true",  # the wrapped form, five times the bytes
            "CONNECT_KEEP_DATA": "1",
        }

    def script(self, *args: str, timeout: float = 900) -> None:
        result = subprocess.run(
            [str(CONNECT), *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert result.returncode == 0, f"connect.sh {' '.join(args)} failed:\n{result.stderr[-4000:]}"

    def start(self) -> None:
        self.script("start", str(self.config))
        self.script("wait-streaming", self.name, timeout=600)

    def stop(self) -> None:
        self.script("stop", timeout=180)

    def wipe(self) -> None:
        subprocess.run([str(CONNECT), "wipe"], env=self.env, capture_output=True, timeout=180, check=False)


def feeds_file(path: Path, topic: str) -> Path:
    path.write_text(
        f"""
[[feed]]
name = "documents"
topic = "{topic}"
table = "public.documents"
source_id = "pg:{{table}}:{{id}}"
text = "body"
acl = "acl"
modified_at = "modified_at"
collection = "{{space}}"
authority = "authority"
uri = "https://wiki.example/{{space}}/{{id}}"
title = "title"
metadata = ["space"]

[[feed]]
name = "pages"
topic = "{topic}"
table = "public.pages"
source_id = "pg:pages:{{slug}}"
text = "html"
content_type = "text/html"
acl = "readers"
modified_at = "updated"
collection = "pages"
"""
    )
    return path


def documents_text(pool: ParagraphPool, rng: random.Random, long: bool = False) -> str:
    count = rng.randint(7, 9) if long else rng.randint(1, 3)
    return "\n\n".join(rng.choice(pool.texts) for _ in range(count))


def page_html(pool: ParagraphPool, rng: random.Random, title: str) -> str:
    paragraphs = "".join(f"<p>{rng.choice(pool.texts)}</p>" for _ in range(rng.randint(1, 3)))
    return f"<html><body><h1>{title}</h1>{paragraphs}</body></html>"


def feed_records(deployment: Deployment, topic: str, detail: bool = False) -> list[Any]:
    from streamdedup.drivers.kafka.admin import read_to_end

    async def read() -> list[Any]:
        return [
            (key, value, p, o) if detail else (key, value)
            async for _, p, o, key, value, _ in read_to_end(deployment.settings, [topic])
        ]

    return asyncio.run(read())


def send_again(deployment: Deployment, topic: str, last: int) -> None:
    """Send the last records of every partition of ``topic`` again, to the same partition, as a connector
    restarted after a crash does."""
    from aiokafka import AIOKafkaProducer

    records = feed_records(deployment, topic, detail=True)

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=deployment.settings.bootstrap_servers, acks="all")
        await producer.start()
        try:
            for partition in {p for _, _, p, _ in records}:
                mine = [(k, v) for k, v, p, _ in records if p == partition]
                for key, value in mine[-last:]:
                    await producer.send_and_wait(topic, value, key=key, partition=partition)
        finally:
            await producer.stop()

    asyncio.run(send())


def events_in(worker: Worker) -> float:
    """Return the records the worker read from its input topics (0 while its web server is not up yet)."""
    try:
        return worker.metrics().get("streamdedup_events_in_total", 0.0)
    except OSError:
        return 0.0


def without_versions(view: View) -> Any:
    data = json.loads(view.compacted(with_revision=False))
    for mapping in data["source-mappings"].values():
        mapping.pop("version")
    return data


def caught_up(deployment: Deployment, topic: str, expected: Any, workers: list[Worker]) -> bool:
    for worker in workers:
        if not worker.stopped and worker.process.poll() is not None:
            raise AssertionError(f"worker exited with {worker.process.returncode}:\n{worker.tail()}")
    if lag(deployment, topic) != 0:
        return False
    return bool(without_versions(deployment.view()) == expected)


def lag(deployment: Deployment, topic: str) -> int:
    topics = [topic, *(deployment.names.stage(s) for s in STAGES)]
    return int(asyncio.run(consumer_lag(deployment.settings, topics)))


def difference(deployment: Deployment, topic: str, expected: Any, worker: Worker) -> str:
    """Say how the worker's view differs from the expected one (for a failure message)."""
    found = without_versions(deployment.view())
    lines = [f"lag {lag(deployment, topic)}"]
    for table in ("canonical-chunks", "source-mappings"):
        want, got = expected[table], found[table]
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])
        lines.append(
            f"{table}: {len(want)} expected, {len(got)} found; missing {missing[:5]}, extra {extra[:5]}"
        )
        for key in changed[:2]:
            lines.append(
                f"  {key}: expected {json.dumps(want[key])[:600]}\n  found {json.dumps(got[key])[:600]}"
            )
    extra = sorted(set(found["source-mappings"]) - set(expected["source-mappings"]))[:3]
    for source_id in extra:
        row_id = source_id.rsplit(":", 1)[-1]
        for record in feed_records(deployment, topic, detail=True):
            key, value, partition, offset = record
            if key and json.loads(key)["payload"].get("id") == int(row_id):
                change = json.loads(value)["payload"] if value else None
                what = (change["op"], change["source"]["lsn"]) if change else "tombstone"
                lines.append(f"  {source_id}: {partition}/{offset} {what}")
    return "\n".join(lines) + "\n" + worker.tail(15)


def test_a_table_streamed_by_debezium_is_deduplicated_as_its_contract_events_are(
    deployment: Deployment, postgres: dict[str, str], kafka_broker: str, tmp_path: Path
) -> None:
    rng = random.Random(48)
    pool = ParagraphPool(rng, families=12, words=60)
    topic = f"{deployment.prefix}changes"
    db = Database(postgres)
    db.connection.execute(TABLES)
    connect = Connect(tmp_path, kafka_broker, postgres, topic)
    feeds = feeds_file(tmp_path / "feeds.toml", topic)
    worker_env = {"STREAMDEDUP_FEEDS": str(feeds), "STREAMDEDUP_MAX_EVENT_BYTES": str(MAX_EVENT_BYTES)}
    try:
        # The snapshot: documents with copies across spaces, near copies, fact variants and ACL differences.
        for row_id in range(1, 241):
            db.put_document(row_id, rng.choice(SPACES), documents_text(pool, rng, long=row_id % 10 == 0),
                            rng.choice(ACLS), authority=row_id % 3)  # fmt: skip
        for n in range(30):
            db.put_page(f"page-{n}", page_html(pool, rng, f"Page {n % 7}"), rng.choice(ACLS))
        db.hostile_rows(9000)
        # The worker starts before the connector has made its topic, and reads it once it exists.
        worker = deployment.start_worker(name="a", env=worker_env)
        connect.start()
        # Live: inserts, text updates, ACL changes (of long, out-of-line texts too), deletes.
        for row_id in range(241, 281):
            db.put_document(row_id, rng.choice(SPACES), documents_text(pool, rng), rng.choice(ACLS))
        for row_id in rng.sample([i for i in sorted(db.documents) if i % 10], 30):
            row = db.documents[row_id]
            db.put_document(row_id, row["space"], documents_text(pool, rng), row["acl"], row["authority"])
        for row_id in [10, 20, 30, 40, 50, *rng.sample(sorted(db.documents), 15)]:
            db.change_acl(row_id, rng.choice([a for a in ACLS if a != db.documents[row_id]["acl"]]))
        for row_id in rng.sample(sorted(db.documents), 20):
            db.delete_document(row_id)
        db.put_page("page-3", page_html(pool, rng, "Page 3 again"), ["group:all"])
        for n in (5, 6, 7):  # the before image differs in the ACL column alone: an acl event
            db.change_readers(
                f"page-{n}", ["group:hr"] if db.pages[f"page-{n}"]["readers"] != ["group:hr"] else ["*"]
            )
        db.delete_page("page-4")
        db.hostile_rows(9100)
        # The worker is killed mid-stream and restarted on its data.
        until(
            lambda: events_in(worker) > 290,
            "the worker did not read the live changes",
            300,
            worker.tail,
        )
        worker.kill()
        for row_id in rng.sample(sorted(db.documents), 20):
            db.change_acl(row_id, rng.choice([a for a in ACLS if a != db.documents[row_id]["acl"]]))
        restarted = deployment.start_worker(data_dir=worker.data_dir, name="a2", env=worker_env)
        # Kafka Connect restarts. Killed, it sends again what it had not recorded as sent: the same records,
        # which are sent again here (the last ones of every partition) as it would.
        for row_id in rng.sample(sorted(db.documents), 10):
            db.delete_document(row_id)
        connect.stop()
        send_again(deployment, topic, last=30)
        for row_id in range(281, 301):
            db.put_document(row_id, rng.choice(SPACES), documents_text(pool, rng), rng.choice(ACLS))
        connect.start()
        deleted = sorted(set(range(1, 281)) - set(db.documents))[:5]
        for row_id in deleted:  # a deleted row inserted again
            db.put_document(row_id, "eng", documents_text(pool, rng), ["group:eng"])

        expected = run_embedded(Engine(Settings().engine_params()), db.events)
        want = without_versions(expected)
        workers = [worker, restarted]
        until(
            lambda: caught_up(deployment, topic, want, workers),
            "the worker's view did not reach the embedded run's",
            600,
            lambda: difference(deployment, topic, want, restarted),
        )
        view = deployment.view()
        assert len(view.mappings) == len(db.documents) + len(db.pages)
        assert len(view.chunks) == len(expected.chunks) > 50
        # Every flag the embedded run raises is accounted for (which partner a fact conflict names depends on the
        # order in which texts arrive: tests/helpers.py, unflagged).
        flags = embedded_review_keys(Engine(Settings().engine_params()), db.events)
        assert {reason for reason, _ in flags} >= {"fact_conflict", "acl_boundary"}
        assert unflagged(flags, deployment.review_keys()) == []

        # Every hostile row is one dead letter (a record read again after a restart is the same record) that
        # names the reason, with the connector's key and where the record was.
        letters = dlq_records(deployment)
        distinct = {(letter["key"], letter["value"]): letter for letter in letters}
        assert len(distinct) == len(db.hostile)
        for words in set(db.hostile):
            found = [letter for letter in distinct.values() if words in letter["headers"]["error"]]
            assert len(found) == db.hostile.count(words), (words, [x["headers"]["error"] for x in letters])
        for letter in distinct.values():
            assert letter["headers"]["origin-topic"] == topic
            assert int(letter["headers"]["origin-partition"]) in range(3)
            assert int(letter["headers"]["origin-offset"]) >= 0
            assert json.loads(letter["key"])["payload"].keys() & {"id", "slug"}
        # An ACL change of a long text came as Debezium's placeholder for an unchanged out-of-line value.
        assert any(
            b"__debezium_unavailable_value" in (value or b"") for _, value in feed_records(deployment, topic)
        )

        # The same tables deleted row by row leave no chunk, and an index of them ends empty.
        into = tmp_path / "index"
        index_env = {**deployment.env, "STREAMDEDUP_EMBEDDER": "callable:tests.integration.embedder:embedder",
                     "STREAMDEDUP_TEST_EMBED_LOG": str(tmp_path / "embedded.jsonl")}  # fmt: skip
        indexed = subprocess.run([*INDEX, f"lancedb://{into}"], env={**os.environ, **index_env}, cwd=REPO,
                                 capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
        assert indexed.returncode == 0, indexed.stderr
        assert len(index_rows(into)) == len(view.chunks)
        for row_id in sorted(db.documents):
            db.delete_document(row_id)
        for slug in sorted(db.pages):
            db.delete_page(slug)
        until(
            lambda: caught_up(deployment, topic, {"canonical-chunks": {}, "source-mappings": {}}, workers),
            "every chunk tombstoned",
            600,
            restarted.tail,
        )
        indexed = subprocess.run([*INDEX, f"lancedb://{into}"], env={**os.environ, **index_env}, cwd=REPO,
                                 capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
        assert indexed.returncode == 0, indexed.stderr
        assert index_rows(into) == {}
    finally:
        connect.wipe()
        db.close()


INDEX = [sys.executable, "-m", "streamdedup.cli", "index", "--into"]


def index_rows(into: Path) -> dict[str, Any]:
    from streamdedup.index.lancedb import LanceDBSink

    sink = LanceDBSink(into, 64)
    try:
        return {chunk_id: dataclasses.asdict(row) for chunk_id, row in sink.rows(sink.chunk_ids()).items()}
    finally:
        sink.close()


def test_a_feed_cannot_read_a_topic_of_the_deployment_itself(deployment: Deployment, tmp_path: Path) -> None:
    feeds = feeds_file(tmp_path / "feeds.toml", deployment.names.documents)
    result = subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", "worker", "--data-dir", str(tmp_path / "data")],
        env={**os.environ, **deployment.env, "STREAMDEDUP_FEEDS": str(feeds)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode != 0
    assert f"the feeds file names {deployment.names.documents}, a topic of the deployment itself" in " ".join(
        result.stderr.split()
    )
