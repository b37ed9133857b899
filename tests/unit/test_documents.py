"""A file share as it is: PDF, DOCX, PPTX and XLSX files and legacy encodings, run as a folder and as upserts of
their bytes (streamdedup.convert). The documents are written by the tests
(streamdedup.testing.policy_files, share_files and hostile_files)."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen.canvas import Canvas
from typer.testing import CliRunner

from streamdedup.cli.main import app
from streamdedup.contract.codec import decode_event, encode_event
from streamdedup.convert import ConversionError, Converted, ConvertLimits
from streamdedup.convert.events import with_text
from streamdedup.convert.office import DOCX, PDF, PPTX, XLSX, convert_office
from streamdedup.convert.pool import Converter
from streamdedup.core.chunking import chunk_document
from streamdedup.core.messages import Output
from streamdedup.core.normalize import content_hash, normalize
from streamdedup.core.output_view import View
from streamdedup.drivers.folder import FolderFeed
from streamdedup.errors import InvalidEventError
from streamdedup.testing.hostile_files import pdf_bomb, write_hostile
from streamdedup.testing.policy_files import write_policies
from streamdedup.testing.share_files import Corpus, write_corpus

UNPACKED = 256 * 1024 * 1024


def run(source: Path, state: Path, out: Path, *extra: str):
    return CliRunner().invoke(app, ["run", str(source), "--state", str(state), "--out", str(out), *extra])


def outputs(out: Path) -> list[Output]:
    return [Output(**json.loads(line)) for line in out.read_text().splitlines()]


def hashes(text: str, content_type: str) -> list[str]:
    return [content_hash(normalize(c.plain)) for c in chunk_document(text, content_type, max_chars=2000)]


@pytest.fixture(scope="module")
def share(tmp_path_factory: pytest.TempPathFactory) -> tuple[Corpus, View, list[dict]]:
    """The corpus and the hostile files in one folder, run once: the view and the dead letters."""
    root = tmp_path_factory.mktemp("share")
    corpus = write_corpus(root / "share")
    write_hostile(root / "share" / "hostile", bomb_mebibytes=512)
    out = root / "out.jsonl"
    result = run(corpus.folder, root / "state", out)
    assert result.exit_code == 0, result.output
    lines = outputs(out)
    letters = [line.value for line in lines if line.topic == "dlq"]
    return corpus, View().apply_all(lines), letters


def chunks_of(view: View, source_id: str) -> dict[str, dict]:
    """The chunk records holding ``source_id``, by content hash of the source's own text at each position."""
    mapping = view.mappings[source_id]
    return {entry["content_hash"]: view.chunks[entry["chunk_id"]] for entry in mapping["chunks"]}


def test_three_versions_of_a_policy_as_docx_and_pdf(share):
    corpus, view, _ = share
    policy = corpus.policy
    files = [f"policies/{v.name}.{kind}" for v in policy.versions for kind in ("docx", "pdf")]
    assert all(f in view.mappings for f in files)
    # The DOCX and the PDF of one version give the same chunks, in the same order.
    for version in policy.versions:
        docx, pdf = (view.mappings[f"policies/{version.name}.{kind}"]["chunks"] for kind in ("docx", "pdf"))
        assert [c["content_hash"] for c in docx] == [c["content_hash"] for c in pdf]
        assert [c["chunk_id"] for c in docx] == [c["chunk_id"] for c in pdf]
    # Every paragraph the three versions share is one chunk, held by all six files.
    entries = [entry for f in files for entry in view.mappings[f]["chunks"]]
    common = set.intersection(*({c["content_hash"] for c in view.mappings[f]["chunks"]} for f in files))
    assert len(common) == len(view.mappings["policies/policy-v2.pdf"]["chunks"]) - 1  # all but the edited one
    for shared in common:
        (chunk_id,) = {entry["chunk_id"] for entry in entries if entry["content_hash"] == shared}
        assert {s["source_id"] for s in view.chunks[chunk_id]["sources"]} == set(files)
    # The edited paragraph is a near copy in the versions that have it; the signature is only in the last.
    edited = [
        chunk for chunk in view.chunks.values() if any(m["relation"] == "near" for m in chunk["members"])
    ]
    (chunk,) = edited
    assert normalize(policy.before) in normalize(chunk["text"]) or normalize(policy.after) in normalize(
        chunk["text"]
    )
    near = next(m for m in chunk["members"] if m["relation"] == "near")
    assert 0.8 <= near["jaccard"] < 1.0
    (signed,) = [c for c in view.chunks.values() if c["text"] == policy.signature]
    assert {s["source_id"] for s in signed["sources"]} == {
        "policies/policy-v2-final-signed.docx",
        "policies/policy-v2-final-signed.pdf",
    }
    # The running header and footer are no chunk, and in no chunk.
    for chunk in view.chunks.values():
        assert "Internal" not in chunk["text"] and policy.header not in chunk["text"]
    conversion = view.chunks[view.mappings[files[1]]["chunks"][0]["chunk_id"]]
    pdf_source = next(s for s in conversion["sources"] if s["source_id"] == files[1])
    assert pdf_source["metadata"]["conversion"]["converted_from"] == "PDF"
    assert pdf_source["metadata"]["conversion"]["pages"] == policy.version("policy-v2").pdf_pages
    assert pdf_source["metadata"]["conversion"]["page_furniture"] == sorted(
        [policy.header.casefold(), "internal — page # of #"]
    )


