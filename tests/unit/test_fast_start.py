"""Commands import only what they use: help and config start without the engine's compiled parts."""

import subprocess
import sys

import pytest

HEAVY = ("numba", "numpy", "streamdedup.core.engine", "rocksdict", "aiokafka", "faust")


@pytest.mark.parametrize("args", [["--help"], ["config"], ["run", "--help"], ["worker", "--help"]])
def test_a_command_that_runs_no_engine_imports_none_of_it(args):
    code = (
        "import sys\n"
        "from streamdedup.cli.main import app\n"
        "try:\n"
        f"    app({args!r})\n"
        "except SystemExit as exit:\n"
        "    assert exit.code in (0, None), exit.code\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("args", [["--help"]])
def test_the_commands_help_reads_no_settings(args):
    # Settings (pydantic-settings) are read before a command runs (and its own --help), not for the list of them.
    code = (
        "import sys\n"
        "from streamdedup.cli.main import app\n"
        "try:\n"
        f"    app({args!r})\n"
        "except SystemExit as exit:\n"
        "    assert exit.code in (0, None), exit.code\n"
        "print('pydantic_settings' in sys.modules, 'streamdedup.settings' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "False False"
