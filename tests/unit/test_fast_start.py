"""Commands import only what they use: help and config start without the engine's compiled parts."""

import subprocess
import sys

import pytest

HEAVY = ("numpy", "streamdedup.core.engine", "rocksdict", "aiokafka", "faust")


def _loaded_by(code: str, modules: tuple[str, ...]) -> list[str]:
    """Run ``code`` in a fresh interpreter; return which of ``modules`` it imported."""
    probe = f"{code}\nimport sys\nprint('loaded:' + ','.join(sorted(m for m in {modules!r} if m in sys.modules)))\n"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("loaded:"), result.stdout
    return [m for m in last.removeprefix("loaded:").split(",") if m]


def _loaded_after(args: list[str], modules: tuple[str, ...]) -> list[str]:
    """Run the CLI with ``args`` in a fresh interpreter; return which of ``modules`` it imported."""
    code = (
        "from streamdedup.cli.main import app\n"
        "try:\n"
        f"    app({args!r})\n"
        "except SystemExit as exit:\n"
        "    assert exit.code in (0, None), exit.code"
    )
    return _loaded_by(code, modules)


@pytest.mark.parametrize("args", [["--help"], ["config"], ["run", "--help"], ["worker", "--help"]])
def test_a_command_that_runs_no_engine_imports_none_of_it(args):
    assert _loaded_after(args, HEAVY) == []


def test_the_commands_help_reads_no_settings():
    # Settings (pydantic-settings) are read before a command runs (and its own --help), not for the list of them.
    assert _loaded_after(["--help"], ("pydantic_settings", "streamdedup.settings")) == []


def test_the_worker_loads_no_terminal_markup_or_file_reading_modules():
    # A restarted worker is timed from its launch: it loads what it runs, and no more.
    code = (
        "from streamdedup.cli.main import app\n"
        "from streamdedup.cli.service import worker_command\n"
        "from streamdedup.drivers.kafka.app import build_app, make_worker\n"
        "from streamdedup.drivers.kafka.admin import check_engine_params, ensure_topics"
    )
    unwanted = ("rich", "markdown_it", "streamdedup.drivers.jsonl", "streamdedup.cli.topic_io", "numpy")
    assert _loaded_by(code, unwanted) == []


_ENGINE_RUN = (
    "from streamdedup.cli.run import run_command\n"
    "from streamdedup.core import Engine, EngineParams, SourceAttrs, UpsertEvent\n"
    "from streamdedup.core.normalize import normalize\n"
    "from streamdedup.drivers.embedded import EmbeddedRunner\n"
    "from streamdedup.store.memory import MemoryStore\n"
    "outputs = []\n"
    "runner = EmbeddedRunner(Engine(EngineParams()), MemoryStore())\n"
    "text = ' '.join(f'word{i}' for i in range(40))\n"
    "for i, tail in enumerate(['alpha', 'beta']):\n"
    "    attrs = SourceAttrs(acl=('*',), modified_at=i)\n"
    "    event = UpsertEvent(source_id=f's{i}', version=1, attrs=attrs, text=text + ' ' + tail)\n"
    "    runner.process([event], outputs.extend)\n"
    "assert any(o.topic == 'audit' for o in outputs), outputs\n"
)


def test_the_engine_runs_without_numpy():
    # Its signatures, band keys and sketches come from the compiled kernels; NumPy is for the reference twins.
    assert _loaded_by(_ENGINE_RUN, ("numpy", "streamdedup.core.engine")) == ["streamdedup.core.engine"]


def test_plain_ascii_text_runs_without_the_html_parser_or_the_unicode_pattern_module():
    # Normalization's Unicode pattern (the regex module) is for text that is not ASCII, and loads with the first;
    # the HTML parser loads with the first HTML.
    assert _loaded_by(_ENGINE_RUN, ("regex", "selectolax.lexbor")) == []
    html = "from streamdedup.core.markup import plain_text\nassert plain_text('<p>a</p>', 'text/html') == 'a'"
    assert _loaded_by(_ENGINE_RUN + html, ("regex", "selectolax.lexbor")) == ["selectolax.lexbor"]
    not_ascii = "assert normalize('\u00bfQu\u00e9?  TAL') == 'qu\u00e9 tal'"
    assert _loaded_by(_ENGINE_RUN + not_ascii, ("regex",)) == ["regex"]


def test_a_run_without_watch_loads_no_file_watcher():
    assert _loaded_by("from streamdedup.cli.run import run_command", ("watchfiles",)) == []
