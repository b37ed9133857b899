"""The pure engine: no Kafka, Faust or RocksDB, no I/O.

>>> from streamdedup.core import Engine, EngineParams
>>> Engine(EngineParams()).params.threshold
0.8
"""

from streamdedup.core.engine import Engine
from streamdedup.core.messages import Output
from streamdedup.core.model import AclEvent, DeleteEvent, InputEvent, SourceAttrs, UpsertEvent
from streamdedup.core.params import EngineParams
from streamdedup.core.view import View

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
