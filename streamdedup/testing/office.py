"""PDF and Office documents built in code, with what a converter should find in them, for tests and benchmarks.

Every file is made here, from fixed texts and seeds, so two runs write the same bytes: the ZIP containers (DOCX,
PPTX, XLSX) are rewritten with one fixed timestamp per member and fixed document properties, the PDFs are drawn in
ReportLab's invariant mode (fixed creation date and document id). What the generators write:

- a travel and expenses policy in three versions (:func:`write_policies`), each as DOCX and as PDF: ``policy-v2``,
  ``policy-v2-final`` (one word inserted in one long paragraph, no fact changed) and ``policy-v2-final-signed``
  (the final text and a signature line);
- a slide deck (:func:`write_deck`) copied into three team folders, each copy with its own ACL sidecar
  (:func:`copy_with_acls`);
- a price list exported twice to XLSX with the same cells (:func:`write_exports`);
- two recipes, each in several legacy encodings (:func:`write_texts`);
- hostile files (:func:`write_hostile`): a truncated PDF, an encrypted PDF, DOCX zip bombs, random bytes named
  ``.pdf``, and a PDF with no text at all, as a scanned page is.

:func:`write_corpus` writes all but the hostile files into one folder and returns every expectation.

>>> blocks = policy_blocks("policy-v2-final-signed")
>>> blocks[0]
Block(kind='heading', text='Travel and Expenses Policy', level=1)
>>> blocks[-1].text == SIGNATURE
True
"""

from __future__ import annotations

import codecs
import datetime
import io
import json
import random
import shutil
import struct
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import docx
from openpyxl import Workbook
from openpyxl.styles import Font
from openpyxl.writer.excel import ExcelWriter
from pptx import Presentation
from pptx.util import Inches
from reportlab.lib.pagesizes import A4
from reportlab.lib.pdfencrypt import StandardEncryption
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import cm
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import KeepTogether, Paragraph, SimpleDocTemplate

__all__ = [
    "BOMB_BYTE",
    "DOCX_FOOTER",
    "POLICY_FOOTER",
    "POLICY_HEADER",
    "POLICY_VERSIONS",
    "RECIPE_LATIN",
    "RECIPE_WINDOWS",
    "SIGNATURE",
    "TEAM_ACLS",
    "AclCopy",
    "Block",
    "Corpus",
    "Deck",
    "EncodedText",
    "Exports",
    "Hostile",
    "Policy",
    "PolicyVersion",
    "SlideText",
    "Texts",
    "ZipBomb",
    "copy_with_acls",
    "crc32_of_repeats",
    "policy_blocks",
    "write_corpus",
    "write_deck",
    "write_exports",
    "write_hostile",
    "write_policies",
    "write_policy_docx",
    "write_policy_pdf",
    "write_texts",
    "write_zip_bomb",
]

# ---------------------------------------------------------------------------------------------------------------
# The policy

#: The running header of the policy's PDF pages (and of its DOCX section).
POLICY_HEADER = "ACME Corporation \u2014 Travel and Expenses Policy"
#: The running footer of the policy's PDF pages; ``page`` counts from 1, ``pages`` is the document's page count.
POLICY_FOOTER = "Internal \u2014 Page {page} of {pages}"
#: The footer of the policy's DOCX section (Word numbers pages with fields, which are left out).
DOCX_FOOTER = "Internal"
#: The last paragraph of ``policy-v2-final-signed``.
SIGNATURE = "Signed for the Board by Maria Keller, Chief Financial Officer."
#: The versions :func:`policy_blocks` knows, oldest first.
POLICY_VERSIONS = ("policy-v2", "policy-v2-final", "policy-v2-final-signed")

_TITLE = "Travel and Expenses Policy"

