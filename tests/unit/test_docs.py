"""The documentation: README.md (the front page) and the pages in docs/ (the site that mkdocs.yml builds).

Every relative link and anchor resolves; every Python example compiles and its ``streamdedup`` imports exist; every
``streamdedup`` command, ``make`` target and ``STREAMDEDUP_*`` setting the text names exists; the settings page
lists every setting with its default; and the site builds with ``mkdocs build --strict``.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer.main
from markdown.extensions.toc import slugify as toc_slugify
from markdown_it import MarkdownIt
from markdown_it.token import Token

from streamdedup.cli.main import app
from streamdedup.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FILES = [README, *PAGES]
IDS = [str(path.relative_to(ROOT)) for path in FILES]

SHELL = {"sh", "shell", "bash", "console"}
PYTHON = {"python", "py"}
#: What a fenced block may be labelled; a block without a label would escape the checks below.
LANGUAGES = SHELL | PYTHON | {"text", "json", "toml"}


@dataclass(frozen=True)
class Doc:
    """One Markdown file, parsed: its links, headings, fenced blocks and inline code spans."""

    path: Path
    links: list[tuple[int, str]]  # (line, target) of every link and image
    headings: list[str]  # the text of every heading, in order
    fences: list[tuple[int, str, str]]  # (line, info, content)
    code_spans: list[tuple[int, str]]


@cache
def parse(path: Path) -> Doc:
    tokens = MarkdownIt("commonmark").enable("table").parse(path.read_text(encoding="utf-8"))
    links: list[tuple[int, str]] = []
    headings: list[str] = []
    fences: list[tuple[int, str, str]] = []
    spans: list[tuple[int, str]] = []
    for index, token in enumerate(tokens):
        line = token.map[0] + 1 if token.map else 0
        if token.type == "fence":
            fences.append((line, token.info.strip(), token.content))
        elif token.type == "heading_open":
            headings.append(_text(tokens[index + 1].children or []))
        elif token.type == "inline":
            for child in token.children or []:
                if child.type == "link_open":
                    links.append((line, str(child.attrs["href"])))
                elif child.type == "image":
                    links.append((line, str(child.attrs["src"])))
                elif child.type == "code_inline":
                    spans.append((line, child.content))
    return Doc(path, links, headings, fences, spans)


def _text(children: list[Token]) -> str:
    """Return a heading's text as a reader sees it (code spans keep their content, markup goes)."""
    return "".join(child.content for child in children if child.type in ("text", "code_inline"))


