"""The pure engine: no Kafka, Faust or RocksDB, no I/O.

>>> from streamdedup.core import Engine, EngineParams
>>> Engine(EngineParams()).params.threshold
0.8
"""

from typing import Any

from streamdedup.core.messages import Output
from streamdedup.core.model import AclEvent, DeleteEvent, InputEvent, SourceAttrs, UpsertEvent
from streamdedup.core.params import EngineParams


def __getattr__(name: str) -> Any:
    # The engine and the view load NumPy and the compiled kernels: only when asked for, so that commands that
    # do not run the engine start fast.
    if name == "Engine":
        from streamdedup.core.engine import Engine

        return Engine
    if name == "View":
        from streamdedup.core.output_view import View

        return View
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AclEvent",
    "DeleteEvent",
    "Engine",
    "EngineParams",
    "InputEvent",
    "Output",
    "SourceAttrs",
    "UpsertEvent",
    "View",
]
