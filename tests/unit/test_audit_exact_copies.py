"""Exact-copy merges are audited only when asked for (STREAMDEDUP_AUDIT_EXACT_COPIES), by every driver alike.

Off (the default), no ``audit`` ``merge``/``exact`` record is emitted, and every other record is as it was; on, the
outputs are those of before, with one such record per position that became a copy of a known text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamdedup.contract.codec import encode_output_line
from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.model import DeleteEvent, InputEvent
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.drivers.jsonl import opened_state
from streamdedup.drivers.kafka.metrics import Metrics
from streamdedup.drivers.kafka.worker import StageWorker
from streamdedup.drivers.simulation import SimulationDriver
from streamdedup.settings import Settings
from streamdedup.store.memory import MemoryStore
from tests.helpers import upsert

_WORDS = (
    "Rotate the signing keys every ninety days and record each rotation in the security log so that the "
    "auditors can follow who changed which key when and why the previous key was retired from service at the "
    "end of its period without any gap in the signatures of the release artefacts"
)
HELP = _WORDS
HELP_NEAR = _WORDS.replace("artefacts", "binaries")  # the last word of 50: Jaccard 45/47, a near copy
INSTALL = "Install the command line tools with the package manager of your system and run the setup once."
OLD = "The old office on the third floor closes for good at the end of the month, moving to the new site."


def feed() -> list[InputEvent]:
    """Exact copies (two positions), a near copy, a deletion that retracts and one that moves a canonical."""
    return [
        upsert("help-eng", 1, [HELP, INSTALL], day=2),
        upsert("help-ops", 1, [HELP, INSTALL], day=1),  # older copies of both: two exact positions
        upsert("wiki", 1, [HELP_NEAR], day=0),  # an older near copy: merged into the help chunk
        upsert("notice", 1, [OLD], day=1),
        DeleteEvent(source_id="notice", version=2),  # its chunk's last source: retracted
        DeleteEvent(source_id="help-eng", version=2),  # the canonical copy: its chunks move to help-ops
    ]


def run(audit_exact_copies: bool, *, batch: int = 1) -> list[Output]:
    runner = EmbeddedRunner(Engine(EngineParams(), audit_exact_copies=audit_exact_copies), MemoryStore())
    events = feed()
    produced: list[Output] = []
    for start in range(0, len(events), batch):
        runner.process(events[start : start + batch], produced.extend)
    return produced


def kinds(outputs: list[Output]) -> set[tuple[str, str]]:
    return {(o.value["action"], o.value["reason"]) for o in outputs if o.topic == "audit" and o.value}


def is_exact_merge(output: Output) -> bool:
    value = output.record() if output.topic == "audit" else None
    return value is not None and (value["action"], value["reason"]) == ("merge", "exact")


def exact_merges(outputs: list[Output]) -> list[tuple[str, int, str]]:
    """(source_id, position, chunk_id) of each exact-copy merge record, in order."""
    found = [o.record() for o in outputs if is_exact_merge(o)]
    return [(v["source_id"], v["position"], v["chunk_id"]) for v in found if v is not None]


def encoded(outputs: list[Output]) -> bytes:
    return b"".join(encode_output_line(o) for o in outputs)


def test_no_exact_merge_is_audited_by_default_and_every_other_kind_still_is():
    assert Settings().audit_exact_copies is False
    outputs = run(Settings().audit_exact_copies)
    found = kinds(outputs)
    assert ("merge", "exact") not in found
    assert ("merge", "near") in found
    assert ("retract", "no live source") in found
    assert ("swap", "canonical source removed") in found
    # The mapping still says which positions are copies.
    mappings = [o.record() for o in outputs if o.topic == "source-mappings" and o.key == "help-ops"]
    first = mappings[0]
    assert first is not None and [c["relation"] for c in first["chunks"]] == ["exact", "exact"]


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_with_the_setting_the_outputs_are_those_of_before_with_one_record_per_copied_position(batch):
    on, off = run(True, batch=batch), run(False, batch=batch)
    # Without the exact-copy merges, the same records byte for byte: nothing else depends on the setting.
    assert encoded([o for o in on if not is_exact_merge(o)]) == encoded(off)
    assert kinds(on) - kinds(off) == {("merge", "exact")}
    # One record per copied position, right before the mapping that made the position a copy (as before).
    merges = exact_merges(on)
    help_chunk, install_chunk = (merges[0][2], merges[1][2])
    assert merges == [("help-ops", 0, help_chunk), ("help-ops", 1, install_chunk)]
    at = next(i for i, o in enumerate(on) if is_exact_merge(o))
    assert [(o.topic, o.key) for o in on[at : at + 3]] == [
        ("audit", help_chunk),
        ("audit", install_chunk),
        ("source-mappings", "help-ops"),
    ]


@pytest.mark.parametrize("audit_exact_copies", [False, True])
def test_the_embedded_run_in_one_process_or_several_honours_the_setting(tmp_path: Path, audit_exact_copies):
    written = {}
    for workers in (1, 2):
        settings = Settings(audit_exact_copies=audit_exact_copies, workers=workers, batch_size=2)
        out = tmp_path / f"out-{workers}.jsonl"
        with opened_state(settings, tmp_path / f"state-{workers}", str(out)) as (runner, sink):
            events = feed()
            for start in range(0, len(events), 2):
                runner.process(events[start : start + 2], sink)
        written[workers] = out.read_bytes()
    assert written[1] == written[2]  # I5: the same input and settings, the same bytes
    records = [json.loads(line) for line in written[1].splitlines()]
    audited = {(r["value"]["action"], r["value"]["reason"]) for r in records if r["topic"] == "audit"}
    assert (("merge", "exact") in audited) is audit_exact_copies
    assert ("merge", "near") in audited


@pytest.mark.parametrize("audit_exact_copies", [False, True])
def test_the_kafka_worker_builds_its_engine_with_the_setting(tmp_path: Path, audit_exact_copies):
    settings = Settings(
        topic_prefix="t.", partitions=3, data_dir=tmp_path, audit_exact_copies=audit_exact_copies
    )
    engine = StageWorker(settings, Metrics()).engine
    assert engine.audit_exact_copies is audit_exact_copies
    # The engine's stages over three partitions each, in a random interleaving (the simulation driver); without the
    # deletions, whose order against the copies' arrival the interleaving decides.
    outputs = SimulationDriver(engine, partitions=3, seed=7).run(feed()[:4])
    copied = {(source, position) for source, position, _ in exact_merges(outputs)}
    assert copied == ({("help-ops", 0), ("help-ops", 1)} if audit_exact_copies else set())
    assert ("merge", "near") in kinds(outputs)


def test_the_setting_is_not_an_engine_parameter(tmp_path: Path):
    # A state and a generation record the parameters' fingerprint: the setting leaves it alone, so a state written
    # with it off opens with it on, and the same generation serves either way.
    assert Settings(audit_exact_copies=True).engine_params() == Settings().engine_params()
    assert Settings(audit_exact_copies=True).engine_params().fingerprint() == EngineParams().fingerprint()
    out = tmp_path / "out.jsonl"
    events = feed()
    for audit_exact_copies, part in ((False, events[:1]), (True, events[1:2])):
        with opened_state(Settings(audit_exact_copies=audit_exact_copies), tmp_path / "state", str(out)) as (
            runner,
            sink,
        ):
            runner.process(part, sink)
    records = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert [(r["value"]["action"], r["value"]["reason"]) for r in records if r["topic"] == "audit"] == [
        ("merge", "exact"),
        ("merge", "exact"),
    ]