def github_slug(text: str) -> str:
    """Return the anchor GitHub gives a heading: lower case, punctuation dropped, each space a hyphen."""
    text = unicodedata.normalize("NFC", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def mkdocs_slug(text: str) -> str:
    """Return the anchor MkDocs' toc extension gives a heading (mkdocs.yml keeps its default slugify)."""
    return toc_slugify(text, "-")


def anchors(path: Path) -> set[str]:
    """Return the anchors of a Markdown file: mkdocs' for a page of the site, GitHub's for any other file."""
    in_site = path.parent == DOCS
    slug = mkdocs_slug if in_site else github_slug
    seen: dict[str, int] = {}
    found = set()
    for heading in parse(path).headings:
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        # A repeated heading: mkdocs appends _1, _2, ...; GitHub -1, -2, ...
        found.add(base if count == 0 else f"{base}{'_' if in_site else '-'}{count}")
    return found


def test_the_slug_functions_agree_with_the_renderers() -> None:
    assert github_slug("Event contract (v1)") == "event-contract-v1"
    assert github_slug("Chunking, markup and boilerplate") == "chunking-markup-and-boilerplate"
    assert mkdocs_slug("Event contract (v1)") == "event-contract-v1"
    assert mkdocs_slug("Bounds on one input event") == "bounds-on-one-input-event"


# (a) Links and anchors.


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    problems = []
    checked = 0
    for line, href in parse(path).links:
        if re.match(r"[a-z][a-z0-9+.-]*:", href):  # https:, mailto:: not ours to check
            continue
        checked += 1
        target, _, anchor = href.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        where = f"{path.relative_to(ROOT)}:{line}: {href}"
        if not resolved.exists():
            problems.append(f"{where}: no file {resolved.relative_to(ROOT)}")
            continue
        if path.parent == DOCS and not resolved.is_relative_to(DOCS):
            problems.append(f"{where}: the site cannot link outside docs/ (name the file in plain text)")
        if anchor:
            if resolved.suffix != ".md":
                problems.append(f"{where}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(resolved):
                problems.append(
                    f"{where}: no heading with the anchor #{anchor} in {resolved.relative_to(ROOT)}"
                )
    assert not problems, "\n".join(problems)
    if path in (README, DOCS / "index.md"):
        assert checked > 5, "the front pages link to the reference pages"


@pytest.mark.parametrize("path", PAGES, ids=IDS[1:])
def test_lists_and_tables_on_the_site_start_after_a_blank_line(path: Path) -> None:
    # GitHub starts a list or a table right under a paragraph; Python-Markdown, which builds the site, reads on.
    problems = []
    lines = path.read_text(encoding="utf-8").splitlines()
    fenced = False
    for number, (before, line) in enumerate(itertools.pairwise(lines), 2):
        if before.startswith("```"):
            fenced = not fenced
        starts = re.match(r"([-*] |\d+\. |\|)", line)
        if not fenced and starts and before.strip() and not re.match(r"\s|[-*] |\d+\. |\||#", before):
            problems.append(f"{path.relative_to(ROOT)}:{number}: {line[:40]!r} needs a blank line above")
    assert not problems, "\n".join(problems)


# (b) Python examples.


def python_blocks() -> list[Any]:
    return [
        pytest.param(path, line, code, id=f"{path.relative_to(ROOT)}:{line}")
        for path in FILES
        for line, info, code in parse(path).fences
        if info in PYTHON
    ]


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_fenced_block_names_its_language(path: Path) -> None:
    unlabelled = [
        f"{path.relative_to(ROOT)}:{line}: ```{info}"
        for line, info, _ in parse(path).fences
        if info not in LANGUAGES
    ]
    assert not unlabelled, f"label each block with one of {sorted(LANGUAGES)}:\n" + "\n".join(unlabelled)


@pytest.mark.parametrize(("path", "line", "code"), python_blocks())
def test_python_examples_compile_and_import_what_exists(path: Path, line: int, code: str) -> None:
    where = f"{path.relative_to(ROOT)}:{line}"
    tree = compile(code, where, "exec", ast.PyCF_ONLY_AST)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "streamdedup":
            if not _is_module(str(node.module)):
                problems.append(f"{where}: no module {node.module}")
                continue
            module = importlib.import_module(str(node.module))
            for alias in node.names:
                if not hasattr(module, alias.name) and not _is_module(f"{node.module}.{alias.name}"):
                    problems.append(f"{where}: {node.module} has no {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "streamdedup" and not _is_module(alias.name):
                    problems.append(f"{where}: no module {alias.name}")
    assert not problems, "\n".join(problems)


def _is_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return False
    return True


def test_the_readme_shows_the_public_import_paths() -> None:
    lines = {
        line.strip()
        for _, info, content in parse(README).fences
        if info in PYTHON
        for line in content.splitlines()
    }
    for statement in (
        "from streamdedup.view import View",
        "from streamdedup.retrieval import SafetyNet",
        "from streamdedup.adapters.langchain import SafetyNetCompressor",
    ):
        assert statement in lines


# (c) Commands, make targets and settings.


def shell_commands(path: Path) -> list[tuple[int, list[str]]]:
    """Return every command line of the file's shell blocks and of its code spans that run a command."""
    found = []
    for line, info, content in parse(path).fences:
        if info in SHELL:
            for offset, text in enumerate(content.replace("\\\n", " ").splitlines()):
                found.append((line + 1 + offset, shlex.split(text, comments=True)))
    for line, span in parse(path).code_spans:
        if re.match(r"(\S*/)?(streamdedup|make)\s", span):
            found.append((line, shlex.split(span)))
    return found


@cache
def cli() -> Any:
    """Return the ``streamdedup`` command as Typer builds it (a group: its ``commands`` by name, its ``params``)."""
    group = typer.main.get_command(app)
    assert "run" in getattr(group, "commands", {})
    return group


def _value_options(command: Any) -> set[str]:
    """Return the options of a command that take a value (``--set NAME=VALUE``), flags left out."""
    return {
        name
        for param in command.params
        if param.param_type_name == "option" and not param.is_flag
        for name in param.opts
    }


def check_streamdedup(words: list[str]) -> str | None:
    """Return what is wrong with a ``streamdedup ...`` command line (its words after the program), or None."""
    group = cli()
    takes_value = _value_options(group)
    rest = iter(words)
    for word in rest:
        if word in takes_value:
            value = next(rest, "")
            name = value.partition("=")[0].lower().replace("-", "_")
            if word in ("--set", "-s") and name not in Settings.model_fields:
                return f"--set {value}: no setting {name}"
            continue
        if word.startswith("-"):
            continue
        command = group.commands.get(word)
        if command is None:
            return f"no command {word!r} (commands: {', '.join(sorted(group.commands))})"
        if not hasattr(command, "commands"):
            return None
        group, takes_value = command, _value_options(command)
    return None  # the program or a group named alone (`streamdedup decide` in prose)


@cache
def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", text, flags=re.M))


def check_make(words: list[str]) -> str | None:
    targets = [word for word in words if not word.startswith("-") and "=" not in word]
    if not targets:
        return "no target"
    missing = [target for target in targets if target not in make_targets()]
    return f"no Makefile target {', '.join(missing)}" if missing else None


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_command_and_make_target_exists(path: Path) -> None:
    problems = []
    for line, words in shell_commands(path):
        for index, word in enumerate(words):
            if word == "streamdedup" or word.endswith("/bin/streamdedup"):
                problem = check_streamdedup(words[index + 1 :])
            elif word == "make" and index == 0:
                problem = check_make(words[1:])
            else:
                continue
            if problem:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {shlex.join(words)}: {problem}")
    assert not problems, "\n".join(problems)


def test_the_readme_is_a_front_page_under_12_kb() -> None:
    # What it is, the two commands, a tour and links; the reference lives in docs/.
    assert README.stat().st_size < 12 * 1024


def test_the_readme_gives_the_setup_and_test_commands() -> None:
    # CI runs `make test`, the command README.md gives a new clone; `make example` runs the bundled example.
    blocks = [content.strip() for _, info, content in parse(README).fences if info in SHELL]
    assert "make example" in blocks
    assert "make test" in blocks
    assert {"example", "test", "docs"} <= make_targets()


def setting_names() -> set[str]:
    return {f"STREAMDEDUP_{name.upper()}" for name in Settings.model_fields}


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_setting_named_exists(path: Path) -> None:
    known = setting_names()
    problems = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for match in re.finditer(r"\bSTREAMDEDUP_[A-Z0-9_]+\*?", text):
            name = match.group()
            prefix = name.rstrip("*")
            exists = any(k.startswith(prefix) for k in known) if prefix.endswith("_") else name in known
            if not exists:
                problems.append(f"{path.relative_to(ROOT)}:{number}: {name} is not a setting")
    assert not problems, "\n".join(problems)


def settings_rows() -> list[tuple[list[str], str]]:
    """Return the rows of the settings page's tables: (the settings a row names, its default cell)."""
    rows = []
    for line in (DOCS / "settings.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        names = re.findall(r"`(STREAMDEDUP_[A-Z0-9_]+\*?)`", cells[0]) if cells else []
        if names:
            rows.append((names, cells[1]))
    return rows


def test_the_settings_page_lists_every_setting_with_its_default() -> None:
    rows = settings_rows()
    listed = {name for names, _ in rows for name in names}
    assert setting_names() - listed == set(), "settings missing from docs/settings.md"
    fields = Settings.model_fields
    checked = 0
    for names, default in rows:
        if any(name.endswith("*") for name in names):
            continue
        shown = (
            [part.strip().strip("`") for part in default.split(", ")]
            if len(names) > 1
            else [default.strip("`")]
        )
        assert len(shown) == len(names), f"{names}: one default each, not {default!r}"
        for name, cell in zip(names, shown, strict=True):
            value = fields[name.removeprefix("STREAMDEDUP_").lower()].default
            assert _same_default(value, cell), f"{name}: the page says {cell!r}, Settings says {value!r}"
            checked += 1
    assert checked > 30


def _same_default(value: Any, cell: str) -> bool:
    if value is None:
        return cell == "—"
    if isinstance(value, bool):
        return cell == str(value).lower()
    if isinstance(value, (int, float)):
        return float(cell.replace(",", "")) == value
    if isinstance(value, tuple):
        return cell == ",".join(value) or (not value and cell == "—")
    if value == "":
        return cell == "none"
    return cell == str(value)


# (d) The site.


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    # NO_MKDOCS_2_WARNING: Material's notice about MkDocs 2.0, printed on every build, is no finding of ours.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml")]
    done = subprocess.run(
        [*command, "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for page in PAGES:
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.exists(), f"{page.name} was not built"
        # The anchors the link check expects are the ones the site has (the same slug function as mkdocs).
        ids = set(re.findall(r'<h[1-6] id="([^"]+)"', built.read_text(encoding="utf-8")))
        assert ids == anchors(page), page.name
    assert (site / "images" / "console-queue.png").exists()
