"""The review console in a real browser, on a fresh copy of the bundled example, with the console as a subprocess.

The tests run in order on one state and one console (each step is its own test, so that one failing step leaves
the others to say what they see): keep the float16/float32 pair separate; add a new copy of its text through
``streamdedup run`` while the console runs (no new flag, and the state was free to open); merge the refund pair and
check the mapping with ``streamdedup inspect``; be refused a merge across the acl_boundary; judge calibration
pairs; see the boilerplate table. Each tab's screenshot is written to out/screenshots/ and to the test's tmp_path.
"""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.helpers import stop

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "feed.jsonl"
IMAGES = ROOT / "out" / "screenshots"
#: Bounded waits, generous for a slow machine (milliseconds for Playwright, seconds for processes).
WAIT_MS = 60_000
START_SECONDS = 120
COMMAND_SECONDS = 240
NEW_COPY = "wiki:ml/serving-guide-copy"
expect.set_options(timeout=WAIT_MS)
REFUND_SOURCES = ("web:help/refunds", "zendesk:macros/refund-reply")


@dataclass(frozen=True)
class Example:
    """A fresh copy of the example's state and output file."""

    root: Path
    state: Path
    out: Path


def streamdedup(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run a streamdedup command to its end (bounded) and return what it did."""
    return subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
        check=False,
    )


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Example:
    """Run the bundled feed as ``make example`` does, into a fresh state."""
    root = tmp_path_factory.mktemp("console")
    made = Example(root, root / "state", root / "out.jsonl")
    done = streamdedup("run", EXAMPLE, "--state", made.state, "--out", made.out, "--batch-size", "1")
    assert done.returncode == 0, done.stderr
    return made


def _lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


@pytest.fixture(scope="module")
def console(example: Example) -> Iterator[str]:
    """Start ``streamdedup review`` on port 0 and return the URL it prints; stop it at the end."""
    log = (example.root / "console.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "review",
            "--state",
            str(example.state),
            "--out",
            str(example.out),
            "--port",
            "0",
            "--by",
            "tester",
            "--verdicts",
            str(example.root / "verdicts.json"),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    assert process.stdout is not None
    printed: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(process.stdout, printed), daemon=True)
    reader.start()
    try:
        url = None
        while url is None:
            try:
                line = printed.get(timeout=START_SECONDS)
            except queue.Empty:
                break
            if "serving http" in line:
                url = line.split("serving ", 1)[1].strip()
        if url is None:
            process.kill()
            process.wait(timeout=COMMAND_SECONDS)
            log.flush()
            pytest.fail(
                f"the console printed no URL within {START_SECONDS} s (exit {process.returncode}): "
                + (example.root / "console.log").read_text()
            )
        yield url
    finally:
        stop(process)
        reader.join(timeout=30)
        process.stdout.close()
        log.close()


@pytest.fixture(scope="module")
def page(browser: Browser, console: str) -> Iterator[Page]:
    """One browser page for the whole scenario."""
    context = browser.new_context(viewport={"width": 1300, "height": 900}, base_url=console)
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()


def screenshot(page: Page, name: str, tmp_path: Path) -> None:
    """Save the page as out/screenshots/<name> (overwritten each run; docs/images/ holds a copy) and under tmp_path."""
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(tmp_path / name), full_page=True)
    shutil.copyfile(tmp_path / name, IMAGES / name)


def decide(page: Page, button_name: str, flag: Locator) -> None:
    """Click a decision button, wait for the answer and the reload that follows it."""
    button = flag.get_by_role("button", name=button_name, exact=True)
    with page.expect_navigation(timeout=WAIT_MS), page.expect_response("**/api/decision") as answer:
        button.click()
    assert answer.value.status == 200, answer.value.text()


def float_flag_key(example: Example) -> str:
    """Return the key of the float16/float32 flag from the output file."""
    for line in example.out.read_text().splitlines():
        record = json.loads(line)
        if record["topic"] == "review" and record["value"] and "float16" in record["value"].get("detail", ""):
            return str(record["key"])
    raise AssertionError("the example has no float16/float32 flag")


def test_keep_separate_resolves_the_float_pair(page: Page, example: Example):
    page.goto("/queue")
    flag = page.locator("#open article.flag", has=page.locator("mark.fact", has_text="float16"))
    expect(flag).to_have_count(1, timeout=WAIT_MS)
    # both tokens are marked as facts in the texts themselves
    expect(flag.locator(".side .text mark.fact", has_text="float16")).to_be_visible()
    expect(flag.locator(".side .text mark.fact", has_text="float32")).to_be_visible()
    key = flag.get_attribute("data-key")
    assert key == float_flag_key(example)
    decide(page, "Keep separate", flag)
    page.reload()
    decided = page.locator(f'#decided article.flag[data-key="{key}"]')
    expect(decided).to_be_visible(timeout=WAIT_MS)
    expect(decided.locator(".decision-kind")).to_have_text("keep_separate")
    expect(decided.locator(".decision-by")).to_have_text("tester")
    expect(decided.get_by_role("button", name="Undo (reopen)")).to_be_visible()
    expect(page.locator(f'#open article.flag[data-key="{key}"]')).to_have_count(0)


def test_a_new_copy_of_a_kept_separate_text_raises_no_new_flag(page: Page, example: Example, tmp_path: Path):
    key = float_flag_key(example)
    float16 = next(
        json.loads(line)["value"]
        for line in example.out.read_text().splitlines()
        if json.loads(line)["key"] == key and json.loads(line)["value"]
    )["a"]
    assert "float16" in float16["text"]
    event = {
        "schema": "streamdedup.document/v1",
        "op": "upsert",
        "source_id": NEW_COPY,
        "version": 1,
        "modified_at": "2024-06-01T09:00:00Z",
        "acl": ["eng"],
        "chunks": [float16["text"]],
        "uri": "https://wiki.example.com/ml/serving-guide-copy",
        "title": "Serving guide (copy)",
    }
    feed = tmp_path / "new-copy.jsonl"
    feed.write_text(json.dumps(event) + "\n")
    before = len(example.out.read_text().splitlines())
    # the console runs meanwhile: it must not hold the state
    done = streamdedup("run", feed, "--state", example.state, "--out", example.out, "--batch-size", "1")
    assert done.returncode == 0, done.stderr
    added = [json.loads(line) for line in example.out.read_text().splitlines()[before:]]
    assert added, "the new copy caused no output"
    assert [r for r in added if r["topic"] == "review" and r["value"] is not None] == []
    page.goto("/queue")
    decided = page.locator(f'#decided article.flag[data-key="{key}"]')
    # the console read the new outputs: the new copy is one more source of the kept-separate text
    expect(decided.locator(f'li.source[data-source-id="{NEW_COPY}"]')).to_be_visible(timeout=WAIT_MS)
    expect(
        page.locator("#open article.flag", has=page.locator("mark.fact", has_text="float16"))
    ).to_have_count(0)
    expect(page.locator(f'#open li.source[data-source-id="{NEW_COPY}"]')).to_have_count(0)


def test_merge_joins_the_refund_pair(page: Page, example: Example):
    page.goto("/queue")
    flag = page.locator("#open article.flag[data-reason=fact_conflict]", has_text="full refund within")
    expect(flag).to_have_count(1, timeout=WAIT_MS)
    key = flag.get_attribute("data-key")
    decide(page, "Merge", flag)
    page.reload()
    decided = page.locator(f'#decided article.flag[data-key="{key}"]')
    expect(decided.locator(".decision-kind")).to_have_text("merge", timeout=WAIT_MS)
    mappings = {}
    for source_id in REFUND_SOURCES:
        shown = streamdedup("inspect", "--state", example.state, "--source", source_id, "--json")
        assert shown.returncode == 0, shown.stderr
        (position,) = json.loads(shown.stdout)["chunks"]
        mappings[source_id] = position
    relations = sorted(m["relation"] for m in mappings.values())
    assert relations == ["canonical", "near"], mappings
    near = next(m for m in mappings.values() if m["relation"] == "near")
    canonical = next(m for m in mappings.values() if m["relation"] == "canonical")
    assert near["chunk_id"] == canonical["chunk_id"] == canonical["content_hash"] != near["content_hash"]


def test_a_merge_across_an_acl_boundary_is_refused(page: Page, tmp_path: Path):
    page.goto("/queue")
    flag = page.locator("#open article.flag[data-reason=acl_boundary]")
    expect(flag).to_have_count(1, timeout=WAIT_MS)
    key = flag.get_attribute("data-key")
    with page.expect_response("**/api/decision") as answer:
        flag.get_by_role("button", name="Merge", exact=True).click()
    assert answer.value.status == 409
    message = flag.locator(".message")
    expect(message).to_contain_text("acl_boundary", timeout=WAIT_MS)
    expect(message).to_be_visible()
    screenshot(page, "console-queue.png", tmp_path)
    page.reload()
    expect(page.locator(f'#open article.flag[data-key="{key}"]')).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(f'#decided article.flag[data-key="{key}"]')).to_have_count(0)


def test_judging_calibration_pairs_updates_the_precision_estimate(page: Page, tmp_path: Path):
    page.goto("/calibration")
    items = page.locator("article.sample")
    expect(items.first).to_be_visible(timeout=WAIT_MS)
    precision = page.locator("#precision")
    before = precision.inner_text()
    assert "no verdict yet" in before
    count = items.count()
    assert count >= 3
    for index in range(count):
        item = items.nth(index)
        verdict = "Incorrect" if item.get_attribute("data-outcome") == "fact_conflict" else "Correct"
        with page.expect_response("**/api/verdict") as answer:
            item.get_by_role("button", name=verdict, exact=True).click()
        assert answer.value.status == 200
        expect(item.locator(".verdict")).to_have_text(verdict.lower(), timeout=WAIT_MS)
    expect(precision).not_to_have_text(before, timeout=WAIT_MS)
    expect(precision).to_contain_text("95% Wilson interval")
    expect(page.locator("#suggestion")).to_contain_text("Suggested threshold")
    screenshot(page, "console-calibration.png", tmp_path)
    page.reload()  # the verdicts are kept
    expect(page.locator("article.sample button[aria-pressed=true]")).to_have_count(count, timeout=WAIT_MS)


def test_the_boilerplate_tab_shows_each_collection_and_its_lines(page: Page, tmp_path: Path):
    page.goto("/boilerplate")
    collection = page.locator('section.collection[data-collection="default"]')
    expect(collection.locator("table.lines")).to_be_visible(timeout=WAIT_MS)
    expect(collection.locator("h3")).to_contain_text("document(s)")
    row = collection.locator('tr.line[data-line="reset your password"]')
    expect(row.locator("td.documents")).to_have_text("2")
    for name in ("Allow", "Strip", "Auto"):
        expect(row.get_by_role("button", name=name, exact=True)).to_be_visible()
    screenshot(page, "console-boilerplate.png", tmp_path)
