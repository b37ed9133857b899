"""Documents as files are kept: the same policy as PDF, DOCX, PPTX, XLSX and cp1252 text, beside Markdown.

    python -m benchmarks.convert_formats                 # 60 documents per format, 20 of them converted alone
    python -m benchmarks.convert_formats --documents 150 --convert-documents 50

Every format holds the same texts: the travel and expenses policy of :mod:`streamdedup.testing.policy_files` (a title,
five sections, 16 paragraphs, about 6,600 characters), each document with its number in the title and one sentence
of its own (a cost centre, a city, a budget in euros, an approver), so that the engine sees near copies, not only
exact ones. Its apostrophes are typographic and the sentence has a euro sign and an en dash, so that the cp1252 file
goes through detection (UTF-8 is returned as it is). The formats:

- **Markdown** (the baseline): ``#`` title, ``##`` headings, paragraphs, UTF-8;
- **DOCX**: Word heading styles, a running header and footer (``write_policy_docx``);
- **PDF**: A4, three pages each, a running header and a "Page n of 3" footer (``write_policy_pdf``);
- **PPTX**: a title slide, then a slide per section: its heading as the title, its paragraphs in the body;
- **XLSX**: one sheet, the title in the first row, then a row per paragraph: its section's heading and its text;
- **cp1252 text**: the Markdown's lines without the ``#`` marks, in Windows-1252.

For each format, in the same run: (a) conversion alone, in this process, one document after another, over the
first ``--convert-documents`` of them (``convert_office``, or ``decode_text`` for Markdown and text, as the folder
feed decodes them); (b) ``streamdedup run`` on the folder of that format, all its documents, from launch to exit,
with a fresh state (PDF and Office files are then converted in the pool's processes, one per core up to four, eight
in flight; text is decoded in the reading process). Each figure is the median of three runs, interleaved across the
formats, and is also given as a ratio to the Markdown figure of the same run. Last, conversions of one PDF and one
DOCX are sampled with pyinstrument, and mammoth's reading of the DOCX's two largest parts is timed, to say where the
time goes.
"""

from __future__ import annotations

import argparse
import collections
import compileall
import io
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamdedup
from benchmarks.common import save
from benchmarks.measurement import machine_busy
from streamdedup.convert import ConvertLimits
from streamdedup.convert.office import DOCX, PDF, PPTX, XLSX, convert_office
from streamdedup.convert.text import decode_text
from streamdedup.testing.policy_files import Block, policy_blocks, write_policy_docx, write_policy_pdf

#: Documents per format, and of them how many are converted alone: a DOCX takes about a quarter of a second, so
#: the whole benchmark stays within two minutes on two cores.
DOCUMENTS = 60
CONVERT_DOCUMENTS = 20
REPEATS = 3
PDF_PAGES = 3
_MAX_UNPACKED = ConvertLimits().max_unpacked_bytes

_CITIES = ("Lyon", "Porto", "Malmö", "Zürich", "Sevilla", "Tartu", "Brno", "Cork", "Bergen", "Köln")
_APPROVERS = ("Maria Keller", "Jonas Weber", "Ana Ruiz", "Piet de Vries", "Ewa Nowak", "Luca Bianchi")


@dataclass(frozen=True)
class Format:
    """One way a document is kept: its file extension, the content type it converts as, and how it is written."""

    name: str
    extension: str
    content_type: str
    write: Callable[[Sequence[Block], Path], None]


def document_blocks(number: int) -> tuple[Block, ...]:
    """The policy as document ``number`` holds it: its number in the title, one sentence of its own at the end of
    the first paragraph, typographic apostrophes."""
    rng = random.Random(number)
    sentence = (
        f"This copy, number {number:04d} \u2013 cost centre {rng.randrange(1000, 9999)} in"
        f" {rng.choice(_CITIES)}, carries a travel budget of {rng.randrange(20, 400) * 500:,} \u20ac for"
        f" {rng.choice((2025, 2026))}, approved by {rng.choice(_APPROVERS)}."
    )
    blocks = []
    paragraphs = 0
    for block in policy_blocks("policy-v2"):
        text = block.text.replace("'", "\u2019")
        if block.kind == "heading" and block.level == 1:
            text = f"{text} No. {number:04d}"
        elif block.kind == "paragraph":
            paragraphs += 1
            if paragraphs == 1:
                text = f"{text} {sentence}"
        blocks.append(Block(block.kind, text, block.level))
    return tuple(blocks)


