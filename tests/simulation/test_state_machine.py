"""A Hypothesis state machine over upsert, delete, acl, reviewers' decisions, replay and re-order events, and with
lineages: members of one document's lineage upserted in any order, the newest deleted, a member moved to another
lineage.

After every step the engine's view must satisfy I1-I3 and I6 for the live sources of a simple reference model
(the contract's version rules), equal the reference model's view, and I4 must hold: replaying any earlier event,
or an older version after a newer one, changes nothing.
"""

import random

import msgspec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from streamdedup.core.engine import Engine
from streamdedup.core.model import (
    PAIR_DECISIONS,
    AclEvent,
    DecisionEvent,
    DeleteEvent,
    SourceAttrs,
    UpsertEvent,
)
from streamdedup.core.output_view import View
from streamdedup.core.params import EngineParams
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.store.memory import MemoryStore
from streamdedup.testing.invariants import check_invariants
from streamdedup.testing.random_feeds import ACLS, LINEAGE_RULES, ParagraphPool, pair_decision, preference
from streamdedup.testing.reference import Reference, decisions_in_force, live_sources

ENGINE = Engine(EngineParams())
POOL = ParagraphPool(random.Random(2024), families=3).texts
SOURCES = st.sampled_from([f"s{i}" for i in range(5)])
DAY = 86_400_000_000


class DedupMachine(RuleBasedStateMachine):
    engine = ENGINE

    @initialize()
    def start(self):
        self.store = MemoryStore()
        self.runner = EmbeddedRunner(self.engine, self.store)
        self.view = View()
        self.events = []
        self.versions = {}
        self.decision_versions = {}

    def _apply(self, event, *, changes_nothing=False):
        before = self.view.compacted()
        outputs = self.runner.process([event], lambda o: None)
        self.view.apply_all(outputs)
        self.events.append(event)
        if changes_nothing:
            assert outputs == [], f"I4: re-applying {type(event).__name__} v{event.version} produced output"
            assert self.view.compacted() == before

    def _next_version(self, source_id, step):
        self.versions[source_id] = self.versions.get(source_id, 0) + step
        return self.versions[source_id]

    @rule(
        source=SOURCES,
        step=st.integers(1, 2),
        chunks=st.lists(st.sampled_from(POOL), min_size=1, max_size=3),
        acl=st.sampled_from(ACLS),
        day=st.integers(1, 5),
        authority=st.sampled_from([0, 0, 1]),
    )
    def upsert(self, source, step, chunks, acl, day, authority):
        attrs = SourceAttrs(acl=acl, modified_at=day * DAY, authority=authority)
        version = self._next_version(source, step)
        self._apply(UpsertEvent(source_id=source, version=version, attrs=attrs, chunks=tuple(chunks)))

    @rule(source=SOURCES)
    def delete(self, source):
        self._apply(DeleteEvent(source_id=source, version=self._next_version(source, 1)))

    @rule(source=SOURCES, acl=st.sampled_from(ACLS))
    def acl(self, source, acl):
        self._apply(AclEvent(source_id=source, version=self._next_version(source, 1), acl=acl))

    @precondition(lambda self: self.events)
    @rule(data=st.data())
    def replay(self, data):
        event = data.draw(st.sampled_from(self.events))
        self._apply(event, changes_nothing=True)

    @precondition(lambda self: self.versions)
    @rule(data=st.data(), chunks=st.lists(st.sampled_from(POOL), min_size=1, max_size=2))
    def reorder(self, data, chunks):
        # an older version arriving after a newer one: an upsert, delete or ACL change with a stale version
        source = data.draw(st.sampled_from(sorted(self.versions)))
        version = data.draw(st.integers(0, self.versions[source]))
        kind = data.draw(st.sampled_from(["upsert", "delete", "acl"]))
        if kind == "upsert":
            event = UpsertEvent(
                source_id=source,
                version=version,
                attrs=SourceAttrs(acl=("*",), modified_at=DAY),
                chunks=tuple(chunks),
            )
        elif kind == "delete":
            event = DeleteEvent(source_id=source, version=version)
        else:
            event = AclEvent(source_id=source, version=version, acl=("*",))
        self._apply(event, changes_nothing=True)

    @rule(
        pair=st.lists(st.sampled_from(POOL), min_size=2, max_size=2, unique=True),
        kind=st.sampled_from(PAIR_DECISIONS),
        step=st.integers(1, 2),
    )
    def decide_pair(self, pair, kind, step):
        event = pair_decision(kind, pair[0], pair[1], 0)
        if event.pair[0] == event.pair[1]:
            return  # two spellings of one text
        version = self.decision_versions[event.subject] = self.decision_versions.get(event.subject, 0) + step
        self._apply(pair_decision(kind, pair[0], pair[1], version))

    @rule(source=SOURCES, prefer=st.booleans())
    def decide_preference(self, source, prefer):
        version = self.decision_versions[source] = self.decision_versions.get(source, 0) + 1
        self._apply(preference(source, version, prefer=prefer))

    @precondition(lambda self: any(isinstance(e, DecisionEvent) for e in self.events))
    @rule(data=st.data(), kind=st.sampled_from((*PAIR_DECISIONS, "prefer", "unprefer")))
    def stale_decision(self, data, kind):
        # an older decision about a subject arriving after a newer one
        decided = [e for e in self.events if isinstance(e, DecisionEvent)]
        event = data.draw(st.sampled_from(decided))
        if (event.pair is None) != (kind in PAIR_DECISIONS):
            kind = event.kind
        newest = max(e.version for e in decided if e.subject == event.subject)
        version = data.draw(st.integers(0, newest))
        self._apply(msgspec.structs.replace(event, kind=kind, version=version), changes_nothing=True)

    @rule()
    def restart(self):
        self.runner = EmbeddedRunner(self.engine, self.store)

    @invariant()
    def view_is_sound_and_equals_the_reference(self):
        if not hasattr(self, "view"):
            return
        live, decisions = live_sources(self.events, self.engine.params), decisions_in_force(self.events)
        assert check_invariants(self.view, live, threshold=0.8, shingle_size=5, decisions=decisions) == []
        assert self.view.compacted(with_revision=False) == Reference(self.engine, live, decisions).compacted()
        assert self.runner.counters.chunks == len(self.view.chunks)


