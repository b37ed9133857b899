"""A slide deck, a spreadsheet and legacy-encoded texts built in code, with what a converter should find in them,
for tests and benchmarks; and the corpus of a file share that holds them with the policy.

Every file is made here, from fixed texts and seeds, so two runs write the same bytes: the ZIP containers (PPTX,
XLSX) are rewritten with one fixed timestamp per member and fixed document properties
(:func:`~streamdedup.testing.policy_files.canonical_zip`). What the generators write:

- a slide deck (:func:`write_deck`) copied into three team folders, each copy with its own ACL sidecar
  (:func:`copy_with_acls`);
- a price list exported twice to XLSX with the same cells (:func:`write_exports`);
- two recipes, each in several legacy encodings (:func:`write_texts`).

:func:`write_corpus` writes them and the policy (:mod:`streamdedup.testing.policy_files`) into one folder and
returns every expectation; the hostile files are :mod:`streamdedup.testing.hostile_files`'.

>>> [slide.title for slide in _SLIDES][:2]
['Quarterly Business Review', 'Highlights']
>>> RECIPE_LATIN.encode("cp1252") == RECIPE_LATIN.encode("latin-1")
True
"""

from __future__ import annotations

import codecs
import datetime
import io
import json
import random
import shutil
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openpyxl import Workbook
from openpyxl.styles import Font
from openpyxl.writer.excel import ExcelWriter
from pptx import Presentation
from pptx.util import Inches

from streamdedup.testing.policy_files import DOC_TIME, Policy, canonical_zip, fix_properties, write_policies

__all__ = [
    "RECIPE_LATIN",
    "RECIPE_WINDOWS",
    "TEAM_ACLS",
    "AclCopy",
    "Corpus",
    "Deck",
    "EncodedText",
    "Exports",
    "SlideText",
    "Texts",
    "copy_with_acls",
    "write_corpus",
    "write_deck",
    "write_exports",
    "write_texts",
]

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
    fix_properties(presentation.core_properties, _SLIDES[0].title, "ACME Sales")
    buffer = io.BytesIO()
    presentation.save(buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    canonical_zip(buffer.getvalue(), path)
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
        modified = DOC_TIME + datetime.timedelta(days=number - 1)
        workbook.properties.creator = "ACME Finance"
        workbook.properties.lastModifiedBy = "ACME Finance"
        workbook.properties.created = DOC_TIME
        workbook.properties.modified = modified
        buffer = io.BytesIO()
        # ExcelWriter as openpyxl's save_workbook uses it, without save_workbook setting modified to now.
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            ExcelWriter(workbook, archive).save()
        path = folder / f"prices-export-{number}.xlsx"
        canonical_zip(buffer.getvalue(), path)
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
