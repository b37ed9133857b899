"""The generated PDF and Office documents are what streamdedup.testing.policy_files, share_files and hostile_files
say they are.

Each file is opened back with the library a converter would read it with (python-docx, python-pptx, openpyxl,
pdfminer.six), and its text is compared with the expectations the generator returns.
"""

from __future__ import annotations

import json
import random
import re
import zipfile
import zlib
from pathlib import Path

import docx
import openpyxl
import pptx
import pytest
from pdfminer.high_level import extract_text
from pdfminer.pdfdocument import PDFPasswordIncorrect
from pdfminer.pdfpage import PDFPage
from pdfminer.psexceptions import PSException

from streamdedup.core.facts import fact_tokens
from streamdedup.core.normalize import normalize
from streamdedup.core.shingles import jaccard
from streamdedup.testing.hostile_files import BOMB_BYTE, crc32_of_repeats, write_hostile, write_zip_bomb
from streamdedup.testing.policy_files import POLICY_HEADER, SIGNATURE, policy_blocks, write_policies
from streamdedup.testing.share_files import Corpus, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return write_corpus(tmp_path_factory.mktemp("office") / "corpus")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _pdf_pages(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in PDFPage.get_pages(handle))


def test_the_policy_text_has_a_title_sections_and_long_paragraphs():
    blocks = policy_blocks("policy-v2")
    assert blocks[0].kind == "heading" and blocks[0].level == 1
    assert [b.level for b in blocks if b.kind == "heading"][1:] == [2] * 5
    paragraphs = [b.text for b in blocks if b.kind == "paragraph"]
    assert 12 <= len(paragraphs) <= 18
    assert all(40 <= len(text.split()) <= 90 for text in paragraphs)


def test_the_final_version_changes_one_paragraph_by_one_word_and_no_fact(corpus):
    policy = corpus.policy
    v2, final, signed = (
        policy.version(name).blocks for name in ("policy-v2", "policy-v2-final", "policy-v2-final-signed")
    )
    assert len(v2) == len(final)
    assert [i for i, (a, b) in enumerate(zip(v2, final, strict=True)) if a != b] == [policy.edited_block]
    before, after = policy.before, policy.after
    assert (v2[policy.edited_block].text, final[policy.edited_block].text) == (before, after)
    assert 60 <= len(before.split()) <= 80
    assert len(normalize(after).split()) == len(normalize(before).split()) + 1
    assert jaccard(normalize(before), normalize(after), 5) >= 0.85
    assert fact_tokens(before) == fact_tokens(after)
    assert signed[:-1] == final and signed[-1].text == SIGNATURE == policy.signature


def test_the_docx_files_hold_the_blocks_with_heading_styles_and_the_header(corpus):
    for version in corpus.policy.versions:
        document = docx.Document(str(version.docx))
        found = [(p.style.name, p.text) for p in document.paragraphs if p.text]
        expected = [
            (f"Heading {b.level}" if b.kind == "heading" else "Normal", b.text) for b in version.blocks
        ]
        assert found == expected
        section = document.sections[0]
        assert section.header.paragraphs[0].text == POLICY_HEADER
        assert section.footer.paragraphs[0].text == corpus.policy.docx_footer
        assert document.core_properties.created == document.core_properties.modified


@pytest.mark.parametrize("split", [False, True])
def test_the_pdf_files_hold_every_block_and_a_header_and_footer_on_every_page(tmp_path, corpus, split):
    policy = corpus.policy if not split else write_policies(tmp_path, split_paragraphs=True)
    for version in policy.versions:
        assert version.pdf_pages >= 3
        assert _pdf_pages(version.pdf) == version.pdf_pages
        pages = [extract_text(version.pdf, page_numbers=[n]) for n in range(version.pdf_pages)]
        for number, text in enumerate(pages, start=1):
            lines = [line for line in text.splitlines() if line.strip() and line != "\x0c"]
            assert lines[0] == POLICY_HEADER
            assert (
                lines[-1] == version.footer(number) == f"Internal \u2014 Page {number} of {version.pdf_pages}"
            )
        for block, on in zip(version.blocks, version.block_pages, strict=True):
            assert on and list(on) == list(range(on[0], on[-1] + 1))
            # The pages' texts without their header and footer lines, run together: a split paragraph joins up.
            body = " ".join(
                _flat(pages[n - 1]).removeprefix(POLICY_HEADER).removesuffix(version.footer(n)) for n in on
            )
            assert _flat(block.text) in _flat(body)
        # Kept whole unless splitting is allowed, and then a page break splits one at least.
        assert any(len(on) > 1 for on in version.block_pages) == split


def test_the_deck_copies_hold_the_slides_and_each_its_own_acl(corpus):
    deck = corpus.deck
    assert [c.acl for c in deck.copies] == [("group:a",), ("group:b",), ("group:c",)]
    assert len({c.path.read_bytes() for c in deck.copies}) == 1
    assert len({c.path.parent for c in deck.copies}) == 3
    for copy in deck.copies:
        assert copy.sidecar.name == copy.path.name + ".acl.json"
        assert json.loads(copy.sidecar.read_text()) == list(copy.acl)
    presentation = pptx.Presentation(str(deck.path))
    assert 4 <= len(presentation.slides) <= 6
    for slide, expected in zip(presentation.slides, deck.slides, strict=True):
        assert slide.shapes.title.text == expected.title
        texts = [
            p.text for s in slide.placeholders if s != slide.shapes.title for p in s.text_frame.paragraphs
        ]
        assert texts == list(expected.lines)
        tables = [s.table for s in slide.shapes if s.has_table]
        rows = [tuple(cell.text for cell in row.cells) for table in tables for row in table.rows]
        assert rows == list(expected.table)
    assert sum(1 for s in deck.slides if s.table) == 1