# (heading, paragraphs) per section; the title comes first, as a level-1 heading, the sections' headings are level 2.
_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Purpose and Scope",
        (
            "This policy sets out how employees of ACME Corporation book business travel, incur expenses on behalf"
            " of the company and claim them back. It applies to all permanent and temporary staff, to contractors"
            " engaged for more than three months and to members of the Board. Version 2 of the policy replaces the"
            " edition of January 2023 and takes effect on 1 April 2025 for every trip booked on or after that date.",
            "Managers are responsible for approving travel before it is booked and for checking that the claims"
            " submitted by their teams are reasonable, accurate and supported by receipts. Finance reviews a sample"
            " of approved claims every month and reports exceptions to the Chief Financial Officer. Where this"
            " policy is silent, employees should spend company money as carefully as they would spend their own.",
        ),
    ),
    (
        "Booking Travel",
        (
            "All flights, rail journeys and hotel stays must be booked through the corporate travel portal, which"
            " applies negotiated rates and records every booking against a cost centre. Bookings made outside the"
            " portal are reimbursed only when the employee can show that the portal offered no suitable option or"
            " that the alternative was at least 10 percent cheaper at the time of booking.",
            "Economy class is the standard for all flights. Premium economy may be booked for a single flight"
            " segment longer than six hours, and business class only for segments longer than ten hours or when a"
            " medical certificate requires it. Employees should book at least 14 days before departure, choose the"
            " lowest logical fare that fits the business schedule and avoid fares that cannot be changed when plans"
            " are likely to move.",
            "Airline loyalty points earned on company travel may be kept by the employee, but they must never"
            " influence the choice of carrier or route. Seat selection fees, priority boarding and extra baggage"
            " are reimbursed only when they are needed to carry equipment or samples for the trip, and the reason"
            " must be stated on the expense claim.",
            "Rail is preferred to air for any journey that takes less than four hours door to door. Standard class"
            " is the default; first class may be booked when the fare difference is under 20 euros or when the"
            " employee needs to work on confidential material during the journey. Season tickets and the cost of"
            " commuting between home and the usual workplace are not business travel and are not reimbursed.",
            "Cars are hired from the approved supplier in the smallest category that suits the number of travellers"
            " and the luggage they carry. The hire must include the standard insurance package, and optional"
            " extras such as satellite navigation are the traveller's own cost. The tank is refilled before the car"
            " is returned, because refuelling charges applied by the supplier are not reimbursed under any"
            " circumstances.",
        ),
    ),
    (
        "Accommodation and Meals",
        (
            "Hotels are booked in the standard room category at or below the city rate published on the intranet,"
            " which is reviewed every January. Where a conference hotel is more expensive, the conference rate may"
            " be accepted with the approval of the line manager. Employees who stay with friends or family instead"
            " of in a hotel may claim a fixed allowance of 30 euros per night to cover a gift or a meal for their"
            " hosts.",
            "Meals are reimbursed at actual cost up to a daily limit of 60 euros within the home country and 80"
            " euros abroad, including tips and service charges. Alcohol is reimbursed only as part of a meal with"
            " clients and must stay within a reasonable amount. Breakfast included in the room rate cannot be"
            " claimed again, and meals provided at a conference or on a flight are not reimbursed.",
            "When employees entertain customers, suppliers or partners, the most senior employee present pays the"
            " bill and submits the claim. The claim must name every guest, the organisation each of them represents"
            " and the business purpose of the meeting. Entertaining public officials requires written approval from"
            " the compliance team before the event, whatever the amount, because anti-bribery rules apply to them"
            " in every country where we operate.",
        ),
    ),
    (
        "Expense Claims and Reimbursement",
        (
            "Expense claims are submitted through the finance system within 30 days of the end of the trip or of"
            " the month in which the cost was incurred. Each line of the claim must carry the date, the amount in"
            " the original currency, the business purpose and a clear image of the receipt. Claims submitted more"
            " than 90 days late are rejected unless the Chief Financial Officer agrees that the delay was outside"
            " the employee's control.",
            "Approved claims are paid with the next monthly salary run, provided they reach the finance team by the"
            " 20th of the month. Costs paid with a corporate card are reconciled in the same system, and any"
            " personal spending on the card must be repaid within 14 days. Cash advances are available for trips"
            " to countries where cards are not widely accepted and are settled against the claim for that trip.",
            "Receipts must be kept for seven years after the end of the financial year in which the claim was paid."
            " A scanned or photographed receipt uploaded to the finance system counts as the original, so paper"
            " receipts may be discarded once the claim is approved. Where a receipt is lost, the employee completes"
            " a missing receipt declaration, which a manager must countersign before the claim can be paid.",
        ),
    ),
    (
        "Compliance and Exceptions",
        (
            "Any exception to this policy must be approved in writing, before the cost is incurred, by a manager at"
            " least one level above the employee's direct line manager. Approvals given after the event are"
            " accepted only in genuine emergencies, such as a cancelled flight or a medical situation, and must be"
            " recorded on the claim with a short explanation of the circumstances.",
            "Submitting a false or inflated claim is a disciplinary matter and may lead to dismissal and to the"
            " recovery of the amounts involved. Finance may suspend the corporate card of an employee whose claims"
            " are repeatedly late or incomplete. Questions about this policy go to the finance helpdesk, which"
            " answers within two working days and keeps a list of frequent questions on the intranet.",
            "This policy is reviewed every year by the finance team together with human resources and the travel"
            " management company. Proposed changes are published on the intranet for comments from staff for at"
            " least four weeks before the Board approves them. The next review is scheduled for March 2026, and"
            " suggestions for improving the policy are welcome at any time through the finance helpdesk.",
        ),
    ),
)

# The edit that makes policy-v2-final: one word inserted in the first paragraph of "Expense Claims and
# Reimbursement" (75 words), which leaves every number, date and negation as it was.
_EDIT_SECTION, _EDIT_PARAGRAPH = 3, 0
_EDIT_BEFORE = "a clear image of the receipt"
_EDIT_AFTER = "a clear, legible image of the receipt"

_DOC_TIME = datetime.datetime(2025, 3, 28, 9, 30, 0)
_ZIP_TIME = (2025, 3, 28, 9, 30, 0)


@dataclass(frozen=True)
class Block:
    """One block of a document's body: a heading (level 1 the title, 2 a section) or a paragraph (level 0)."""

    kind: str
    text: str
    level: int = 0