def own_sentence(blocks: Sequence[Block]) -> str:
    """The sentence that makes a document its own (the last of its first paragraph)."""
    first = next(block.text for block in blocks if block.kind == "paragraph")
    return first[first.index("This copy, number") :]


def _lines(blocks: Sequence[Block], *, marks: bool) -> str:
    return "\n\n".join(
        ("#" * block.level + " " if marks and block.level else "") + block.text for block in blocks
    )


def write_markdown(blocks: Sequence[Block], path: Path) -> None:
    path.write_text(_lines(blocks, marks=True) + "\n", encoding="utf-8")


def write_cp1252(blocks: Sequence[Block], path: Path) -> None:
    path.write_bytes((_lines(blocks, marks=False) + "\n").encode("cp1252"))


def write_docx(blocks: Sequence[Block], path: Path) -> None:
    write_policy_docx(blocks, path, title=blocks[0].text)


def write_pdf(blocks: Sequence[Block], path: Path) -> None:
    pages, _ = write_policy_pdf(blocks, path)
    if pages != PDF_PAGES:
        raise AssertionError(f"{path.name} has {pages} pages, not {PDF_PAGES}")


def _sections(blocks: Sequence[Block]) -> list[tuple[str, list[str]]]:
    sections: list[tuple[str, list[str]]] = []
    for block in blocks[1:]:
        if block.kind == "heading":
            sections.append((block.text, []))
        else:
            sections[-1][1].append(block.text)
    return sections


def write_pptx(blocks: Sequence[Block], path: Path) -> None:
    from pptx import Presentation

    deck = Presentation()
    title_layout, body_layout = deck.slide_layouts[0], deck.slide_layouts[1]
    slide = deck.slides.add_slide(title_layout)
    assert slide.shapes.title is not None
    slide.shapes.title.text = blocks[0].text
    slide.placeholders[1].text_frame.text = "ACME Corporation, Finance"
    for heading, paragraphs in _sections(blocks):
        slide = deck.slides.add_slide(body_layout)
        assert slide.shapes.title is not None
        slide.shapes.title.text = heading
        frame = slide.placeholders[1].text_frame
        frame.text = paragraphs[0]
        for paragraph in paragraphs[1:]:
            frame.add_paragraph().text = paragraph
    deck.save(str(path))


def write_xlsx(blocks: Sequence[Block], path: Path) -> None:
    from openpyxl import Workbook

    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Policy"
    sheet.append([blocks[0].text])
    sheet.append(["Section", "Text"])
    for heading, paragraphs in _sections(blocks):
        for paragraph in paragraphs:
            sheet.append([heading, paragraph])
    workbook.save(str(path))


FORMATS = (
    Format("Markdown", ".md", "text/markdown", write_markdown),
    Format("DOCX", ".docx", DOCX, write_docx),
    Format("PDF", ".pdf", PDF, write_pdf),
    Format("PPTX", ".pptx", PPTX, write_pptx),
    Format("XLSX", ".xlsx", XLSX, write_xlsx),
    Format("cp1252 text", ".txt", "text/plain", write_cp1252),
)
BASELINE = FORMATS[0].name


def convert(fmt: Format, data: bytes) -> str:
    """A file's text as the folder feed gets it (decoded, or converted to HTML or plain text)."""
    if fmt.content_type.startswith("text/"):
        return decode_text(data)[0]
    return convert_office(data, fmt.content_type, max_unpacked=_MAX_UNPACKED).text


def write_folders(root: Path, documents: int) -> dict[str, list[Path]]:
    """Write ``documents`` documents of every format, a folder per format; return the files by format name."""
    files: dict[str, list[Path]] = {fmt.name: [] for fmt in FORMATS}
    for number in range(1, documents + 1):
        blocks = document_blocks(number)
        for fmt in FORMATS:
            folder = root / fmt.extension.lstrip(".")
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"policy-{number:04d}{fmt.extension}"
            fmt.write(blocks, path)
            files[fmt.name].append(path)
    return files