def test_a_deck_copied_into_three_folders_is_one_set_of_chunks_with_the_acl_union(share):
    corpus, view, _ = share
    copies = [c.path.relative_to(corpus.folder).as_posix() for c in corpus.deck.copies]
    assert len(copies) == 3
    first = view.mappings[copies[0]]["chunks"]
    assert len(first) >= len(corpus.deck.slides)
    for other in copies[1:]:
        assert [c["chunk_id"] for c in view.mappings[other]["chunks"]] == [c["chunk_id"] for c in first]
    union = sorted(p for copy in corpus.deck.copies for p in copy.acl)
    for entry in first:
        chunk = view.chunks[entry["chunk_id"]]
        assert chunk["acl"] == union and chunk["source_count"] == 3
        assert [m["relation"] for m in chunk["members"]] == ["canonical"]  # exact copies: one content
    titles = [slide.title for slide in corpus.deck.slides]
    texts = " ".join(view.chunks[e["chunk_id"]]["text"] for e in first)
    assert all(title in texts for title in titles)


def test_a_spreadsheet_exported_twice_is_one_set_of_chunks(share):
    corpus, view, _ = share
    one, two = (p.relative_to(corpus.folder).as_posix() for p in corpus.exports.paths)
    assert [c["chunk_id"] for c in view.mappings[one]["chunks"]] == [
        c["chunk_id"] for c in view.mappings[two]["chunks"]
    ]
    text = " ".join(view.chunks[c["chunk_id"]]["text"] for c in view.mappings[one]["chunks"])
    for row in corpus.exports.sheets["Prices"][1:4]:
        assert str(row[1]) in text  # a SKU of the first rows


def test_one_text_in_legacy_encodings_is_one_chunk(share):
    corpus, view, _ = share
    for group in (corpus.texts.latin, corpus.texts.windows):
        ids = {t.path.relative_to(corpus.folder).as_posix() for t in group}
        (chunk,) = {c["chunk_id"] for i in ids for c in view.mappings[i]["chunks"]}
        record = view.chunks[chunk]
        assert {s["source_id"] for s in record["sources"]} == ids
        assert record["text"] == group[0].text.strip()
        encodings = {
            s["source_id"]: (s.get("metadata") or {}).get("conversion", {}).get("encoding")
            for s in record["sources"]
        }
        for text in group:
            source_id = text.path.relative_to(corpus.folder).as_posix()
            expected = {"utf-8": None, "utf-16": "utf_16", "latin-1": "cp1252", "cp1252": "cp1252"}[
                text.encoding
            ]
            assert encodings[source_id] == expected, (source_id, text.encoding)


def test_hostile_files_are_dead_letters_with_their_reasons(share):
    _, view, letters = share
    reasons = {letter["origin"]["source_id"]: letter["error"] for letter in letters}
    assert set(reasons) == {f"hostile/{name}" for name in (
        "truncated.pdf", "encrypted.pdf", "bomb.docx", "lying-bomb.docx", "random.pdf", "scanned.pdf"
    )}  # fmt: skip
    assert "truncated PDF" in reasons["hostile/truncated.pdf"]
    assert "encrypted PDF" in reasons["hostile/encrypted.pdf"]
    assert "zip bomb" in reasons["hostile/bomb.docx"]
    assert "Bad CRC-32" in reasons["hostile/lying-bomb.docx"]
    assert "not a PDF" in reasons["hostile/random.pdf"]
    assert "holds no text" in reasons["hostile/scanned.pdf"]
    assert all(letter["field"] == "data" and letter["origin"]["file"] for letter in letters)
    assert not any(source.startswith("hostile/") for source in view.mappings)