def test_the_two_exports_hold_the_same_cells_and_differ_only_in_their_modification_time(corpus):
    exports = corpus.exports
    first, second = exports.paths
    for path in exports.paths:
        workbook = openpyxl.load_workbook(path)
        assert workbook.sheetnames == list(exports.sheets)
        for name, rows in exports.sheets.items():
            assert tuple(workbook[name].iter_rows(values_only=True)) == rows
    assert len(exports.sheets["Prices"]) == 31
    assert first.read_bytes() != second.read_bytes()
    with zipfile.ZipFile(first) as a, zipfile.ZipFile(second) as b:
        assert a.namelist() == b.namelist()
        differing = [name for name in a.namelist() if a.read(name) != b.read(name)]
        assert differing == ["docProps/core.xml"]
        modified = [re.search(rb"<dcterms:modified[^>]*>([^<]+)<", z.read(differing[0])) for z in (a, b)]
        assert [m.group(1).decode() for m in modified if m] == [
            t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in exports.modified
        ]


def test_the_texts_decode_to_the_same_text_within_each_group(corpus):
    texts = corpus.texts
    for group in (texts.latin, texts.windows):
        assert len({t.text for t in group}) == 1
        for item in group:
            assert item.path.read_bytes().decode(item.encoding) == item.text + "\n"
    cp1252, latin1, utf16 = (t.path.read_bytes() for t in texts.latin)
    assert cp1252 == latin1 and utf16.startswith(b"\xff\xfe")
    windows = texts.windows[0].text
    assert "\u2026" in windows and "\u2013" in windows
    with pytest.raises(UnicodeEncodeError):
        windows.encode("latin-1")
    with pytest.raises(UnicodeDecodeError):
        texts.windows[0].path.read_bytes().decode("utf-8")


def test_the_corpus_is_the_same_bytes_on_every_run(tmp_path, corpus):
    again = write_corpus(tmp_path / "again")
    files = sorted(p.relative_to(corpus.folder) for p in corpus.folder.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again.folder) for p in again.folder.rglob("*") if p.is_file())
    assert all((corpus.folder / f).read_bytes() == (again.folder / f).read_bytes() for f in files)


def test_the_hostile_files_are_what_they_say(tmp_path):
    hostile = write_hostile(tmp_path, bomb_mebibytes=16)
    for broken in (hostile.truncated_pdf, hostile.random_pdf):
        with pytest.raises(PSException):  # PSEOF, PDFSyntaxError: pdfminer's exceptions all derive from it
            extract_text(broken)
    assert hostile.truncated_pdf.stat().st_size == hostile.truncated_from // 2
    with pytest.raises(PDFPasswordIncorrect):
        extract_text(hostile.encrypted_pdf)
    assert _flat(extract_text(hostile.encrypted_pdf, password=hostile.password)) == hostile.encrypted_text
    assert hostile.random_pdf.read_bytes() == random.Random(7).randbytes(50_000)
    assert _pdf_pages(hostile.image_only_pdf) == 1
    assert extract_text(hostile.image_only_pdf).strip() == ""

    with zipfile.ZipFile(hostile.bomb.path) as archive:
        info = archive.getinfo(hostile.bomb.member)
        assert (info.file_size, info.compress_size) == (hostile.bomb.true_size, hostile.bomb.compressed_size)
        with archive.open(info) as member:  # the whole member, its CRC-32 checked at the end
            total = sum(len(piece) for piece in iter(lambda: member.read(1 << 22), b""))
        assert total == hostile.bomb.true_size
        assert archive.read("[Content_Types].xml").startswith(b"<?xml")
    lying = hostile.lying_bomb
    assert (lying.declared_size, lying.true_size) == (4096, hostile.bomb.true_size)
    with zipfile.ZipFile(lying.path) as archive:
        assert archive.getinfo(lying.member).file_size == 4096
        with pytest.raises(zipfile.BadZipFile, match="CRC"), archive.open(lying.member) as member:
            member.read()  # stops at the declared size, where the CRC-32 of the true bytes cannot match


def test_the_big_bomb_is_small_on_disk_and_inflates_to_what_it_declares(tmp_path):
    bomb = write_zip_bomb(tmp_path / "bomb.docx")
    assert bomb.true_size == bomb.declared_size > 2 * 1024**3
    assert bomb.path.stat().st_size < 3_000_000
    with zipfile.ZipFile(bomb.path) as archive:
        assert archive.getinfo(bomb.member).file_size == bomb.true_size
        with archive.open(bomb.member) as member:
            head = member.read(1 << 20)
    assert head.startswith(b"<?xml") and head.endswith(BOMB_BYTE * 1000)


def test_crc32_of_repeats_is_zlibs():
    for data, times in ((b"x", 1), (b"ab", 7), (BOMB_BYTE * 1000, 33), (b"\x00\xff", 1025)):
        assert crc32_of_repeats(data, times) == zlib.crc32(data * times)
    assert crc32_of_repeats(b"abc", 0) == 0