def check_conversions(files: dict[str, list[Path]]) -> None:
    """Every format's first and last document convert to a text holding the document's own sentence."""
    for fmt in FORMATS:
        for path in (files[fmt.name][0], files[fmt.name][-1]):
            number = int(path.stem.rsplit("-", 1)[1])
            words = " ".join(convert(fmt, path.read_bytes()).split())
            if own_sentence(document_blocks(number)) not in words:
                raise AssertionError(f"{path.name}: the converted text lacks the document's own sentence")


def time_conversions(fmt: Format, payloads: list[bytes]) -> tuple[float, float, list[int]]:
    """Convert every file in this process, one after another: the seconds, the CPU seconds of this process
    meanwhile, and each converted text's length."""
    began, cpu = time.perf_counter(), time.process_time()
    sizes = [len(convert(fmt, data)) for data in payloads]
    return time.perf_counter() - began, time.process_time() - cpu, sizes


@dataclass(frozen=True)
class Run:
    """One ``streamdedup run``: seconds from launch to exit, how many of the machine's cores were busy meanwhile
    (the run's processes and anything else), its outputs by topic, and the mean length of its canonical chunks."""

    seconds: float
    cores_busy: float
    topics: collections.Counter[str]
    chunk_chars: float


def time_run(folder: Path, workdir: Path) -> Run:
    """``streamdedup run FOLDER`` from launch to exit, with a fresh state."""
    state, out = workdir / "state", workdir / "out.jsonl"
    shutil.rmtree(state, ignore_errors=True)
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "streamdedup", "run", str(folder), "--state", str(state),
               "--out", str(out)]  # fmt: skip
    busy, began = machine_busy(), time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    seconds = time.perf_counter() - began
    cores = (machine_busy() - busy) / seconds
    records = [json.loads(line) for line in out.read_text().splitlines()]
    topics = collections.Counter(record["topic"] for record in records)
    chunks = [len(r["value"]["text"]) for r in records if r["topic"] == "canonical-chunks" and r["value"]]
    return Run(seconds, cores, topics, statistics.mean(chunks) if chunks else 0.0)


# Where one conversion's time goes: the frames whose time a part counts (file, function), first match from the root.
PDF_PARTS = {
    "an object per character, placed and measured (render_char)": ("pdfminer/converter.py", "render_char"),
    "layout analysis: characters into lines and boxes (end_page)": ("pdfminer/converter.py", "end_page"),
    "parsing the PDF syntax (nextobject)": ("pdfminer/psparser.py", "nextobject"),
}
PDF_PROFILED = ("pdfminer/high_level.py", "extract_pages")
DOCX_PARTS = {
    "parsing XML into a DOM (xml.dom.minidom)": ("xml/dom/minidom.py", "parse"),
    "mammoth's tree from the DOM (convert_node)": ("mammoth/docx/xmlparser.py", "convert_node"),
}
DOCX_PROFILED = ("mammoth/__init__.py", "convert_to_html")


def _frames_time(frame: Any, targets: dict[str, tuple[str, str]], into: dict[str, float]) -> None:
    """Add to ``into[part]`` the time of the outermost frames under ``frame`` matching each part's target."""
    for part, (path, function) in targets.items():
        if frame.function == function and (frame.file_path or "").endswith(path):
            into[part] = into.get(part, 0.0) + frame.time
            return
    for child in frame.children:
        _frames_time(child, targets, into)