def test_base64_upserts_give_the_view_of_the_folder_run(share, tmp_path):
    """The folder feed's own events, with the files' bytes in ``data``, as a JSONL file `run` reads."""
    corpus, view, letters = share
    feed = FolderFeed(corpus.folder, corpus.folder.name)
    events = [item for _, _, item in feed.sync()]
    assert all(isinstance(e, Output) or e.data is not None for e in events)
    lines = tmp_path / "events.jsonl"
    lines.write_bytes(b"".join(encode_event(e) + b"\n" for e in events if not isinstance(e, Output)))
    out = tmp_path / "out.jsonl"
    result = run(lines, tmp_path / "state", out)
    assert result.exit_code == 0, result.output
    produced = outputs(out)
    assert View().apply_all(produced).compacted() == view.compacted()
    again = sorted(line.value["error"] for line in produced if line.topic == "dlq")
    assert again == sorted(letter["error"] for letter in letters)


def test_a_paragraph_cut_by_a_page_break_is_joined_again(tmp_path):
    policy = write_policies(tmp_path, split_paragraphs=True)
    for version in policy.versions:
        assert any(len(pages) > 1 for pages in version.block_pages)  # the PDF does cut paragraphs
        pdf = convert_office(version.pdf.read_bytes(), PDF, max_unpacked=UNPACKED)
        docx = convert_office(version.docx.read_bytes(), DOCX, max_unpacked=UNPACKED)
        assert hashes(pdf.text, pdf.content_type) == hashes(docx.text, docx.content_type)


def test_conversions_past_their_bounds_are_errors_naming_the_bound(tmp_path):
    policy = write_policies(tmp_path)
    # A page that inflates to 256 MiB takes seconds to read; the time bound cuts it short.
    slow = Converter(ConvertLimits(timeout=0.2, memory_mb=2048, workers=1))
    try:
        with pytest.raises(ConversionError, match=r"ran past 0\.2 s"):
            slow.convert(pdf_bomb(256), PDF)
    finally:
        slow.close()
    # A PDF whose page inflates to 1 GiB fills the memory bound; the pool's next conversion still works.
    small = Converter(ConvertLimits(memory_mb=128, workers=1))
    try:
        with pytest.raises(ConversionError, match="memory bound of 128 MB"):
            small.convert(pdf_bomb(1024), PDF)
        assert small.convert(policy.versions[0].docx.read_bytes(), DOCX).content_type == "text/html"
    finally:
        small.close()


def test_without_the_office_extra_the_dead_letter_names_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pdfminer", None)  # as if pdfminer.six were not installed
    policy = write_policies(tmp_path)
    converter = Converter()
    with pytest.raises(ConversionError, match=r"pip install 'streamdedup\[office\]'"):
        converter.convert(policy.versions[0].pdf.read_bytes(), PDF)


def test_the_contract_takes_a_document_s_bytes_in_data():
    common = {
        "schema": "streamdedup.document/v1", "op": "upsert", "source_id": "s", "version": 1,
        "modified_at": "2026-01-01T00:00:00Z", "acl": ["*"],
    }  # fmt: skip

    def event(**fields: object) -> bytes:
        return json.dumps({**common, **fields}).encode()

    upsert = decode_event(event(data=base64.b64encode(b"%PDF-1.4").decode(), content_type=PDF))
    assert upsert.data == b"%PDF-1.4" and upsert.content_type == PDF
    assert decode_event(encode_event(upsert)) == upsert
    for wrong, field in (
        ({"data": "not base64!"}, "data"),
        ({"data": 12}, "data"),
        ({"data": "", "text": "x"}, "text"),
        ({"text": "x", "content_type": PDF}, "content_type"),
        ({"data": "", "content_type": "image/png"}, "content_type"),
    ):
        with pytest.raises(InvalidEventError) as caught:
            decode_event(event(**wrong))
        assert caught.value.field == field, wrong


@pytest.fixture(scope="module")
def converter() -> Iterator[Converter]:
    pool = Converter(ConvertLimits(timeout=20, workers=1))
    yield pool
    pool.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.binary(max_size=3000),
        st.text(max_size=500).map(lambda t: t.encode("utf-16")),
        st.binary(max_size=2000).map(lambda b: b"%PDF-1.4\n" + b + b"\n%%EOF"),
        st.binary(max_size=2000).map(lambda b: b"PK\x03\x04" + b),
    ),
    st.sampled_from(["text/plain", "text/html", PDF, DOCX, PPTX, XLSX]),
)
def test_whatever_the_bytes_a_conversion_gives_text_or_a_reason(converter, data, content_type):
    try:
        converted = converter.convert(data, content_type)
    except ConversionError as exc:
        assert exc.field == "data" and str(exc).strip()
    else:
        assert isinstance(converted.text, str)
        assert converted.content_type in ("text/plain", "text/markdown", "text/html")


