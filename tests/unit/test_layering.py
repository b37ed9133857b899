import ast
import subprocess
import sys
from pathlib import Path


def test_core_imports_no_kafka_faust_or_rocksdb():
    code = (
        "import sys, streamdedup.core, streamdedup.core.engine, streamdedup.core.stages, streamdedup.core.output_view; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('faust', 'aiokafka', 'rocksdict', 'mode', 'kafka'))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


_IO_MODULES = {"asyncio", "io", "os", "pathlib", "shutil", "socket", "sqlite3", "subprocess", "tempfile", "urllib",
               "http", "requests", "logging", "faust", "aiokafka", "rocksdict", "mode"}  # fmt: skip


def test_core_code_does_no_io():
    # The core's own code: no I/O or Kafka modules, no open() or print(), no async. (Libraries it uses for
    # computation may import what they like.)
    problems = []
    for path in sorted((Path(__file__).parents[2] / "streamdedup" / "core").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            problems += [f"{path.name}: imports {n}" for n in names if n.split(".")[0] in _IO_MODULES]
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("open", "print")
            ):
                problems.append(f"{path.name}:{node.lineno}: calls {node.func.id}()")
            if isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
                problems.append(f"{path.name}:{node.lineno}: async code")
    assert problems == []
