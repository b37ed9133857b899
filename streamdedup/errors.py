"""Exceptions raised by streamdedup.

Every error the package raises on purpose derives from :class:`StreamDedupError`::

    StreamDedupError
    ├── InvalidEventError      an input event failed validation (becomes a dead letter, never a crash)
    ├── ConfigurationError     settings that cannot work together
    └── StateError             the state directory cannot be used
        └── StateMismatchError the state was built with other engine parameters or format

Adapters around third-party libraries re-raise their errors as one of these with ``from exc``.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "InvalidEventError",
    "StateError",
    "StateMismatchError",
    "StreamDedupError",
]


class StreamDedupError(Exception):
    """Base class of every error streamdedup raises on purpose."""


class InvalidEventError(StreamDedupError):
    """An input event is not valid under the event contract (design §4)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class ConfigurationError(StreamDedupError):
    """Settings are inconsistent or out of range."""


class StateError(StreamDedupError):
    """The state directory cannot be opened or used."""


class StateMismatchError(StateError):
    """The state was written under different engine parameters or an unknown format version."""
