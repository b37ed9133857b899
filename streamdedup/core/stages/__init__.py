"""The stage handlers: plain objects from a batch of messages and partition-local state to keyed outputs."""

from streamdedup.core.stages.bands import BandStage
from streamdedup.core.stages.collection import CollectionStage
from streamdedup.core.stages.content import ContentStage
from streamdedup.core.stages.source import SourceStage

__all__ = ["BandStage", "CollectionStage", "ContentStage", "SourceStage"]