def policy_blocks(version: str = "policy-v2") -> tuple[Block, ...]:
    """Return the blocks of one version of the policy (one of :data:`POLICY_VERSIONS`), in reading order."""
    if version not in POLICY_VERSIONS:
        raise ValueError(f"unknown policy version {version!r}; known: {', '.join(POLICY_VERSIONS)}")
    blocks = [Block("heading", _TITLE, 1)]
    for number, (heading, paragraphs) in enumerate(_SECTIONS):
        blocks.append(Block("heading", heading, 2))
        for index, text in enumerate(paragraphs):
            edited = version != "policy-v2" and (number, index) == (_EDIT_SECTION, _EDIT_PARAGRAPH)
            assert not edited or text.count(_EDIT_BEFORE) == 1
            blocks.append(Block("paragraph", text.replace(_EDIT_BEFORE, _EDIT_AFTER) if edited else text))
    if version == "policy-v2-final-signed":
        blocks.append(Block("paragraph", SIGNATURE))
    return tuple(blocks)


def _edited_index() -> int:
    """The index in the blocks of the paragraph the edit changes: after the title and the sections before it."""
    before = sum(1 + len(paragraphs) for _, paragraphs in _SECTIONS[:_EDIT_SECTION])
    return 1 + before + 1 + _EDIT_PARAGRAPH


@dataclass(frozen=True)
class PolicyVersion:
    """One version of the policy as written: its blocks, its two files, and where the PDF put each block.

    ``block_pages[i]`` holds the PDF pages (from 1) that block ``i`` is drawn on: two pages for a paragraph split
    across a page break.
    """

    name: str
    blocks: tuple[Block, ...]
    docx: Path
    pdf: Path
    pdf_pages: int
    block_pages: tuple[tuple[int, ...], ...]

    def footer(self, page: int) -> str:
        """Return the footer the PDF carries on ``page`` (from 1)."""
        return POLICY_FOOTER.format(page=page, pages=self.pdf_pages)


@dataclass(frozen=True)
class Policy:
    """The three versions of the policy and what tells them apart.

    ``edited_block`` is the index in ``blocks`` of the one paragraph ``policy-v2-final`` changes (``before`` and
    ``after`` are its two texts); ``policy-v2-final-signed`` adds ``signature`` as its last block.
    """

    versions: tuple[PolicyVersion, ...]
    edited_block: int
    before: str
    after: str
    signature: str
    header: str
    footer_template: str
    docx_footer: str
    split_paragraphs: bool

    def version(self, name: str) -> PolicyVersion:
        """Return the version called ``name``."""
        for version in self.versions:
            if version.name == name:
                return version
        raise KeyError(name)


