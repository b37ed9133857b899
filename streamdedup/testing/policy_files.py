"""The travel and expenses policy as DOCX and PDF documents built in code, with what a converter should find in
them, for tests and benchmarks.

Every file is made from fixed texts, so two runs write the same bytes: the DOCX is rewritten with one fixed
timestamp per ZIP member and fixed document properties (:func:`canonical_zip`, :data:`DOC_TIME`,
:data:`ZIP_TIME`, which :mod:`streamdedup.testing.share_files` and :mod:`streamdedup.testing.hostile_files` use
too), the PDF is drawn in ReportLab's invariant mode (fixed creation date and document id).

The policy comes in three versions (:func:`write_policies`), each as DOCX and as PDF: ``policy-v2``,
``policy-v2-final`` (one word inserted in one long paragraph, no fact changed) and ``policy-v2-final-signed``
(the final text and a signature line).

>>> blocks = policy_blocks("policy-v2-final-signed")
>>> blocks[0]
Block(kind='heading', text='Travel and Expenses Policy', level=1)
>>> blocks[-1].text == SIGNATURE
True
"""

from __future__ import annotations

import datetime
import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import docx
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import cm
from reportlab.platypus import KeepTogether, Paragraph, SimpleDocTemplate

__all__ = [
    "DOCX_FOOTER",
    "DOC_TIME",
    "POLICY_FOOTER",
    "POLICY_HEADER",
    "POLICY_VERSIONS",
    "SIGNATURE",
    "ZIP_TIME",
    "Block",
    "Policy",
    "PolicyVersion",
    "canonical_zip",
    "fix_properties",
    "policy_blocks",
    "render_policy_pdf",
    "write_policies",
    "write_policy_docx",
    "write_policy_pdf",
]


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

#: The creation and modification time in the generated documents' properties.
DOC_TIME = datetime.datetime(2025, 3, 28, 9, 30, 0)
#: The time of every member of the generated ZIP containers (DOCX, PPTX, XLSX).
ZIP_TIME = (2025, 3, 28, 9, 30, 0)


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


def canonical_zip(data: bytes, path: Path) -> None:
    """Write the ZIP archive ``data`` to ``path`` with its members in the same order, each with one fixed time."""
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        members = [(info.filename, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for name, content in members:
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            target.writestr(info, content)


def fix_properties(properties: Any, title: str, author: str) -> None:
    """Give an Office file's core properties fixed values, so that two runs write the same bytes."""
    properties.title = title
    properties.author = author
    properties.last_modified_by = author
    properties.comments = ""
    properties.revision = 1
    properties.created = DOC_TIME
    properties.modified = DOC_TIME
    properties.last_printed = DOC_TIME


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
    fix_properties(document.core_properties, title, "ACME Finance")
    buffer = io.BytesIO()
    document.save(buffer)
    canonical_zip(buffer.getvalue(), path)
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


def render_policy_pdf(
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
    _, pages, _ = render_policy_pdf(blocks, split_paragraphs=split_paragraphs, pages=0)
    data, laid_out, block_pages = render_policy_pdf(
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