def profile_conversion(
    fmt: Format, data: bytes, library: tuple[str, str], parts: dict[str, tuple[str, str]], repeat: int
) -> dict[str, Any]:
    """Sample ``repeat`` conversions of one file (pyinstrument): the share of each part, of the rest of the
    converting library (``library``: its entry frame) and of streamdedup's own code around it."""
    from pyinstrument import Profiler

    convert(fmt, data)  # imports and caches, as in a pool process that converted a file before
    profiler = Profiler(interval=0.0005)
    profiler.start()
    for _ in range(repeat):
        convert(fmt, data)
    profiler.stop()
    root = profiler.last_session.root_frame() if profiler.last_session else None
    assert root is not None
    found: dict[str, float] = {}
    _frames_time(root, {"convert": ("streamdedup/convert/office.py", "convert_office")}, found)
    _frames_time(root, {"library": library}, found)
    _frames_time(root, parts, found)
    total, in_library = found["convert"], found["library"]
    shares = {part: found.get(part, 0.0) / total for part in parts}
    shares[f"the rest of {library[0].split('/')[0]}"] = (
        in_library - sum(found.get(p, 0.0) for p in parts)
    ) / total
    shares["streamdedup around it"] = (total - in_library) / total
    return {
        "format": fmt.name,
        "conversions": repeat,
        "milliseconds": total / repeat * 1000,
        "shares": shares,
    }


