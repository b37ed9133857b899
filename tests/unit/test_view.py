import json
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.core.messages import Output
from streamdedup.core.output_view import View as Fold
from streamdedup.errors import StateError
from streamdedup.query.live_view import View, ViewWriter
from streamdedup.query.output_file import OutputFile, build_view
from streamdedup.query.safety_net import Citation

EXAMPLE = Path(__file__).parents[2] / "examples" / "feed.jsonl"
runner = CliRunner()
A, B = "a" * 64, "b" * 64


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("example")
    out = root / "outputs.jsonl"
    result = runner.invoke(app, ["run", str(EXAMPLE), "--state", str(root / "state"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def fold(path: Path) -> Fold:
    return Fold().apply_all(Output(**json.loads(line)) for line in path.read_text().splitlines())


def mapping(source_id: str, *chunk_ids: str, v1: bool = False, **about: object) -> bytes:
    """Return a ``source-mappings`` value: ``mapping/v2`` saying of the source what :func:`chunk` does (``about``
    replaces some of it), or ``mapping/v1`` saying nothing."""
    chunks = [
        {"position": n, "content_hash": c, "chunk_id": c, "relation": "canonical", "jaccard": 1.0}
        for n, c in enumerate(chunk_ids)
    ]
    value: dict[str, object] = {"schema": "streamdedup.mapping/v1", "source_id": source_id, "version": 1}
    if not v1:
        value.update(
            schema="streamdedup.mapping/v2", acl=["*"], modified_at=f"m-{source_id}",
            uri=f"https://example.com/{source_id}", title=f"T {source_id}",
        )  # fmt: skip
        value.update(about)
    return json.dumps({**value, "chunks": chunks}).encode()


def chunk(chunk_id: str, *source_ids: str, count: int | None = None) -> bytes:
    sources = [
        {"source_id": s, "position": 0, "content_hash": chunk_id, "acl": ["*"], "modified_at": f"m-{s}",
         "authority": 0, "uri": f"https://example.com/{s}", "title": f"T {s}"}
        for s in source_ids
    ]  # fmt: skip
    return json.dumps(
        {"chunk_id": chunk_id, "acl": ["*"], "sources": sources, "source_count": count or len(sources)}
    ).encode()


def test_the_view_holds_the_last_value_of_every_key(outputs: Path, tmp_path: Path):
    folded = fold(outputs)
    with build_view(outputs, tmp_path / "view") as view:
        assert sorted(view.chunk_ids()) == sorted(folded.chunks)
        assert sorted(view.source_ids()) == sorted(folded.mappings)
        for chunk_id, value in folded.chunks.items():
            assert view.chunk(chunk_id) == value
        for source_id, value in folded.mappings.items():
            assert view.mapping(source_id) == value
        assert view.chunk("0" * 64) is None
        assert view.mapping("no-such-source") is None


def test_sources_of_a_chunk_come_from_every_mapping(outputs: Path, tmp_path: Path):
    folded = fold(outputs)
    expected: dict[str, dict[str, list[int]]] = {}
    for source_id, value in folded.mappings.items():
        for entry in value["chunks"]:
            expected.setdefault(entry["chunk_id"], {}).setdefault(source_id, []).append(entry["position"])
    with build_view(outputs, tmp_path / "view") as view:
        for chunk_id in folded.chunks:
            cited = view.sources_of(chunk_id)
            assert [c.source_id for c in cited] == sorted(expected[chunk_id])
            assert {c.source_id: list(c.positions) for c in cited} == expected[chunk_id]
        # The help article copied into several spaces (one copy deleted later): each chunk of it cites the live
        # copies, with what a user needs to open them.
        shared = [c for c, sources in expected.items() if len(sources) >= 2]
        assert len(shared) >= 2
        for chunk_id in shared:
            cited = view.sources_of(chunk_id)
            assert all(c.uri and c.uri.startswith("https://") and c.modified_at for c in cited)


def test_index_fields_are_single_valued_chunk_id_and_complete_sources(tmp_path: Path):
    names = [f"s{n:03d}" for n in range(150)]
    with ViewWriter(tmp_path / "view") as view:
        view.apply([("canonical-chunks", A, chunk(A, *names[:100], count=150))], {})
        view.apply([("source-mappings", s, mapping(s, A)) for s in names], {})
        value = json.loads(chunk(A, *names[:100], count=150))
        view.apply(
            [("canonical-chunks", A, json.dumps({**value, "text": "T", "content_hash": A}).encode())], {}
        )
        fields = view.index_fields(A)
        assert fields == {"chunk_id": A, "text": "T", "content_hash": A, "source_ids": names, "acl": ["*"]}
        assert view.index_fields(B) is None


def test_chunks_of_a_source_follow_its_positions(outputs: Path, tmp_path: Path):
    folded = fold(outputs)
    with build_view(outputs, tmp_path / "view") as view:
        for source_id, value in folded.mappings.items():
            ordered = [e["chunk_id"] for e in sorted(value["chunks"], key=lambda e: e["position"])]
            assert view.chunks_of(source_id) == list(dict.fromkeys(ordered))
        assert view.chunks_of("no-such-source") == []


def test_a_changed_or_deleted_mapping_leaves_no_stale_citation(tmp_path: Path):
    with ViewWriter(tmp_path / "view") as view:
        view.apply([("source-mappings", "s1", mapping("s1", A)), ("canonical-chunks", A, chunk(A, "s1"))], {})
        assert [c.source_id for c in view.sources_of(A)] == ["s1"]
        view.apply([("source-mappings", "s1", mapping("s1", B, B))], {})
        assert view.sources_of(A) == []
        assert [c.positions for c in view.sources_of(B)] == [(0, 1)]
        view.apply([("source-mappings", "s1", None), ("canonical-chunks", A, None)], {})
        assert view.sources_of(B) == [] and view.mapping("s1") is None and view.chunk(A) is None


def test_sources_beyond_the_chunk_records_cap_are_cited(tmp_path: Path):
    names = [f"s{n:03d}" for n in range(150)]
    with ViewWriter(tmp_path / "view") as view:
        view.apply([("canonical-chunks", A, chunk(A, *names[:100], count=150))], {})
        view.apply([("source-mappings", s, mapping(s, A)) for s in names], {})
        cited = view.sources_of(A)
        assert [c.source_id for c in cited] == names
        # Each mapping says who reads its source and how to cite it, listed in a chunk record or not.
        for n in (0, 149):
            assert (cited[n].title, cited[n].uri, cited[n].acl) == (
                f"T {names[n]}",
                f"https://example.com/{names[n]}",
                ("*",),
            )


def test_a_v1_mapping_leaves_a_sources_citation_to_the_chunk_records(tmp_path: Path):
    names = [f"s{n:03d}" for n in range(150)]
    with ViewWriter(tmp_path / "view") as view:
        view.apply([("canonical-chunks", A, chunk(A, *names[:100], count=150))], {})
        view.apply([("source-mappings", s, mapping(s, A, v1=True)) for s in names], {})
        cited = view.sources_of(A)
        assert [c.source_id for c in cited] == names
        # What the chunk record lists carries its uri and title; the rest is known by id alone.
        assert cited[0].title == "T s000" and cited[0].uri == "https://example.com/s000"
        assert cited[149].uri is None and cited[149].title is None and cited[149].acl is None
        # A v2 mapping sent later says it all; a v1 one after it leaves it to the chunk records again.
        view.apply([("source-mappings", "s149", mapping("s149", A, acl=["ops"], title="New"))], {})
        assert view.sources_of(A)[149].acl == ("ops",) and view.sources_of(A)[149].title == "New"
        view.apply([("source-mappings", "s149", mapping("s149", A, v1=True))], {})
        assert view.sources_of(A)[149] == Citation("s149", (0,))


def test_a_sources_mapping_is_what_its_citation_says_whatever_the_chunk_records_say(tmp_path: Path):
    with ViewWriter(tmp_path / "view") as view:
        newer = mapping("s1", A, acl=["hr"], uri=None, modified_at="2024-02-01T00:00:00Z")
        view.apply([("source-mappings", "s1", newer), ("canonical-chunks", A, chunk(A, "s1"))], {})
        view.apply([("canonical-chunks", A, chunk(A, "s1"))], {})  # a chunk record after it changes nothing
        assert view.sources_of(A) == [Citation("s1", (0,), None, "T s1", "2024-02-01T00:00:00Z", ("hr",))]
        untitled = json.loads(mapping("s1", A))
        del untitled["title"]
        view.apply([("source-mappings", "s1", json.dumps(untitled).encode())], {})
        assert view.sources_of(A)[0].title is None  # a v2 mapping without a title: the source has none
        view.apply([("source-mappings", "s1", None)], {})
        assert view.sources_of(A) == []
        view.apply([("source-mappings", "s1", mapping("s1", A, v1=True))], {})
        assert view.sources_of(A)[0].acl is None  # the deleted source's attributes went with its mapping


def test_a_view_continues_where_it_stopped_and_waits_for_whole_lines(outputs: Path, tmp_path: Path):
    lines = outputs.read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    growing = tmp_path / "growing.jsonl"
    growing.write_bytes(b"".join(lines[:half]) + lines[half][:10])  # a line still being written
    compacted = sum(json.loads(line)["topic"] in ("canonical-chunks", "source-mappings") for line in lines)
    with ViewWriter(tmp_path / "view") as writer:
        first = OutputFile(growing, writer).catch_up()
    with growing.open("ab") as handle:
        handle.write(lines[half][10:] + b"".join(lines[half + 1 :]))
    with ViewWriter(tmp_path / "view") as writer:
        second = OutputFile(growing, writer).catch_up()
        assert OutputFile(growing, writer).catch_up() == 0
        assert OutputFile(growing, writer).position() == growing.stat().st_size
    assert first + second == compacted  # nothing applied twice, nothing skipped
    with View.open(tmp_path / "view") as view, build_view(outputs, tmp_path / "whole") as whole:
        assert sorted(view.chunk_ids()) == sorted(whole.chunk_ids())
        for chunk_id in whole.chunk_ids():
            assert view.chunk(chunk_id) == whole.chunk(chunk_id)
            assert view.sources_of(chunk_id) == whole.sources_of(chunk_id)


def test_a_replaced_or_truncated_file_is_refused(outputs: Path, tmp_path: Path):
    copy = tmp_path / "outputs.jsonl"
    copy.write_bytes(outputs.read_bytes())
    build_view(copy, tmp_path / "view").close()
    copy.write_bytes(outputs.read_bytes()[:100])
    with ViewWriter(tmp_path / "view") as writer, pytest.raises(StateError, match="replaced or truncated"):
        OutputFile(copy, writer).catch_up()


def test_a_line_that_is_not_an_output_is_refused_with_its_place(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    good = b'{"topic": "canonical-chunks", "key": "x", "value": null}\n'
    bad.write_bytes(good + b'{"nope": 1}\n')
    where = f"ending at byte {len(good) + 12}"
    with ViewWriter(tmp_path / "view") as writer, pytest.raises(StateError, match=where):
        OutputFile(bad, writer).catch_up()


def test_opening_a_directory_that_holds_no_view_says_so(tmp_path: Path):
    with pytest.raises(StateError, match="holds no view"):
        View.open(tmp_path)


def wait_for(condition, what: str, bound: float = 60.0) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what} after {bound} s"
        time.sleep(0.05)


def test_a_reader_follows_a_writer_that_follows_a_growing_file(outputs: Path, tmp_path: Path):
    lines = [
        line
        for line in outputs.read_bytes().splitlines(keepends=True)
        if json.loads(line)["topic"] in ("canonical-chunks", "source-mappings")
    ]
    growing = tmp_path / "growing.jsonl"
    growing.write_bytes(lines[0])
    last = json.loads(lines[-1])
    stop = threading.Event()
    writer = ViewWriter(tmp_path / "view")
    follower = threading.Thread(target=OutputFile(growing, writer).follow, args=(stop,))
    follower.start()
    try:
        with View.open(tmp_path / "view") as reader:
            first = json.loads(lines[0])
            look = reader.chunk if first["topic"] == "canonical-chunks" else reader.mapping
            wait_for(lambda: (reader.refresh(), look(first["key"]))[1] == first["value"], "the first line")
            with growing.open("ab") as handle:
                handle.write(b"".join(lines[1:]))
            folded = fold(outputs)
            table = folded.chunks if last["topic"] == "canonical-chunks" else folded.mappings
            get = reader.chunk if last["topic"] == "canonical-chunks" else reader.mapping
            wait_for(
                lambda: (reader.refresh(), get(last["key"]))[1] == table.get(last["key"]), "the last line"
            )
            assert sorted(reader.chunk_ids()) == sorted(folded.chunks)
    finally:
        stop.set()
        follower.join(timeout=60)
        writer.close()
    assert not follower.is_alive()


def test_the_materialize_command_keeps_a_view_from_an_output_file(outputs: Path, tmp_path: Path):
    into = tmp_path / "view"
    result = runner.invoke(app, ["materialize", "--into", str(into), "--from", str(outputs)])
    assert result.exit_code == 0, result.output
    compacted = sum(
        json.loads(line)["topic"] in ("canonical-chunks", "source-mappings")
        for line in outputs.read_text().splitlines()
    )
    assert f"{compacted:,} records applied" in " ".join(result.output.split())
    again = runner.invoke(app, ["materialize", "--into", str(into), "--from", str(outputs)])
    assert again.exit_code == 0 and ": 0 records applied" in " ".join(again.output.split())
    with View.open(into) as view:
        assert sorted(view.chunk_ids()) == sorted(fold(outputs).chunks)
    wrong = runner.invoke(app, ["materialize", "--follow"])
    assert wrong.exit_code == 2 and "need --into" in wrong.output


def test_staged_changes_are_seen_by_their_lookups_and_written_only_when_committed(tmp_path: Path):
    with ViewWriter(tmp_path / "view") as view:
        view.apply([("source-mappings", "s1", mapping("s1", A)), ("canonical-chunks", A, chunk(A, "s1"))], {})
        pending = view.stage(
            [
                ("source-mappings", "s1", mapping("s1", B)),
                ("canonical-chunks", B, chunk(B, "s1")),
                ("audit", A, b"{}"),
            ]
        )
        assert pending.count == 2
        assert pending.chunks_touched == {A, B}  # A from the mapping it replaces, B from both records
        assert pending.sources_touched == {"s1"}
        assert [c.source_id for c in pending.sources_of(B)] == ["s1"] and pending.sources_of(A) == []
        assert pending.chunks_of("s1") == [B] and sorted(pending.chunk_ids()) == [A, B]
        # Nothing is written yet: the view still answers as before.
        assert [c.source_id for c in view.sources_of(A)] == ["s1"] and view.sources_of(B) == []
        assert view.progress("input") is None
        assert view.commit(pending, {"input": b"7"}, extras={"counters": b"{}"}) == 2
        assert view.sources_of(A) == [] and [c.source_id for c in view.sources_of(B)] == ["s1"]
        assert view.progress("input") == b"7" and view.extra("counters") == b"{}"
        assert view.applied == 4


def test_changes_staged_over_an_earlier_state_are_refused(tmp_path: Path):
    with ViewWriter(tmp_path / "view") as view:
        first = view.stage([("source-mappings", "s1", mapping("s1", A))])
        second = view.stage([("source-mappings", "s1", mapping("s1", B))])
        view.commit(first, {})
        with pytest.raises(StateError, match="stage them again"):
            view.commit(second, {})
        assert view.chunks_of("s1") == [A]


def test_extras_are_kept_apart_from_the_records(tmp_path: Path):
    with ViewWriter(tmp_path / "view") as view:
        view.put_extras({"vector:x": b"\x00\x01", "other": b"2"})
        view.apply([("canonical-chunks", A, chunk(A, "s1"))], {})
        assert view.extras(["vector:x", "missing", "other"]) == [b"\x00\x01", None, b"2"]
        assert list(view.chunk_ids()) == [A] and list(view.source_ids()) == []
    with View.open(tmp_path / "view") as reader:
        assert reader.extra("other") == b"2" and reader.extras([]) == []
