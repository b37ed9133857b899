"""The project uses Faust, mode and aiokafka through their public interfaces only."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "streamdedup"


def _own_private_names() -> set[str]:
    """Every ``_name`` the package defines itself: functions, classes, attributes it assigns, slots."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_")
            ):
                names.add(node.value)  # __slots__ entries
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {n for n in names if n.startswith("_")}


def _private_uses(extra: tuple[Path, ...] = ()) -> list[str]:
    uses = []
    for path in [*sorted(PACKAGE.rglob("*.py")), *extra]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not (node.attr.startswith("__") and node.attr.endswith("__"))
            ):
                uses.append((f"{path.name}:{node.lineno}", node.attr))
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in _LIBRARIES:
                uses += [
                    (f"{path.name}:{node.lineno}", alias.name)
                    for alias in node.names
                    if alias.name.startswith("_")
                ]
                if any(part.startswith("_") for part in node.module.split(".")):
                    uses.append((f"{path.name}:{node.lineno}", node.module))
    own = _own_private_names()
    return [f"{where}: {name}" for where, name in uses if name not in own]


_LIBRARIES = {"faust", "mode", "aiokafka"}


def test_no_private_attribute_of_a_library_is_read_or_set():
    assert _private_uses() == []


def test_the_check_finds_a_private_attribute(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import faust.streams\nfrom aiokafka.util import _x\n"
        "def lag(consumer):\n    return consumer._read_offset, faust.streams._current_event\n"
    )
    found = _private_uses((probe,))
    assert sorted(found) == ["probe.py:2: _x", "probe.py:4: _current_event", "probe.py:4: _read_offset"]
