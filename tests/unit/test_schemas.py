"""The shipped JSON Schemas accept every event the engine emits for the example, and reject broken ones."""

import json
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.contract.codec import encode_event, encode_output_line
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.model import AclEvent, DeleteEvent
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.review.decisions import decision_event, parse_decision
from streamdedup.store.memory import MemoryStore
from tests.helpers import run_embedded, upsert

EXAMPLE = Path(__file__).parents[2] / "examples" / "feed.jsonl"
SCHEMAS = {
    p.name: json.loads(p.read_text())
    for p in resources.files("streamdedup").joinpath("contract", "schemas").iterdir()
    if p.name.endswith(".json")
}
REGISTRY = Registry().with_resources(
    (name, Resource.from_contents(schema)) for name, schema in SCHEMAS.items()
)


def validator(name):
    schema = SCHEMAS[name]
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=REGISTRY)


def test_every_schema_is_valid_and_named_after_its_event():
    assert set(SCHEMAS) == {
        "document.v1.schema.json", "chunk.v2.schema.json", "mapping.v2.schema.json", "review.v1.schema.json",
        "audit.v1.schema.json", "dlq.v1.schema.json", "output-line.v1.schema.json", "decision.v1.schema.json",
    }  # fmt: skip
    for name in SCHEMAS:
        validator(name)


def test_example_input_lines_match_the_document_schema():
    document = validator("document.v1.schema.json")
    lines = [json.loads(line) for line in EXAMPLE.read_text().splitlines() if line.strip()]
    valid = [line for line in lines if document.is_valid(line)]
    assert len(valid) == len(lines) - 1  # the example has one malformed event on purpose
    assert "modified_at" not in next(line for line in lines if not document.is_valid(line))


def test_emitted_events_match_their_schemas(tmp_path):
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app, ["run", str(EXAMPLE), "--state", str(tmp_path / "state"), "--out", str(out), "--batch-size", "1"]
    )
    assert result.exit_code == 0, result.output
    line_schema = validator("output-line.v1.schema.json")
    topics = set()
    for line in out.read_text().splitlines():
        record = json.loads(line)
        errors = list(line_schema.iter_errors(record))
        assert errors == [], (record, errors[0].message)
        topics.add(record["topic"])
    assert topics == {"canonical-chunks", "source-mappings", "review", "audit", "dlq"}


def test_schemas_reject_what_the_contract_forbids(engine):
    chunk = validator("chunk.v2.schema.json")
    view = run_embedded(engine, [upsert("a", 1, ["some text"])])
    (value,) = view.chunks.values()
    assert chunk.is_valid(value)
    for broken in (
        {**value, "acl": "everyone"},
        {k: v for k, v in value.items() if k != "revision"},
        {**value, "members": []},
        {**value, "extra": 1},
    ):
        assert not chunk.is_valid(broken)
    mapping = validator("mapping.v2.schema.json")
    (m,) = view.mappings.values()
    assert mapping.is_valid(m)
    assert mapping.is_valid({**m, "title": "Setup", "uri": None})
    for broken in (
        {**m, "chunks": [{**m["chunks"][0], "relation": "similar"}]},
        {k: v for k, v in m.items() if k != "acl"},
        {k: v for k, v in m.items() if k != "uri"},
        {**m, "title": None},
        {**m, "schema": "streamdedup.mapping/v1"},
    ):
        assert not mapping.is_valid(broken)


@pytest.mark.parametrize(
    "event", [DeleteEvent(source_id="a", version=1), AclEvent(source_id="a", version=2, acl=("x",))]
)
def test_encoded_input_events_match_the_document_schema(event):
    assert validator("document.v1.schema.json").is_valid(json.loads(encode_event(event)))


def test_tombstone_lines_match_the_line_schema():
    record = json.loads(encode_output_line(Output("canonical-chunks", "a" * 64, None)))
    assert validator("output-line.v1.schema.json").is_valid(record)


def test_decisions_and_their_audit_records_match_their_schemas(engine):
    decision = validator("decision.v1.schema.json")
    audit = validator("audit.v1.schema.json")
    pair = ("a" * 64, "b" * 64)
    events = [
        decision_event("keep_separate", by="ana", pair=pair, reason="fact_conflict", note="two versions"),
        decision_event("merge", by="ana", pair=pair, reason="semantic"),
        decision_event("reopen", by="ana", pair=pair),
        decision_event("prefer", by="ana", source_id="a"),
        decision_event("boilerplate_strip", by="ana", collection="kb", line="Internal: do not forward"),
    ]
    runner = EmbeddedRunner(engine, MemoryStore())
    for event in events:
        assert decision.is_valid(event), event
        outputs = runner.process([parse_decision(event)], lambda o: None)
        audits = [o.value for o in outputs if o.topic == "audit"]
        assert audits and all(audit.is_valid(a) for a in audits), audits
    for broken in (
        {**events[0], "pair": [pair[0]]},
        {**events[0], "source_id": "a"},
        {**events[1], "reason": "acl_boundary"},
        {**events[3], "decision": "approve"},
        {k: v for k, v in events[3].items() if k != "by"},
    ):
        assert not decision.is_valid(broken), broken


def test_an_outdated_chunk_matches_the_chunk_schema():
    # Two versions of one document (docs/lineages.md): the text only the older holds is outdated by the newer.
    engine = Engine(EngineParams(lineage_rules='{"default": ["guide/v{version}"]}'))
    feed = [upsert("guide/v1", 1, ["the old wording of the guide"]), upsert("guide/v2", 1, ["the new one"])]
    view = run_embedded(engine, feed)
    chunk = validator("chunk.v2.schema.json")
    (old,) = [v for v in view.chunks.values() if v.get("current") is False]
    assert old["outdated_by"] == "guide/v2" and chunk.is_valid(old)
    assert all(chunk.is_valid(v) for v in view.chunks.values())
    for broken in (
        {k: v for k, v in old.items() if k != "outdated_by"},
        {**old, "current": True},
        {k: v for k, v in old.items() if k != "current"},
    ):
        assert not chunk.is_valid(broken)


def test_an_upsert_that_names_its_lineage_matches_the_document_schema():
    document = validator("document.v1.schema.json")
    value = json.loads(encode_event(upsert("policy-v2", 1, ["text"])))
    assert document.is_valid({**value, "lineage": "travel-policy", "lineage_version": "2-final"})
    assert document.is_valid({**value, "lineage": "travel-policy"})
    assert not document.is_valid({**value, "lineage_version": "2-final"})
    assert not document.is_valid({**value, "lineage": ""})