def test_a_converted_text_over_the_event_bound_in_bytes_is_a_dead_letter():
    """A zipped file can unpack to far more than it weighs; the text is held to the bound in UTF-8 bytes."""
    event = decode_event(
        json.dumps({
            "schema": "streamdedup.document/v1", "op": "upsert", "source_id": "s", "version": 1,
            "modified_at": "2026-01-01T00:00:00Z", "acl": ["*"], "content_type": DOCX, "data": "UEs=",
        }).encode()
    )  # fmt: skip
    text = "漢字" * 500  # 1,000 characters, 3,000 bytes
    with pytest.raises(ConversionError, match="over the event bound of 2,000"):
        with_text(event, Converted(text, "text/html"), 2_000)
    assert with_text(event, Converted(text, "text/html"), 4_000).text == text


def test_a_task_the_pool_lost_is_given_up_without_blocking_the_event_loop(monkeypatch):
    converter = Converter(ConvertLimits(timeout=0.2, workers=1))
    monkeypatch.setattr("streamdedup.convert.pool.GRACE", 0.2)
    monkeypatch.setattr(converter, "submit", lambda data, content_type: Future())  # never completes
    monkeypatch.setattr(converter, "result", lambda future: pytest.fail("a pending future read on the loop"))

    async def main() -> None:
        with pytest.raises(ConversionError, match=r"did not finish within 0\.4 s") as caught:
            await converter.convert_async(b"%PDF-", PDF)
        assert caught.value.transient

    asyncio.run(main())


def test_the_converter_serves_one_event_loop_after_another(tmp_path):
    pdf = write_policies(tmp_path).versions[0].pdf.read_bytes()
    converter = Converter(ConvertLimits(workers=1))

    async def three() -> list[str]:
        done = await asyncio.gather(*(converter.convert_async(pdf, PDF) for _ in range(3)))
        return [c.content_type for c in done]

    try:
        assert asyncio.run(three()) == asyncio.run(three()) == ["text/plain"] * 3
    finally:
        converter.close()


def test_a_file_dead_lettered_for_the_machine_s_reason_is_tried_again(monkeypatch, tmp_path):
    policy = write_policies(tmp_path / "share")
    state, out = tmp_path / "state", tmp_path / "out.jsonl"
    with monkeypatch.context() as without_extra:
        without_extra.setitem(sys.modules, "pdfminer", None)
        assert run(tmp_path / "share", state, out).exit_code == 0
    letters = [line.value for line in outputs(out) if line.topic == "dlq"]
    assert len(letters) == len(policy.versions) and all("office extra" in x["error"] for x in letters)
    assert run(tmp_path / "share", state, out).exit_code == 0  # the extra is back: the PDFs are converted
    view = View().apply_all(outputs(out))
    assert {f"{v.name}.pdf" for v in policy.versions} <= set(view.mappings)
    lines = len(outputs(out))
    assert run(tmp_path / "share", state, out).exit_code == 0 and len(outputs(out)) == lines  # then seen


def test_page_numbers_are_furniture_and_a_number_in_the_body_is_not(tmp_path):
    path = tmp_path / "numbers.pdf"
    canvas = Canvas(str(path), pagesize=A4, invariant=1)
    for page, word in enumerate(("Travel", "Lodging", "Meals"), start=1):
        canvas.setFont("Helvetica", 11)
        body = [
            f"{word} is covered in this part.",
            f"{word} needs a receipt.",
            "Total",
            "1250",
            f"{word} claims close the part.",
        ]
        for row, line in enumerate(body):
            canvas.drawString(72, 700 - 40 * row, line)
        canvas.drawString(297, 30, str(page))
        canvas.showPage()
    canvas.save()
    converted = convert_office(path.read_bytes(), PDF, max_unpacked=UNPACKED)
    paragraphs = converted.text.split("\n\n")
    assert paragraphs.count("1250") == 3 and not {"1", "2", "3"} & set(paragraphs)
    assert converted.metadata["page_furniture"] == ["#"]


def test_a_conversion_cut_short_by_a_replaced_pool_is_made_again(monkeypatch):
    converter = Converter(ConvertLimits(workers=1))
    real, calls = converter.submit, []

    def submit(data: bytes, content_type: str) -> Future:
        calls.append(content_type)
        if len(calls) == 1:  # the pool was replaced under this one
            broken: Future = Future()
            broken.set_exception(BrokenProcessPool("replaced"))
            return broken
        return real(data, content_type)

    monkeypatch.setattr(converter, "submit", submit)
    converted = asyncio.run(converter.convert_async("Crème brûlée".encode("cp1252"), "text/plain"))
    assert converted.text == "Crème brûlée" and len(calls) == 2
