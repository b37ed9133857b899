"""Topic names and configurations; every name shares the configurable prefix.

>>> names = TopicNames("acme.")
>>> names.documents, names.stage("content"), names.output("canonical-chunks"), names.group
('acme.documents', 'acme.stage-content', 'acme.canonical-chunks', 'acme.worker')
>>> names.changelog("content")
'acme.worker-state-content-changelog'

A generation after the first (docs/generations.md) has topics, a group and changelogs of its own; the documents
topic and the registry of generations are the deployment's:

>>> second = TopicNames("acme.", 2)
>>> second.documents, second.stage("source"), second.output("canonical-chunks"), second.group, second.registry
('acme.documents', 'acme.g2-stage-source', 'acme.g2-canonical-chunks', 'acme.g2-worker', 'acme.engine-params')
"""

from __future__ import annotations

from dataclasses import dataclass

from streamdedup.core.messages import STAGES
from streamdedup.core.output_view import COMPACTED_TOPICS, OUTPUT_TOPICS

__all__ = ["TopicNames", "topic_config"]

#: Record size limit of the topics the worker creates (a chunk with many sources is a large record).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class TopicNames:
    """The names of every topic of one generation of a deployment (generation 1: the names it always had)."""

    prefix: str
    generation: int = 1

    @property
    def _own(self) -> str:
        """The prefix of the generation's own topics and group."""
        return self.prefix if self.generation == 1 else f"{self.prefix}g{self.generation}-"

    @property
    def documents(self) -> str:
        """The input topic, keyed by source_id (every generation reads it)."""
        return f"{self.prefix}documents"

    @property
    def registry(self) -> str:
        """The compacted topic of the deployment's generations: their parameters and which one serves."""
        return f"{self.prefix}engine-params"

    @property
    def group(self) -> str:
        """The worker's consumer group and Faust application id."""
        return f"{self._own}worker"

    def stage(self, stage: str) -> str:
        """The internal topic feeding a stage."""
        return f"{self._own}stage-{stage}"

    @staticmethod
    def table(stage: str) -> str:
        """The name of a stage's state table."""
        return f"state-{stage}"

    def changelog(self, stage: str) -> str:
        """The compacted changelog topic of a stage's table (Faust's name for it)."""
        return f"{self.group}-{self.table(stage)}-changelog"

    def output(self, topic: str) -> str:
        """An output topic of the contract (``canonical-chunks``, ``review``, ...)."""
        if topic not in OUTPUT_TOPICS:
            raise ValueError(f"unknown output topic {topic!r}; one of {', '.join(OUTPUT_TOPICS)}")
        return f"{self._own}{topic}"

    def all(self) -> list[str]:
        """Every topic the worker reads or writes, but the tables' changelogs."""
        return [self.documents, *(self.stage(s) for s in STAGES), *(self.output(t) for t in OUTPUT_TOPICS)]

    def own(self) -> list[str]:
        """The generation's own topics (the documents topic and the registry are the deployment's), changelogs
        included: what retiring it deletes."""
        return [
            *(self.stage(s) for s in STAGES),
            *(self.changelog(s) for s in STAGES),
            *(self.output(t) for t in OUTPUT_TOPICS),
        ]


def topic_config(topic: str) -> dict[str, str]:
    """Return the configuration of an output topic: compacted for the keyed views, retained otherwise."""
    config = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
    if topic in COMPACTED_TOPICS:
        config["cleanup.policy"] = "compact"
    return config
