"""The seeds' policy case as one lineage: the files ``policy-v2``, ``policy-v2-final`` and
``policy-v2-final-signed`` (PDF and DOCX) of a file share, run with ``streamdedup run`` and a lineage rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.core.messages import Output
from streamdedup.core.normalize import normalize
from streamdedup.core.output_view import View
from streamdedup.testing.policy_files import Policy, write_policies

RULES = json.dumps({"share": ["policies/{name}-v{version}.{kind}"]})
SIGNED = {"policies/policy-v2-final-signed.pdf", "policies/policy-v2-final-signed.docx"}
FINAL = {"policies/policy-v2-final.pdf", "policies/policy-v2-final.docx"}


def _run(folder: Path, state: Path, out: Path, *settings: str) -> View:
    options = [o for s in ("lineage_rules=" + RULES, *settings) for o in ("--set", s)]
    result = CliRunner().invoke(app, [*options, "run", str(folder), "--state", str(state), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return View().apply_all(Output(**json.loads(line)) for line in out.read_text().splitlines())


def _chunk_of(view: View, text: str) -> dict:
    """The one chunk whose text holds ``text`` (a chunk holds a few paragraphs)."""
    (chunk,) = [c for c in view.chunks.values() if normalize(text) in normalize(c["text"])]
    return chunk


@pytest.fixture
def share(tmp_path: Path) -> tuple[Path, Policy]:
    return tmp_path / "share", write_policies(tmp_path / "share" / "policies")


@pytest.mark.parametrize("threshold", ["0.8", "0.95"])
def test_the_signed_version_is_current_and_deleting_it_makes_the_final_one_current(
    tmp_path, share, threshold
):
    # At 0.95 the edited paragraph is not a near copy of its edit: v2's wording is a chunk of its own, which only
    # v2 holds; at the default 0.8 it is a near member of the edit's chunk, whose text is the newest wording.
    folder, policy = share
    state, out = tmp_path / "state", tmp_path / "out.jsonl"
    view = _run(folder, state, out, f"threshold={threshold}")
    signed_chunks = {e["chunk_id"] for s in SIGNED for e in view.mappings[s]["chunks"]}
    assert signed_chunks and all(view.chunks[c].get("current", True) for c in signed_chunks)
    outdated = [c for c in view.chunks.values() if c.get("current") is False]
    edited = _chunk_of(view, policy.after)
    assert edited.get("current", True)
    if threshold == "0.95":
        (only_v2,) = outdated
        assert normalize(policy.before) in normalize(only_v2["text"])
        assert only_v2["outdated_by"] in SIGNED
        assert {s["source_id"] for s in only_v2["sources"]} == {
            "policies/policy-v2.pdf",
            "policies/policy-v2.docx",
        }
    else:
        assert outdated == []  # v2's wording is served as the current one's, never on its own
        assert {m["content_hash"] for m in edited["members"] if m["relation"] == "near"}
    assert _chunk_of(view, policy.signature).get("current", True)

    for name in SIGNED:  # the signed version is deleted
        (folder / name).unlink()
    view = _run(folder, state, out, f"threshold={threshold}")
    assert not any(s in view.mappings for s in SIGNED)
    final_chunks = {e["chunk_id"] for s in FINAL for e in view.mappings[s]["chunks"]}
    assert final_chunks and all(view.chunks[c].get("current", True) for c in final_chunks)
    assert not any(normalize(policy.signature) in normalize(c["text"]) for c in view.chunks.values())
    if threshold == "0.95":
        assert _chunk_of(view, policy.before)["outdated_by"] in FINAL


def test_without_a_rule_no_chunk_is_outdated(tmp_path, share):
    folder, _ = share
    result = CliRunner().invoke(
        app, ["run", str(folder), "--state", str(tmp_path / "state"), "--out", str(tmp_path / "out.jsonl")]
    )
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert lines and not any('"current"' in line or '"outdated_by"' in line for line in lines)