def docx_members(data: bytes, repeat: int = 5) -> dict[str, Any]:
    """How much of a DOCX conversion reading its styles part takes: the main members' sizes, and the median
    milliseconds mammoth takes to read each (its XML reader) beside a whole conversion of the file."""
    import zipfile

    from mammoth.docx import office_xml

    archive = zipfile.ZipFile(io.BytesIO(data))
    found: dict[str, Any] = {}
    for member in ("word/styles.xml", "word/document.xml"):
        raw = archive.read(member)
        times = []
        for _ in range(repeat):
            began = time.perf_counter()
            office_xml.read(io.BytesIO(raw))
            times.append(time.perf_counter() - began)
        found[member] = {
            "bytes": len(raw),
            "elements": {
                "w:style": raw.count(b"<w:style "),
                "w:p": raw.count(b"<w:p>") + raw.count(b"<w:p "),
            },
            "milliseconds": statistics.median(times) * 1000,
        }
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        convert_office(data, DOCX, max_unpacked=_MAX_UNPACKED)
        times.append(time.perf_counter() - began)
    return {"members": found, "convert_milliseconds": statistics.median(times) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=DOCUMENTS, help="documents per format")
    parser.add_argument(
        "--convert-documents", type=int, default=CONVERT_DOCUMENTS,
        help="of which this many are converted alone (in this process, three times)",
    )  # fmt: skip
    args = parser.parse_args()
    documents, sample = args.documents, min(args.convert_documents, args.documents)
    workdir = Path(tempfile.mkdtemp(prefix="streamdedup-convert-"))
    try:
        began = time.perf_counter()
        files = write_folders(workdir / "docs", documents)
        print(
            f"wrote {documents} documents in each of {len(FORMATS)} formats in {time.perf_counter() - began:.1f} s"
        )
        check_conversions(files)
        payloads = {name: [path.read_bytes() for path in paths] for name, paths in files.items()}
        file_bytes = {name: statistics.mean(len(data) for data in datas) for name, datas in payloads.items()}

        # A user's runs after the first load the package's modules compiled (see benchmarks/cli_run.py).
        compileall.compile_dir(str(Path(streamdedup.__file__).parent), quiet=1)
        warm = workdir / "warm"
        for fmt in FORMATS:  # what a first run loads, as any earlier run would have
            folder = warm / fmt.name
            folder.mkdir(parents=True)
            for path in files[fmt.name][:3]:
                shutil.copy(path, folder / path.name)
            time_run(folder, workdir)
            convert(fmt, payloads[fmt.name][0])

        convert_seconds: dict[str, list[float]] = {fmt.name: [] for fmt in FORMATS}
        convert_cpu: dict[str, list[float]] = {fmt.name: [] for fmt in FORMATS}
        text_chars: dict[str, float] = {}
        for _ in range(REPEATS):
            for fmt in FORMATS:
                seconds, cpu, sizes = time_conversions(fmt, payloads[fmt.name][:sample])
                convert_seconds[fmt.name].append(seconds)
                convert_cpu[fmt.name].append(cpu)
                text_chars[fmt.name] = statistics.mean(sizes)
        run_seconds: dict[str, list[float]] = {fmt.name: [] for fmt in FORMATS}
        run_cores: dict[str, list[float]] = {fmt.name: [] for fmt in FORMATS}
        outputs: dict[str, dict[str, int]] = {}
        chunk_chars: dict[str, float] = {}
        for _ in range(REPEATS):
            for fmt in FORMATS:
                run = time_run(files[fmt.name][0].parent, workdir)
                run_seconds[fmt.name].append(run.seconds)
                run_cores[fmt.name].append(run.cores_busy)
                outputs[fmt.name] = dict(sorted(run.topics.items()))
                chunk_chars[fmt.name] = run.chunk_chars
                if run.topics["source-mappings"] != documents or run.topics["dlq"]:
                    raise AssertionError(
                        f"{fmt.name}: a mapping per document and no dead letter expected: {run.topics}"
                    )

        by_type = {fmt.content_type: fmt for fmt in FORMATS}
        pdf, docx = payloads[by_type[PDF].name][0], payloads[by_type[DOCX].name][0]
        profiles = [
            profile_conversion(by_type[PDF], pdf, PDF_PROFILED, PDF_PARTS, repeat=10),
            profile_conversion(by_type[DOCX], docx, DOCX_PROFILED, DOCX_PARTS, repeat=4),
        ]
        members = docx_members(docx)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    base_convert = sample / statistics.median(convert_seconds[BASELINE])
    base_run = documents / statistics.median(run_seconds[BASELINE])
    formats: dict[str, dict[str, Any]] = {}
    print(f"\n{documents} documents per format; median of {REPEATS}; ratios to {BASELINE} in the same run")
    print(f"{'format':<12} {'file KB':>8} {'text chars':>10} {'convert/s':>10} {'ratio':>7} {'run/s':>7} "
          f"{'run s':>6} {'ratio':>7} {'cores busy':>10}")  # fmt: skip
    for fmt in FORMATS:
        converted = sample / statistics.median(convert_seconds[fmt.name])
        ran_seconds = statistics.median(run_seconds[fmt.name])
        ran = documents / ran_seconds
        formats[fmt.name] = {
            "extension": fmt.extension,
            "content_type": fmt.content_type,
            "file_bytes": file_bytes[fmt.name],
            "text_chars": text_chars[fmt.name],
            "convert_seconds": convert_seconds[fmt.name],
            "convert_cpu_seconds": convert_cpu[fmt.name],
            "convert_docs_per_second": converted,
            "convert_ratio_to_markdown": converted / base_convert,
            "run_seconds": run_seconds[fmt.name],
            "run_machine_cores_busy": run_cores[fmt.name],
            "run_wall_seconds": ran_seconds,
            "run_docs_per_second": ran,
            "run_ratio_to_markdown": ran / base_run,
            "outputs": outputs[fmt.name],
            "canonical_chunk_chars": chunk_chars[fmt.name],
        }
        print(f"{fmt.name:<12} {file_bytes[fmt.name] / 1024:>8.1f} {text_chars[fmt.name]:>10,.0f} "
              f"{converted:>10,.0f} {converted / base_convert:>7.3f} {ran:>7.1f} {ran_seconds:>6.2f} "
              f"{ran / base_run:>7.2f} {statistics.median(run_cores[fmt.name]):>10.2f}")  # fmt: skip
    for found in profiles:
        shares = "; ".join(f"{part} {share:.0%}" for part, share in found["shares"].items())
        print(f"one {found['format']} conversion, sampled: {found['milliseconds']:.0f} ms; {shares}")
    styles, body = members["members"]["word/styles.xml"], members["members"]["word/document.xml"]
    print(f"DOCX: reading word/styles.xml ({styles['bytes']:,} bytes) {styles['milliseconds']:.0f} ms, "
          f"word/document.xml ({body['bytes']:,} bytes) {body['milliseconds']:.1f} ms, "
          f"of a {members['convert_milliseconds']:.0f} ms conversion")  # fmt: skip
    save(
        "convert_formats",
        {
            "documents": documents,
            "convert_documents": sample,
            "repeats": REPEATS,
            "pdf_pages": PDF_PAGES,
            "baseline": BASELINE,
            "formats": formats,
            "profiles": profiles,
            "docx_members": members,
        },
    )


if __name__ == "__main__":
    main()