def _canonical_zip(data: bytes, path: Path) -> None:
    """Write the ZIP archive ``data`` to ``path`` with its members in the same order, each with one fixed time."""
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        members = [(info.filename, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for name, content in members:
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            target.writestr(info, content)


def write_policy_docx(blocks: Sequence[Block], path: Path, *, title: str = _TITLE) -> Path:
    """Write ``blocks`` as a Word document with real heading styles, the running header and footer; return path."""
    document = docx.Document()
    for block in blocks:
        if block.kind == "heading":
            document.add_heading(block.text, level=block.level)
        else:
            document.add_paragraph(block.text)
    section = document.sections[0]
    section.header.paragraphs[0].text = POLICY_HEADER
    section.footer.paragraphs[0].text = DOCX_FOOTER
    properties = document.core_properties
    properties.title = title
    properties.author = "ACME Finance"
    properties.last_modified_by = "ACME Finance"
    properties.comments = ""
    properties.revision = 1
    properties.created = _DOC_TIME
    properties.modified = _DOC_TIME
    properties.last_printed = _DOC_TIME
    buffer = io.BytesIO()
    document.save(buffer)
    _canonical_zip(buffer.getvalue(), path)
    return path


def _policy_styles() -> dict[str, Any]:
    sample = getSampleStyleSheet()
    body = ParagraphStyle(
        "PolicyBody", parent=sample["BodyText"], fontName="Helvetica", fontSize=12, leading=17, spaceAfter=9
    )
    heading1 = ParagraphStyle(
        "PolicyHeading1", parent=sample["Heading1"], fontName="Helvetica-Bold", keepWithNext=1, spaceAfter=14
    )
    heading2 = ParagraphStyle(
        "PolicyHeading2", parent=sample["Heading2"], fontName="Helvetica-Bold", keepWithNext=1, spaceBefore=14
    )
    return {"paragraph": body, "1": heading1, "2": heading2}


def _render_policy_pdf(
    blocks: Sequence[Block], *, split_paragraphs: bool, pages: int, encrypt: Any = None
) -> tuple[bytes, int, tuple[tuple[int, ...], ...]]:
    """Lay out ``blocks`` once: return the PDF bytes, its page count and the pages each block is drawn on."""
    styles = _policy_styles()
    buffer = io.BytesIO()
    document = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        leftMargin=2.5 * cm,
        rightMargin=2.5 * cm,
        topMargin=3 * cm,
        bottomMargin=3 * cm,
        title=_TITLE,
        author="ACME Finance",
        subject="Travel and expenses",
        creator="ACME Document Services",
        invariant=1,
        encrypt=encrypt,
    )
    width, height = A4
    on_pages: list[set[int]] = [set() for _ in blocks]

    def decorate(canvas: Any, doc: Any) -> None:
        canvas.saveState()
        canvas.setFont("Helvetica", 9)
        canvas.drawString(2.5 * cm, height - 1.8 * cm, POLICY_HEADER)
        canvas.setLineWidth(0.5)
        canvas.line(2.5 * cm, height - 2 * cm, width - 2.5 * cm, height - 2 * cm)
        canvas.drawCentredString(width / 2, 1.8 * cm, POLICY_FOOTER.format(page=doc.page, pages=pages))
        canvas.restoreState()

    def after_flowable(flowable: Any) -> None:
        name = getattr(getattr(flowable, "style", None), "name", "")
        if name.startswith("block-"):
            on_pages[int(name.removeprefix("block-"))].add(document.page)

    document.afterFlowable = after_flowable
    story = []
    for index, block in enumerate(blocks):
        parent = styles["paragraph"] if block.kind == "paragraph" else styles[str(block.level)]
        # A style of its own names the block, in every part a page break splits it into.
        paragraph = Paragraph(escape(block.text), ParagraphStyle(f"block-{index}", parent=parent))
        story.append(paragraph if split_paragraphs or block.kind == "heading" else KeepTogether([paragraph]))
    document.build(story, onFirstPage=decorate, onLaterPages=decorate)
    return buffer.getvalue(), int(document.page), tuple(tuple(sorted(found)) for found in on_pages)


def write_policy_pdf(
    blocks: Sequence[Block], path: Path, *, split_paragraphs: bool = False, encrypt: Any = None
) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """Write ``blocks`` as an A4 PDF; return its page count and the pages each block is drawn on.

    Every page carries :data:`POLICY_HEADER` and :data:`POLICY_FOOTER` (``Page n of N``, so the document is laid
    out twice: once to count its pages). Headings keep with the paragraph after them; a paragraph that does not fit
    on what is left of a page moves to the next one whole, unless ``split_paragraphs``. ``encrypt``: ReportLab's
    ``encrypt`` argument (a user password, or a :class:`~reportlab.lib.pdfencrypt.StandardEncryption`).
    """
    _, pages, _ = _render_policy_pdf(blocks, split_paragraphs=split_paragraphs, pages=0)
    data, laid_out, block_pages = _render_policy_pdf(
        blocks, split_paragraphs=split_paragraphs, pages=pages, encrypt=encrypt
    )
    assert laid_out == pages
    path.write_bytes(data)
    return pages, block_pages


def write_policies(folder: Path, *, split_paragraphs: bool = False) -> Policy:
    """Write the three versions of the policy into ``folder`` as ``<version>.docx`` and ``<version>.pdf``."""
    folder.mkdir(parents=True, exist_ok=True)
    versions = []
    for name in POLICY_VERSIONS:
        blocks = policy_blocks(name)
        docx_path = write_policy_docx(blocks, folder / f"{name}.docx")
        pages, block_pages = write_policy_pdf(
            blocks, folder / f"{name}.pdf", split_paragraphs=split_paragraphs
        )
        versions.append(PolicyVersion(name, blocks, docx_path, folder / f"{name}.pdf", pages, block_pages))
    edited = _edited_index()
    return Policy(
        versions=tuple(versions),
        edited_block=edited,
        before=versions[0].blocks[edited].text,
        after=versions[1].blocks[edited].text,
        signature=SIGNATURE,
        header=POLICY_HEADER,
        footer_template=POLICY_FOOTER,
        docx_footer=DOCX_FOOTER,
        split_paragraphs=split_paragraphs,
    )


# ---------------------------------------------------------------------------------------------------------------
# The slide deck


@dataclass(frozen=True)
class SlideText:
    """The text of one slide: its title, its body lines (subtitle or bullets) and its table's rows, if any."""

    title: str
    lines: tuple[str, ...] = ()
    table: tuple[tuple[str, ...], ...] = ()


_SLIDES: tuple[SlideText, ...] = (
    SlideText("Quarterly Business Review", ("Sales and Operations, first quarter of 2025",)),
    SlideText(
        "Highlights",
        (
            "Revenue grew 12 percent year on year, ahead of plan",
            "Two new enterprise customers signed in the Nordic region",
            "Customer churn fell below 3 percent for the first time",
        ),
    ),
    SlideText(
        "Pipeline and Forecast",
        (
            "Qualified pipeline stands at 48 million euros across all regions",
            "Average deal size is up while sales cycles stay at about 90 days",
            "The forecast for the second quarter is unchanged",
        ),
    ),
    SlideText(
        "Results by Region",
        (),
        (
            ("Region", "Revenue (EUR m)", "Growth"),
            ("North", "14.2", "9%"),
            ("South", "11.8", "15%"),
            ("East", "8.5", "11%"),
        ),
    ),
    SlideText(
        "Next Steps",
        (
            "Hire four account executives for the southern region",
            "Launch the partner programme before the summer",
            "Review pricing for small business customers",
        ),
    ),
)


@dataclass(frozen=True)
class AclCopy:
    """One copy of a file in a folder of its own, beside its ACL sidecar ``<file>.acl.json``."""

    path: Path
    sidecar: Path
    acl: tuple[str, ...]


@dataclass(frozen=True)
class Deck:
    """The slide deck: the file written, its slides' texts, and its copies with their ACLs."""

    path: Path
    slides: tuple[SlideText, ...]
    copies: tuple[AclCopy, ...] = ()


def write_deck(path: Path) -> Deck:
    """Write a five-slide deck (a title slide, bullets, a table) to ``path``; return it with its slides' texts."""
    presentation = Presentation()
    title_layout, bullets_layout, title_only_layout = (presentation.slide_layouts[i] for i in (0, 1, 5))
    for spec in _SLIDES:
        if spec.table:
            slide = presentation.slides.add_slide(title_only_layout)
            rows, columns = len(spec.table), len(spec.table[0])
            shape = slide.shapes.add_table(rows, columns, Inches(1), Inches(2), Inches(8), Inches(0.5 * rows))
            for r, row in enumerate(spec.table):
                for c, value in enumerate(row):
                    shape.table.cell(r, c).text = value
        elif spec is _SLIDES[0]:
            slide = presentation.slides.add_slide(title_layout)
            slide.placeholders[1].text_frame.text = spec.lines[0]
        else:
            slide = presentation.slides.add_slide(bullets_layout)
            frame = slide.placeholders[1].text_frame
            frame.text = spec.lines[0]
            for line in spec.lines[1:]:
                frame.add_paragraph().text = line
        title = slide.shapes.title
        assert title is not None
        title.text = spec.title
    properties = presentation.core_properties
    properties.title = _SLIDES[0].title
    properties.author = "ACME Sales"
    properties.last_modified_by = "ACME Sales"
    properties.revision = 1
    properties.created = _DOC_TIME
    properties.modified = _DOC_TIME
    properties.last_printed = _DOC_TIME
    buffer = io.BytesIO()
    presentation.save(buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    _canonical_zip(buffer.getvalue(), path)
    return Deck(path, _SLIDES)


#: The team folders :func:`copy_with_acls` copies into by default, and their ACLs.
TEAM_ACLS: Mapping[str, tuple[str, ...]] = {
    "team-a": ("group:a",),
    "team-b": ("group:b",),
    "team-c": ("group:c",),
}


def copy_with_acls(
    source: Path, folder: Path, acls: Mapping[str, Sequence[str]] = TEAM_ACLS
) -> tuple[AclCopy, ...]:
    """Copy ``source`` into ``folder/<name>/`` for every name of ``acls``, each copy with its ACL sidecar.

    The sidecar is ``<file>.acl.json`` holding the ACL as a JSON list, as the folder feed reads it. ``source`` may
    be one of the copies already (it is then left as it is, and given its sidecar).
    """
    copies = []
    for name, acl in acls.items():
        target = folder / name / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.resolve() != source.resolve():
            shutil.copyfile(source, target)
        sidecar = target.with_name(target.name + ".acl.json")
        sidecar.write_text(json.dumps(list(acl)) + "\n", encoding="utf-8")
        copies.append(AclCopy(target, sidecar, tuple(acl)))
    return tuple(copies)


# ---------------------------------------------------------------------------------------------------------------
# The spreadsheet


@dataclass(frozen=True)
class Exports:
    """The same workbook exported twice: its sheets' cell values by sheet name (header row first).

    The two files differ only in the modification time in their document properties (``modified``), so their
    bytes differ while every cell is the same.
    """

    paths: tuple[Path, ...]
    sheets: Mapping[str, tuple[tuple[Any, ...], ...]]
    modified: tuple[datetime.datetime, ...]


_PRODUCTS = (
    "Desk Lamp",
    "Office Chair",
    "Standing Desk",
    "Monitor Arm",
    "Keyboard",
    "Wireless Mouse",
    "Headset",
    "Webcam",
    "Docking Station",
    "Filing Cabinet",
)
_GRADES = ("Basic", "Plus", "Pro")
_CURRENCIES = (
    ("Currency", "Units per EUR", "Updated"),
    ("EUR", 1.0, "2025-03-28"),
    ("USD", 1.0815, "2025-03-28"),
)


def _price_rows(seed: int = 11) -> tuple[tuple[Any, ...], ...]:
    rng = random.Random(seed)
    rows: list[tuple[Any, ...]] = [("Product", "SKU", "Unit price", "Currency")]
    for number in range(30):
        product, grade = _PRODUCTS[number % len(_PRODUCTS)], _GRADES[number // len(_PRODUCTS)]
        sku = f"AC-{rng.randrange(10_000, 99_999)}-{grade[0]}"
        price = round(rng.uniform(9, 900) * (1 + _GRADES.index(grade) * 0.4), 2)
        rows.append((f"{product} {grade}", sku, price, rng.choice(("EUR", "EUR", "USD"))))
    return tuple(rows)


def write_exports(folder: Path) -> Exports:
    """Write the price list twice, ``prices-export-1.xlsx`` and ``prices-export-2.xlsx``, a day apart."""
    folder.mkdir(parents=True, exist_ok=True)
    sheets = {"Prices": _price_rows(), "Currencies": _CURRENCIES}
    paths, times = [], []
    for number in (1, 2):
        workbook = Workbook()
        for index, (name, rows) in enumerate(sheets.items()):
            sheet = workbook.active if index == 0 else workbook.create_sheet()
            sheet.title = name
            for row in rows:
                sheet.append(row)
            for cell in sheet[1]:
                cell.font = Font(bold=True)
        modified = _DOC_TIME + datetime.timedelta(days=number - 1)
        workbook.properties.creator = "ACME Finance"
        workbook.properties.lastModifiedBy = "ACME Finance"
        workbook.properties.created = _DOC_TIME
        workbook.properties.modified = modified
        buffer = io.BytesIO()
        # ExcelWriter as openpyxl's save_workbook uses it, without save_workbook setting modified to now.
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            ExcelWriter(workbook, archive).save()
        path = folder / f"prices-export-{number}.xlsx"
        _canonical_zip(buffer.getvalue(), path)
        paths.append(path)
        times.append(modified)
    return Exports(tuple(paths), sheets, tuple(times))


# ---------------------------------------------------------------------------------------------------------------
# Texts in legacy encodings

#: A recipe in characters Latin-1 and Windows-1252 share (and encode to the same bytes).
RECIPE_LATIN = (
    "Café crème brûlée for twelve: heat the cream to 65 degrees with the vanilla pod, but never let it boil."
    " Whisk the yolks with the sugar until pale, pour the warm cream over them and strain the custard into the"
    " ramekins. Bake at 150 degrees in a water bath for 40 minutes, then chill the creams overnight."
    " Caramelise a thin layer of sugar on top just before serving."
)
#: A recipe with characters only Windows-1252 has among the legacy encodings: an ellipsis, an en dash, a right
#: single quotation mark and the euro sign.
RECIPE_WINDOWS = (
    "Crème brûlée for six\u2026 heat the cream to 65 degrees \u2013 never let it boil. The vanilla pods cost"
    " about 4 \u20ac each, so keep the scraped pods for the sugar jar. Whisk the yolks with the sugar, pour the"
    " warm cream over them and bake at 150 degrees for 40 minutes. Don\u2019t skip the night in the fridge."
)


@dataclass(frozen=True)
class EncodedText:
    """A text file: where it is, the encoding its bytes are in, and the text they decode to."""

    path: Path
    encoding: str
    text: str


@dataclass(frozen=True)
class Texts:
    """Two groups of files; within a group every file holds the same text in another encoding.

    ``latin``: :data:`RECIPE_LATIN` in cp1252, latin-1 (the same bytes) and UTF-16 with a byte order mark;
    ``windows``: :data:`RECIPE_WINDOWS` in cp1252 and UTF-8 (no byte order mark).
    """

    latin: tuple[EncodedText, ...]
    windows: tuple[EncodedText, ...]


def _write_encoded(path: Path, text: str, encoding: str) -> EncodedText:
    line = text + "\n"
    # UTF-16 little-endian behind its byte order mark, whatever the machine's byte order.
    path.write_bytes(
        codecs.BOM_UTF16_LE + line.encode("utf-16-le") if encoding == "utf-16" else line.encode(encoding)
    )
    return EncodedText(path, encoding, text)


def write_texts(folder: Path) -> Texts:
    """Write the recipes into ``folder`` as ``recipe-latin-<encoding>.txt`` and ``recipe-windows-<encoding>.txt``.

    Every file ends with one newline, which is not part of ``text``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    latin = tuple(
        _write_encoded(folder / f"recipe-latin-{label}.txt", RECIPE_LATIN, encoding)
        for label, encoding in (("cp1252", "cp1252"), ("latin1", "latin-1"), ("utf16", "utf-16"))
    )
    windows = tuple(
        _write_encoded(folder / f"recipe-windows-{label}.txt", RECIPE_WINDOWS, encoding)
        for label, encoding in (("cp1252", "cp1252"), ("utf8", "utf-8"))
    )
    return Texts(latin, windows)


# ---------------------------------------------------------------------------------------------------------------
# Hostile files

#: The byte a zip bomb's document repeats.
BOMB_BYTE = b"A"
_BLOCK = 1 << 20


def _gf2_times(matrix: Sequence[int], vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _gf2_square(matrix: Sequence[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[row]) for row in range(32)]


def _crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)`` (zlib's crc32_combine)."""
    if length2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << row for row in range(31)]  # the operator for one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:
        even = _gf2_square(odd)
        if length2 & 1:
            crc1 = _gf2_times(even, crc1)
        length2 >>= 1
        if not length2:
            break
        odd = _gf2_square(even)
        if length2 & 1:
            crc1 = _gf2_times(odd, crc1)
        length2 >>= 1
        if not length2:
            break
    return crc1 ^ crc2


def crc32_of_repeats(data: bytes, times: int) -> int:
    """Return ``zlib.crc32(data * times)`` without making it.

    >>> crc32_of_repeats(b"abc", 1000) == zlib.crc32(b"abc" * 1000)
    True
    """
    crc, power, length = 0, zlib.crc32(data), len(data)
    while times:
        if times & 1:
            crc = _crc32_combine(crc, power, length)
        power = _crc32_combine(power, power, length)
        length *= 2
        times >>= 1
    return crc


@dataclass(frozen=True)
class ZipBomb:
    """A DOCX whose ``member`` inflates to ``true_size`` bytes; its ZIP headers say ``declared_size``.

    ``compressed_size`` is the member's deflated size; ``path.stat().st_size`` is a little more.
    """

    path: Path
    member: str
    true_size: int
    declared_size: int
    compressed_size: int


_CONTENT_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    b'<Default Extension="xml" ContentType="application/xml"/>'
    b'<Override PartName="/word/document.xml" '
    b'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    b"</Types>"
)
_RELS = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
    b'officeDocument" Target="word/document.xml"/></Relationships>'
)
_SMALL_PARTS = (("[Content_Types].xml", _CONTENT_TYPES), ("_rels/.rels", _RELS))
_BOMB_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>"
)
_BOMB_TAIL = b"</w:t></w:r></w:p></w:body></w:document>"
_DOS_TIME = (_ZIP_TIME[3] << 11) | (_ZIP_TIME[4] << 5) | (_ZIP_TIME[5] // 2)
_DOS_DATE = ((_ZIP_TIME[0] - 1980) << 9) | (_ZIP_TIME[1] << 5) | _ZIP_TIME[2]


def _write_zip(path: Path, members: Iterable[tuple[str, Iterable[bytes], int, int, int]]) -> None:
    """Write a ZIP archive of deflated members by hand, streaming.

    A member is (name, its raw deflate stream in pieces, its CRC-32, the uncompressed size the headers declare,
    the compressed size): the headers say what they are told, true or not.
    """
    central = bytearray()
    count = 0
    with path.open("wb") as out:
        for name, stream, crc, size, compressed in members:
            encoded = name.encode("ascii")
            offset = out.tell()
            # version needed, flags, method (deflate), time, date, CRC-32, sizes, name length
            common = (20, 0, 8, _DOS_TIME, _DOS_DATE, crc, compressed, size, len(encoded))
            out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, *common, 0) + encoded)
            written = sum(out.write(piece) for piece in stream)
            assert written == compressed, (name, written, compressed)
            # made by, the common fields, extra and comment lengths, disk, attributes, the local header's offset
            central += struct.pack(
                "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, *common, 0, 0, 0, 0, 0o644 << 16, offset
            )
            central += encoded
            count += 1
        start = out.tell()
        out.write(central)
        out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), start, 0))


