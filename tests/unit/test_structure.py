"""The shape of the code: no import circle between files, no file too long to read, no two modules of one name."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGES = ("streamdedup", "benchmarks")
#: The longest Python file, in lines; a Rust file may be a little longer (its tests sit in the file).
PYTHON_LINES = 500
RUST_LINES = 800
#: The longest Rust function, in lines, its signature and closing brace included.
RUST_FUNCTION_LINES = 100


def _python_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes inside ``if TYPE_CHECKING:`` blocks (they import nothing when the code runs)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found |= {id(inner) for child in node.body for inner in ast.walk(child)}
    return found


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the file at ``path`` imports, at its top or inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _type_checking_only(tree)
    this = _module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    found.add(f"{base}.{alias.name}")
                elif base in modules:
                    found.add(base)
    found.discard(this)
    # A module's own packages run before it whatever it imports: importing one of them closes no circle.
    return {m for m in found if not this.startswith(m + ".")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_between_files():
    files = _python_files()
    modules = {_module_name(p) for p in files}
    graph = {_module_name(p): _imports(p, modules) for p in files}
    assert _cycles(graph) == []


def test_the_circle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_two_modules_share_a_name():
    names = Counter(
        p.stem for p in (ROOT / "streamdedup").rglob("*.py") if p.name not in ("__init__.py", "__main__.py")
    )
    packages = Counter(p.parent.name for p in (ROOT / "streamdedup").rglob("__init__.py"))
    shared = {name for name, count in (names + packages).items() if count > 1}
    assert shared == set()


def test_no_python_file_is_over_500_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _python_files()
        if (n := len(p.read_text().splitlines())) > PYTHON_LINES
    }
    assert long == {}


def test_no_rust_file_is_over_800_lines():
    files = sorted((ROOT / "native").rglob("*.rs"))
    long = {
        str(p.relative_to(ROOT)): n
        for p in files
        if "target" not in p.parts and (n := len(p.read_text().splitlines())) > RUST_LINES
    }
    assert files and long == {}


def test_no_rust_use_circle_between_files():
    # A Rust module's `use crate::a::b` or `use super::x`: the same rule as for Python files.
    files = {p: p for p in (ROOT / "native").rglob("*.rs") if "target" not in p.parts}
    graph: dict[str, set[str]] = {}
    for path in files:
        crate_root = next(parent for parent in path.parents if (parent / "Cargo.toml").is_file()) / "src"
        if crate_root not in path.parents:
            continue  # a crate's integration tests (tests/): each is a crate of its own
        name = path.relative_to(crate_root).with_suffix("").as_posix().removesuffix("/mod")
        uses = set()
        for found in re.findall(r"\b(crate|super)((?:::\w+)+)", path.read_text()):
            head, tail = found
            parts = [p for p in tail.split("::") if p]
            base = [] if head == "crate" else name.split("/")[:-1]
            uses |= {"/".join(base + parts[:n]) for n in range(1, len(parts) + 1)}
        graph[f"{crate_root}:{name}"] = {f"{crate_root}:{u}" for u in uses}
    known = set(graph)
    assert (
        _cycles({node: {u for u in uses if u in known and u != node} for node, uses in graph.items()}) == []
    )


def _rust_functions(text: str) -> dict[str, int]:
    """The length of every function in rustfmt-formatted Rust: from its ``fn`` line to the ``}`` at its indent."""
    lines = text.splitlines()
    found = {}
    for start, line in enumerate(lines):
        head = re.match(r"(\s*)(?:pub(?:\([a-z]+\))? )?(?:const |async |unsafe )*fn (\w+)", line)
        if head is None or line.rstrip().endswith(";"):
            continue
        indent, name = head.groups()
        end = next((i for i in range(start, len(lines)) if lines[i] == indent + "}"), start)
        found[f"{name}:{start + 1}"] = end - start + 1
    return found


def test_the_rust_function_counter_counts_a_function():
    text = "impl A {\n    pub(crate) fn f(&self) -> u8 {\n        1\n    }\n}\nfn g() {}\n"
    assert _rust_functions(text) == {"f:2": 3, "g:6": 1}


def test_no_rust_function_is_over_100_lines():
    files = [p for p in (ROOT / "native").rglob("*.rs") if "target" not in p.parts]
    long = {
        f"{p.relative_to(ROOT)}:{name}": n
        for p in files
        for name, n in _rust_functions(p.read_text()).items()
        if n > RUST_FUNCTION_LINES
    }
    assert files and long == {}
