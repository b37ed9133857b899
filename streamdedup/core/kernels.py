"""Which kernels the engine runs: the compiled ones when the package was built with them, else Python's.

The engine is written in Python, and every part of it is complete in Python. The package's Rust extension,
``streamdedup.core._native`` (``native/`` in the repository), is an optional accelerated twin of its hot parts
(signatures and band keys, chunking plain text, the band, collection and content stages, the record cache),
built by ``pip install`` where a Rust toolchain is found and shipped in the wheels. The two give byte-identical
outputs and states, which the tests check by comparing them, as msgpack, PyYAML and simplejson do with their
speedups.

Each module that has a compiled twin asks :func:`native` when it runs: the extension module, or ``None`` for the
Python implementation. :func:`use` chooses once per process (the CLI passes ``STREAMDEDUP_KERNELS``):

- ``"auto"`` (the default): compiled where built, else Python;
- ``"compiled"``: compiled, or :class:`KernelsUnavailable` where the package was built without them;
- ``"python"``: Python, even where compiled kernels exist (the tests run the engine both ways).

>>> use("python")
'python'
>>> native() is None, kind()
(True, 'python')
>>> use("auto") == ("compiled" if available() else "python")
True
"""

from __future__ import annotations

from types import ModuleType
from typing import Literal

__all__ = ["CHOICES", "HOW_TO_COMPILE", "Choice", "KernelsUnavailable", "available", "kind", "native", "use"]


def _load() -> ModuleType | None:
    try:
        from streamdedup.core import _native  # noqa: PLC0415
    except ImportError:  # built without a Rust toolchain: the Python implementation runs
        return None
    return _native


_compiled = _load()

Choice = Literal["auto", "compiled", "python"]
CHOICES: tuple[Choice, ...] = ("auto", "compiled", "python")

#: What a user does to get the compiled kernels (the warning on the Python path and the error above say it).
HOW_TO_COMPILE = (
    "install a wheel that has them (make wheel builds one into dist/; pip install dist/streamdedup-*.whl), or "
    "put Rust 1.85+ on the PATH (rustup.rs) and pip install the source again"
)


class KernelsUnavailable(RuntimeError):
    """Compiled kernels were asked for, and this installation of the package was built without them."""


class _Choice:
    """The kernels in use in this process (one object, so that :func:`use` changes them for every module)."""

    module: ModuleType | None = _compiled


_CHOSEN = _Choice()


def available() -> bool:
    """Return whether this installation has the compiled kernels."""
    return _compiled is not None


def use(choice: str) -> str:
    """Choose the kernels for this process (one of :data:`CHOICES`) and return which run: compiled or python."""
    if choice not in CHOICES:
        raise ValueError(f"kernels must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == "compiled" and _compiled is None:
        raise KernelsUnavailable(
            "the compiled kernels were asked for (STREAMDEDUP_KERNELS=compiled) and this installation has none: "
            + HOW_TO_COMPILE
        )
    _CHOSEN.module = None if choice == "python" else _compiled
    return kind()


def native() -> ModuleType | None:
    """Return the compiled kernels' module when they are in use, else ``None`` (run the Python implementation)."""
    return _CHOSEN.module


def kind() -> Literal["compiled", "python"]:
    """Return which kernels are in use: ``"compiled"`` or ``"python"``."""
    return "python" if _CHOSEN.module is None else "compiled"