def _deflated(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


def write_zip_bomb(path: Path, *, mebibytes: int = 2048, declared_size: int | None = None) -> ZipBomb:
    """Write a DOCX whose ``word/document.xml`` is one text run of ``mebibytes`` MiB of :data:`BOMB_BYTE`.

    The member inflates to its true size (a little over ``mebibytes`` MiB, at most 4 GiB: no ZIP64), though the
    file is about a thousandth of that: its deflate stream is one deflated MiB repeated (each block ends in a full
    flush, so every copy of it is the same bytes), and its CRC-32 is combined, not computed over the bytes, so the
    bomb is written in milliseconds with a MiB of memory. ``declared_size``: the size its headers state, if not the
    true one (the CRC-32 is always that of the true bytes).
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(_BOMB_HEAD) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(BOMB_BYTE * _BLOCK) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.compress(_BOMB_TAIL) + compressor.flush(zlib.Z_FINISH)
    true_size = len(_BOMB_HEAD) + mebibytes * _BLOCK + len(_BOMB_TAIL)
    if true_size >= 1 << 32 or (declared_size is not None and not 0 <= declared_size < 1 << 32):
        raise ValueError("a zip bomb here stays under 4 GiB (no ZIP64)")
    crc = zlib.crc32(_BOMB_HEAD)
    crc = _crc32_combine(crc, crc32_of_repeats(BOMB_BYTE * _BLOCK, mebibytes), mebibytes * _BLOCK)
    crc = zlib.crc32(_BOMB_TAIL, crc)
    compressed = len(head) + mebibytes * len(block) + len(tail)

    def document() -> Iterable[bytes]:
        yield head
        for _ in range(mebibytes):
            yield block
        yield tail

    members: list[tuple[str, Iterable[bytes], int, int, int]] = []
    for name, data in _SMALL_PARTS:
        packed = _deflated(data)
        members.append((name, (packed,), zlib.crc32(data), len(data), len(packed)))
    member = "word/document.xml"
    declared = true_size if declared_size is None else declared_size
    members.append((member, document(), crc, declared, compressed))
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_zip(path, members)
    return ZipBomb(path, member, true_size, declared, compressed)


@dataclass(frozen=True)
class Hostile:
    """Files a converter must refuse or survive, and what they are.

    ``truncated_pdf``: the first half of ``policy-v2.pdf`` (``truncated_from`` bytes long whole);
    ``encrypted_pdf``: a one-page PDF holding ``encrypted_text`` that opens only with ``password``;
    ``bomb``: a DOCX zip bomb whose headers tell the truth; ``lying_bomb``: one whose headers understate the size;
    ``random_pdf``: ``random.Random(7).randbytes(50_000)`` named ``.pdf``; ``image_only_pdf``: a page of drawn
    shapes and no text, as a scan is.
    """

    truncated_pdf: Path
    truncated_from: int
    encrypted_pdf: Path
    password: str
    encrypted_text: str
    bomb: ZipBomb
    lying_bomb: ZipBomb
    random_pdf: Path
    image_only_pdf: Path


_SECRET = "Salary bands for 2025 are confidential and shared with managers only."


def _encrypted_pdf(path: Path, password: str) -> None:
    canvas = Canvas(
        str(path),
        pagesize=A4,
        invariant=1,
        encrypt=StandardEncryption(password, ownerPassword="owner-" + password, strength=128),
    )
    canvas.setFont("Helvetica", 12)
    canvas.drawString(2.5 * cm, A4[1] - 3 * cm, _SECRET)
    canvas.showPage()
    canvas.save()


def _image_only_pdf(path: Path) -> None:
    canvas = Canvas(str(path), pagesize=A4, invariant=1)
    width, height = A4
    canvas.setFillGray(0.93)
    canvas.rect(1 * cm, 1 * cm, width - 2 * cm, height - 2 * cm, stroke=0, fill=1)
    canvas.setFillGray(0.2)
    rng = random.Random(3)
    y = height - 3 * cm
    while y > 3 * cm:  # bars where a scan would have lines of text
        canvas.rect(2.5 * cm, y, rng.uniform(10, 16) * cm, 0.3 * cm, stroke=0, fill=1)
        y -= 0.7 * cm if rng.random() < 0.85 else 1.4 * cm
    canvas.showPage()
    canvas.save()


def write_hostile(folder: Path, *, bomb_mebibytes: int = 2048, password: str = "open-sesame") -> Hostile:
    """Write the hostile files into ``folder``; ``bomb_mebibytes`` sizes both zip bombs (see :func:`write_zip_bomb`).

    The lying bomb's headers declare 4096 bytes for its document.
    """
    folder.mkdir(parents=True, exist_ok=True)
    blocks = policy_blocks("policy-v2")
    _, pages, _ = _render_policy_pdf(blocks, split_paragraphs=False, pages=0)
    whole, _, _ = _render_policy_pdf(blocks, split_paragraphs=False, pages=pages)
    truncated = folder / "truncated.pdf"
    truncated.write_bytes(whole[: len(whole) // 2])
    encrypted = folder / "encrypted.pdf"
    _encrypted_pdf(encrypted, password)
    bomb = write_zip_bomb(folder / "bomb.docx", mebibytes=bomb_mebibytes)
    lying = write_zip_bomb(folder / "lying-bomb.docx", mebibytes=bomb_mebibytes, declared_size=4096)
    noise = folder / "random.pdf"
    noise.write_bytes(random.Random(7).randbytes(50_000))
    scan = folder / "scanned.pdf"
    _image_only_pdf(scan)
    return Hostile(truncated, len(whole), encrypted, password, _SECRET, bomb, lying, noise, scan)


# ---------------------------------------------------------------------------------------------------------------
# The corpus


@dataclass(frozen=True)
class Corpus:
    """Everything :func:`write_corpus` wrote under ``folder``, with what each file should convert to."""

    folder: Path
    policy: Policy
    deck: Deck
    exports: Exports
    texts: Texts


def write_corpus(folder: Path, *, split_paragraphs: bool = False) -> Corpus:
    """Write the policies, the deck and its team copies, the exports and the texts under ``folder``.

    Layout: ``policies/<version>.{docx,pdf}``, ``decks/team-{a,b,c}/quarterly-review.pptx`` (the deck is written
    into ``team-a`` and copied from there; each copy has its ``.acl.json``), ``exports/prices-export-{1,2}.xlsx``,
    ``text/recipe-*.txt``. The hostile files are :func:`write_hostile`'s.
    """
    policy = write_policies(folder / "policies", split_paragraphs=split_paragraphs)
    deck = write_deck(folder / "decks" / next(iter(TEAM_ACLS)) / "quarterly-review.pptx")
    deck = Deck(deck.path, deck.slides, copy_with_acls(deck.path, folder / "decks"))
    return Corpus(folder, policy, deck, write_exports(folder / "exports"), write_texts(folder / "text"))