TestDedupMachine = DedupMachine.TestCase
TestDedupMachine.settings = settings(max_examples=500, stateful_step_count=25, deadline=None)


class BoundedRecordsMachine(DedupMachine):
    """The same rules with chunk records that list two sources: the first positions are kept through every step."""

    engine = Engine(EngineParams(max_chunk_sources=2))


TestBoundedRecordsMachine = BoundedRecordsMachine.TestCase
TestBoundedRecordsMachine.settings = settings(max_examples=300, stateful_step_count=25, deadline=None)


MEMBERS = st.sampled_from([f"guide/a/v{v}" for v in ("1", "2", "2-final", "10")] + ["guide/b/v3"])


class LineageMachine(DedupMachine):
    """The same rules, and members of lineages (:data:`LINEAGE_RULES`): after every step a chunk is current exactly
    when a newest live member of a lineage (or a source in none) holds it, as the reference elects it."""

    engine = Engine(EngineParams(lineage_rules=LINEAGE_RULES))

    @rule(
        source=MEMBERS,
        step=st.integers(1, 2),
        chunks=st.lists(st.sampled_from(POOL), min_size=1, max_size=3),
        archive=st.booleans(),
        day=st.integers(1, 5),
    )
    def upsert_member(self, source, step, chunks, archive, day):
        # In the archive collection the same rule names another lineage: the member moves there and back.
        attrs = SourceAttrs(acl=("*",), modified_at=day * DAY)
        version = self._next_version(source, step)
        collection = "archive" if archive else "default"
        event = UpsertEvent(
            source_id=source, version=version, attrs=attrs, chunks=tuple(chunks), collection=collection
        )
        self._apply(event)

    @rule(source=MEMBERS)
    def delete_member(self, source):
        self._apply(DeleteEvent(source_id=source, version=self._next_version(source, 1)))

    @rule(source=MEMBERS, prefer=st.booleans())
    def prefer_member(self, source, prefer):
        self.decision_versions[source] = self.decision_versions.get(source, 0) + 1
        self._apply(preference(source, self.decision_versions[source], prefer=prefer))


TestLineageMachine = LineageMachine.TestCase
TestLineageMachine.settings = settings(max_examples=300, stateful_step_count=25, deadline=None)
