import json
from pathlib import Path

from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.contract.codec import encode_event
from streamdedup.core.messages import Output
from streamdedup.core.model import DeleteEvent
from streamdedup.core.output_view import View

EXAMPLE = Path(__file__).parents[2] / "examples" / "feed.jsonl"
runner = CliRunner()


def run(*args, **env):
    return runner.invoke(app, [str(a) for a in args], env=env or None)


def test_run_prints_a_summary_and_writes_outputs(tmp_path):
    out = tmp_path / "out.jsonl"
    result = run("run", EXAMPLE, "--state", tmp_path / "state", "--out", out)
    assert result.exit_code == 0, result.output
    for label in (
        "events",
        "dead letters",
        "exact copies",
        "near copies",
        "canonical chunks",
        "review flags",
        "embedding calls saved",
    ):
        assert label in result.output
    assert "acl_boundary 1, fact_conflict 2" in result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {line["topic"] for line in lines} >= {"canonical-chunks", "source-mappings", "review", "dlq"}


def test_run_again_on_the_same_state_continues(tmp_path):
    state, out = tmp_path / "state", tmp_path / "out.jsonl"
    assert run("run", EXAMPLE, "--state", state, "--out", out).exit_code == 0
    lines = len(out.read_text().splitlines())
    # the same feed again changes nothing: every version is already applied
    again = run("run", EXAMPLE, "--state", state, "--out", out)
    assert again.exit_code == 0
    assert len(out.read_text().splitlines()) == lines + 1  # only the malformed line is dead-lettered again
    more = tmp_path / "more.jsonl"
    more.write_bytes(encode_event(DeleteEvent(source_id="web:help/refunds", version=9)) + b"\n")
    assert run("run", more, "--state", state, "--out", out).exit_code == 0
    tail = [json.loads(line) for line in out.read_text().splitlines()[lines + 1 :]]
    assert {"topic": "source-mappings", "key": "web:help/refunds", "value": None} in tail


def test_a_new_state_refuses_to_append_to_another_states_outputs(tmp_path):
    out = tmp_path / "out.jsonl"
    assert run("run", EXAMPLE, "--state", tmp_path / "one", "--out", out).exit_code == 0
    size = out.stat().st_size
    result = run("run", EXAMPLE, "--state", tmp_path / "two", "--out", out)
    assert result.exit_code == 1 and "would mix two histories" in " ".join(result.output.split())
    assert out.stat().st_size == size


def test_state_refuses_other_parameters(tmp_path):
    state = tmp_path / "state"
    assert run("run", EXAMPLE, "--state", state, "--out", tmp_path / "o").exit_code == 0
    result = run("--set", "threshold=0.9", "run", EXAMPLE, "--state", state, "--out", tmp_path / "o")
    assert result.exit_code == 1
    assert "threshold=0.8 (settings say 0.9)" in " ".join(result.output.split())


def test_inspect_source_and_chunk(tmp_path):
    state = tmp_path / "state"
    assert run("run", EXAMPLE, "--state", state, "--out", tmp_path / "o").exit_code == 0
    result = run("inspect", "--state", state, "--source", "confluence:eng/cli-setup", "--json")
    assert result.exit_code == 0, result.output
    source = json.loads(result.output)
    (position,) = source["chunks"]
    assert position["relation"] == "near"
    chunk = json.loads(run("inspect", "--state", state, "--chunk", position["chunk_id"], "--json").output)
    assert chunk["canonical"]["source_id"] == "github:acme/cli/README.md"
    assert [m["relation"] for m in chunk["members"]] == ["canonical", "near"]
    assert chunk["members"][1]["readers"] == ["eng"]
    tables = run("inspect", "--state", state, "--chunk", position["chunk_id"])
    assert tables.exit_code == 0 and "near" in tables.output
    missing = run("inspect", "--state", state, "--source", "nope")
    assert missing.exit_code == 1 and "no source 'nope'" in missing.output


def test_config_prints_banding_and_settings(tmp_path):
    result = run("config", STREAMDEDUP_THRESHOLD="0.9")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "bands (b) │ 12" in text and "rows per band (r) │ 10" in text
    assert "candidate probability at J = t = 0.9" in text
    assert "STREAMDEDUP_THRESHOLD" in text


def test_bad_settings_and_arguments_fail_clearly(tmp_path):
    assert run("--set", "threshold=1.5", "config").exit_code == 2
    assert run("inspect", "--state", tmp_path).exit_code == 2
    result = run("run", EXAMPLE, "--out", tmp_path / "o")
    assert result.exit_code == 2 and "no state directory" in result.output


def test_any_setting_can_be_set_for_one_command_and_a_wrong_name_is_named():
    result = run("--set", "shingle-size=3", "-s", "canonical_policy=source_id,length", "config")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "shingle_size │ 3 │" in text and "canonical_policy │ source_id,length │" in text
    wrong = run("--set", "treshold=0.9", "config")
    assert wrong.exit_code == 2 and "did you mean threshold" in " ".join(wrong.output.split())


def test_an_error_is_printed_as_it_is_said_brackets_included(monkeypatch):
    import streamdedup.cli.evaluate
    from streamdedup.errors import ConfigurationError

    def missing(*_args, **_kwargs):
        raise ConfigurationError("retrieval figures need bm25s: pip install 'streamdedup[eval]'")

    monkeypatch.setattr(streamdedup.cli.evaluate, "eval_command", missing)
    result = run("eval", EXAMPLE)
    assert result.exit_code == 1
    assert "pip install 'streamdedup[eval]'" in " ".join(result.output.split())


def test_run_with_workers_writes_what_a_run_in_one_process_writes(tmp_path):
    views = []
    for workers in (1, 2):
        out = tmp_path / f"out-{workers}.jsonl"
        result = run(
            "run", EXAMPLE, "--state", tmp_path / f"state-{workers}", "--out", out, "--workers", workers
        )
        assert result.exit_code == 0, result.output
        assert "acl_boundary 1, fact_conflict 2" in result.output
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        views.append(View().apply_all(Output(**line) for line in lines).compacted(with_revision=False))
    assert views[0] == views[1]
    again = run("run", EXAMPLE, "--state", tmp_path / "state-2", "--out", tmp_path / "out-2.jsonl")
    assert again.exit_code == 1 and "--workers 2" in " ".join(again.output.split())
