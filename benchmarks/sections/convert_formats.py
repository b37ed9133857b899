"""The section on documents as files are kept: PDF, Office and legacy-encoded text beside the same text in Markdown."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.sections.figures import load_result, machine_of


def _ratio(value: float) -> str:
    """A ratio to two significant figures below 0.1 (conversion alone is thousands of times slower than UTF-8)."""
    return f"{value:.2g}" if value < 0.1 else f"{value:.2f}"


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def section(lines: list[str]) -> None:
    result = load_result("convert_formats")
    if result is None:
        lines += ["Not run yet: `python -m benchmarks.convert_formats`.", ""]
        return
    formats: dict[str, dict[str, Any]] = result["formats"]
    documents, sample, repeats = result["documents"], result["convert_documents"], result["repeats"]
    baseline = result["baseline"]
    cores = result["machine"]["cores"]
    lines += [
        f"Machine: {machine_of(result)}. Command: `{result['command']}`.",
        "",
        f"{documents} documents per format, each the travel and expenses policy of",
        "`streamdedup.testing.policy_files` (a title, five sections, 16 paragraphs) with its number in the title",
        "and a sentence of its own (a cost centre,",
        "a city, a budget in euros, an approver), so the engine sees near copies, not only exact ones. The same texts",
        "as Markdown (the baseline), as DOCX (Word heading styles, running header and footer), as PDF (A4,",
        f"{result['pdf_pages']} pages each, running header and page-number footer), as a PPTX deck (a title slide,",
        "then a slide per section), as an XLSX sheet (a row per paragraph beside its section's heading), and as plain",
        "text in cp1252 (typographic apostrophes, a euro sign and an en dash, so detection runs).",
        "",
        f"*Conversion alone*: the first {sample} documents of each format converted one after another in one",
        "process (`convert_office`; `decode_text` for Markdown and text, as the folder feed reads them: for UTF-8",
        "a check and a decode, for other bytes detection). *Run*: `streamdedup run FOLDER --state S --out O` on",
        "the folder of one format, from launch to exit, fresh state; PDF and Office files are then converted in",
        f"the pool's processes (one per core up to four: {min(4, cores)}), text is decoded in the reading process.",
        f"Each figure is the median of {repeats} runs, interleaved across the formats; ratios are to the Markdown",
        f"figure of the same run (Markdown = 1.00). The machine has {cores} cores and other work ran on it",
        "meanwhile: compare the ratios, not the rates.",
        "",
        "| format | file (KiB) | converted text (characters) | conversion alone (docs/s) | ratio to Markdown "
        "| `streamdedup run` (docs/s) | run, wall (s) | ratio to Markdown |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, found in formats.items():
        label = f"{name} (baseline)" if name == baseline else name
        lines.append(
            f"| {label} | {found['file_bytes'] / 1024:.1f} | {found['text_chars']:,.0f} "
            f"| {_rate(found['convert_docs_per_second'])} | {_ratio(found['convert_ratio_to_markdown'])} "
            f"| {_rate(found['run_docs_per_second'])} | {found['run_wall_seconds']:.2f} "
            f"| {_ratio(found['run_ratio_to_markdown'])} |"
        )
    busy = [statistics.median(found["run_machine_cores_busy"]) for found in formats.values()]
    had = statistics.median(
        cpu / seconds
        for found in formats.values()
        for cpu, seconds in zip(found["convert_cpu_seconds"], found["convert_seconds"], strict=True)
    )
    lines += [
        "",
        f"While the runs went, {min(busy):.1f} to {max(busy):.1f} of the machine's {result['machine']['cores']}"
        " cores were busy (median per format; the run's processes and whatever else ran); conversion alone had"
        f" {had:.0%} of a core (median).",
        "",
        "Converted text is what the engine chunks: HTML for DOCX, PPTX and XLSX (tags included), plain text for",
        "PDF (running header and footer removed) and for the text files. Outputs of the last run of each folder:",
        "",
        "| format | canonical chunks | their mean length (characters) | review flags | audit records |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {found['outputs'].get('canonical-chunks', 0):,} | {found['canonical_chunk_chars']:,.0f} "
            f"| {found['outputs'].get('review', 0):,} | {found['outputs'].get('audit', 0):,} |"
            for name, found in formats.items()
        ),
        "",
        "The deck and the sheet are cut into fewer, longer chunks than the other formats (their mean lengths",
        "above): the sentence each document has of its own is then a small part of a chunk otherwise the same in",
        "every document, so those chunks are near copies of one another and, as their numbers differ, are flagged",
        "as fact conflicts (`review`), where in the other formats the chunks that hold it stay distinct.",
        "",
    ]
    _where_the_time_goes(lines, result)


def _where_the_time_goes(lines: list[str], result: dict[str, Any]) -> None:
    formats = result["formats"]
    profiles = {found["format"]: found for found in result["profiles"]}
    pdf, docx = profiles["PDF"], profiles["DOCX"]
    members = result["docx_members"]
    styles, body = members["members"]["word/styles.xml"], members["members"]["word/document.xml"]
    markdown_run = formats[result["baseline"]]["run_wall_seconds"]
    documents = result["documents"]
    lines += [
        "**Where the time goes.** One conversion of each, sampled with pyinstrument (shares of the conversion;",
        "the profiler's own cost is spread over every call):",
        "",
        "| conversion | part | share |",
        "|---|---|---:|",
        *(f"| PDF | {part} | {share:.0%} |" for part, share in pdf["shares"].items()),
        *(f"| DOCX | {part} | {share:.0%} |" for part, share in docx["shares"].items()),
        "",
        f"A PDF's time is pdfminer's: it makes a positioned, measured object of every character of the page"
        f" ({_share(pdf, 'render_char')}), then groups characters into lines and lines into boxes by their"
        f" positions ({_share(pdf, 'end_page')}); the PDF syntax itself is a small part"
        f" ({_share(pdf, 'nextobject')}), and so is what streamdedup does with the boxes (paragraphs, running"
        f" headers and footers: {pdf['shares']['streamdedup around it']:.0%}). A DOCX's time is mammoth reading"
        f" XML into a DOM (minidom) and then into its own tree, and nearly all of it is the styles part, not the"
        f" text: word/styles.xml ({styles['bytes'] / 1024:,.0f} KiB, the {styles['elements']['w:style']} styles"
        f" of the template python-docx writes from) takes {styles['milliseconds']:.0f} ms to read,"
        f" word/document.xml ({body['bytes'] / 1024:,.0f} KiB, the policy's {body['elements']['w:p']} paragraphs,"
        f" headings included) {body['milliseconds']:.1f} ms, of a"
        f" {members['convert_milliseconds']:.0f} ms conversion. In a run, PDF and Office files are converted in"
        f" the pool's processes while the engine takes in what is converted: the PDF folder took"
        f" {_run(formats, 'PDF')} from launch, where converting its {documents} files one after another takes"
        f" {_alone(formats, 'PDF', documents)}; the DOCX folder {_run(formats, 'DOCX')}, against"
        f" {_alone(formats, 'DOCX', documents)}; the Markdown folder {markdown_run:.2f} s.",
        "",
    ]


def _share(profile: dict[str, Any], function: str) -> str:
    """The share of the part named after ``function`` in a profile."""
    for part, share in profile["shares"].items():
        if f"({function})" in part:
            return f"{share:.0%}"
    return "?"


def _run(formats: dict[str, Any], name: str) -> str:
    return f"{formats[name]['run_wall_seconds']:.2f} s"


def _alone(formats: dict[str, Any], name: str, documents: int) -> str:
    return f"{documents / formats[name]['convert_docs_per_second']:.1f} s"
