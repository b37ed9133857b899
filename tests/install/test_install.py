"""Installing the package as a user does, in fresh virtual environments with no Rust toolchain on the PATH.

From source (``pip install .``), the package installs without its compiled kernels and runs its Python ones; from
the wheel that ``make wheel`` builds, it runs the compiled ones with no compiler around. Either way the bundled
example gives the outputs, byte for byte, and the summary of the development install's compiled kernels.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "feed.jsonl"
#: pip's own waits are bounded by PIP_DEFAULT_TIMEOUT; this bounds a whole install on a slow machine.
INSTALL_SECONDS = 1500

pytestmark = pytest.mark.install


def _without_rust() -> dict[str, str]:
    """The environment with no directory on the PATH that holds cargo or rustc."""
    env = {k: v for k, v in os.environ.items() if k not in ("CARGO", "RUSTC", "CARGO_HOME", "RUSTUP_HOME")}
    env.pop("STREAMDEDUP_KERNELS", None)  # the installs choose for themselves
    kept = [
        d
        for d in env["PATH"].split(os.pathsep)
        if d and not any((Path(d) / t).exists() for t in ("cargo", "rustc"))
    ]
    env["PATH"] = os.pathsep.join(kept)
    assert shutil.which("cargo", path=env["PATH"]) is None
    return env


def _venv(where: Path, env: dict[str, str]) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, env=env, timeout=300)
    return where / "bin"


def _pip_install(bin_dir: Path, target: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "-c",
            str(ROOT / "constraints.txt"),
            target,
        ],
        check=True,
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_SECONDS,
    )


def _run_example(command: Path, where: Path, env: dict[str, str]) -> tuple[bytes, list[list[str]], str]:
    """Run ``streamdedup run`` on the example as ``make example`` does; return the outputs, summary and stderr."""
    out = where / "outputs.jsonl"
    done = subprocess.run(
        [
            str(command),
            "run",
            str(EXAMPLE),
            "--state",
            str(where / "state"),
            "--out",
            str(out),
            "--batch-size",
            "1",
        ],
        env={**env, "COLUMNS": "1000"},  # no line wrapped: the paths below are replaced whole
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return out.read_bytes(), _summary(done.stderr.replace(str(where), "<dir>")), done.stderr


def _summary(printed: str) -> list[list[str]]:
    """The rows of the run's summary table, cell by cell, its rates (events a second) left out."""
    table = printed[printed.index("streamdedup run") :]
    rows = [line.strip("│ ").split("│") for line in table.splitlines() if "│" in line]
    return [[re.sub(r"\(\s*[\d,.]+/s\)", "(rate)", cell).strip() for cell in row] for row in rows]


def _kernels(command: Path, env: dict[str, str]) -> str:
    shown = subprocess.run(
        [str(command), "config"],
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    return next(line for line in shown.splitlines() if line.startswith("kernels in use"))


@pytest.fixture(scope="module")
def compiled_example(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list[list[str]]]:
    """The example as the development install runs it, on its compiled kernels."""
    env = {**os.environ, "STREAMDEDUP_KERNELS": "compiled"}
    outputs, summary, _ = _run_example(
        Path(sys.executable).parent / "streamdedup", tmp_path_factory.mktemp("dev"), env
    )
    assert outputs and ["events", "19 (rate)", "19"] in summary
    return outputs, summary


def _source_tree(where: Path) -> Path:
    """A copy of the package's sources as a source distribution holds them: no build, no compiled kernels."""
    ignore = shutil.ignore_patterns("target", "__pycache__", "*.so", "*.egg-info", "build", "dist")
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "constraints.txt"):
        shutil.copy2(ROOT / name, where / name)
    for name in ("streamdedup", "native"):
        shutil.copytree(ROOT / name, where / name, ignore=ignore)
    return where


def test_pip_install_without_rust_runs_the_python_kernels_with_the_same_results(tmp_path, compiled_example):
    env = _without_rust()
    bin_dir = _venv(tmp_path / "venv", env)
    (tmp_path / "src").mkdir()
    installed = _pip_install(bin_dir, str(_source_tree(tmp_path / "src")), env)
    assert installed.returncode == 0
    # pip went on without cargo: no compiled kernels.
    assert not list((tmp_path / "venv").rglob("_native*.so"))
    assert _kernels(bin_dir / "streamdedup", env) == "kernels in use: python (none compiled here)"
    outputs, summary, printed = _run_example(bin_dir / "streamdedup", tmp_path, env)
    assert outputs == compiled_example[0]
    assert summary == compiled_example[1]
    # The one warning that the engine runs in Python, and how to get the compiled kernels.
    assert printed.count("no compiled kernels") == 1 and "pip install" in printed


def test_the_wheel_installs_without_rust_and_runs_the_compiled_kernels(tmp_path, compiled_example):
    built = subprocess.run(
        ["make", "wheel", f"PYTHON={sys.executable}"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=INSTALL_SECONDS,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (ROOT / "dist").glob("streamdedup-*.whl")
    assert "-abi3-" in wheel.name
    env = _without_rust()
    bin_dir = _venv(tmp_path / "venv", env)
    _pip_install(bin_dir, str(wheel), env)
    assert _kernels(bin_dir / "streamdedup", env) == "kernels in use: compiled"
    outputs, summary, printed = _run_example(bin_dir / "streamdedup", tmp_path, env)
    assert outputs == compiled_example[0]
    assert summary == compiled_example[1]
    assert "no compiled kernels" not in printed
