from streamdedup.core.clustering import decide, split_reason
from streamdedup.core.messages import Info, Output
from streamdedup.core.model import Rank
from streamdedup.core.output_view import View
from streamdedup.core.policy import CanonicalPolicy

POLICY = CanonicalPolicy(("authority", "modified_at", "length", "source_id"))
ME = Rank(0, 5, 100, "me", "m")


def info(role, modified_at, readers=("*",), target="", name="x"):
    return Info(1, role, Rank(0, modified_at, 100, name, name), readers, target)


def test_alone_is_canonical():
    assert decide(ME, ("*",), [], POLICY, first=True).role == "canonical"


def test_joins_the_best_matching_better_canonical():
    neighbors = [("a", 0.85, info("canonical", 9, name="a")), ("b", 0.95, info("canonical", 8, name="b"))]
    decision = decide(ME, ("*",), neighbors, POLICY, first=True)
    assert (decision.role, decision.target, decision.jaccard) == ("member", "b", 0.95)


def test_ties_in_jaccard_go_to_the_better_rank():
    neighbors = [("a", 0.9, info("canonical", 8, name="a")), ("b", 0.9, info("canonical", 9, name="b"))]
    assert decide(ME, ("*",), neighbors, POLICY, first=False).target == "b"


def test_worse_ranked_and_member_neighbors_do_not_count():
    neighbors = [
        ("old", 0.99, info("canonical", 1, name="old")),
        ("mem", 0.99, info("member", 9, target="z")),
    ]
    assert decide(ME, ("*",), neighbors, POLICY, first=False).role == "canonical"


def test_uncovered_readers_refuse_the_merge_and_are_reported():
    neighbors = [("r", 0.9, info("canonical", 9, readers=("finance",), name="r"))]
    decision = decide(ME, ("*",), neighbors, POLICY, first=False)
    assert decision.role == "canonical" and decision.refused == ["r"]
    assert decide(ME, ("finance",), neighbors, POLICY, first=False).target == "r"


def test_first_decision_waits_for_a_better_pending_neighbor():
    neighbors = [("p", 0.9, info("pending", 9, name="p"))]
    assert decide(ME, ("*",), neighbors, POLICY, first=True) is None
    assert decide(ME, ("*",), neighbors, POLICY, first=False).role == "canonical"
    worse_pending = [("p", 0.9, info("pending", 1, name="p"))]
    assert decide(ME, ("*",), worse_pending, POLICY, first=True).role == "canonical"


def test_split_reasons():
    assert split_reason(ME, ("*",), None, POLICY) == "canonical deleted"
    assert split_reason(ME, ("*",), info("member", 9), POLICY) == "canonical changed"
    assert split_reason(ME, ("*",), info("canonical", 9, readers=("x",)), POLICY) == "acl boundary"
    assert split_reason(ME, ("*",), info("canonical", 1), POLICY) == "rank changed"
    assert split_reason(ME, ("*",), info("canonical", 9), POLICY) == "better match"


def test_view_keeps_the_last_value_per_key_and_applies_tombstones():
    view = View().apply_all(
        [
            Output("canonical-chunks", "c", {"revision": 1}),
            Output("canonical-chunks", "c", {"revision": 2}),
            Output("canonical-chunks", "d", {"revision": 1}),
            Output("canonical-chunks", "d", None),
            Output("review", "a:b", {"reason": "fact_conflict"}),
            Output("audit", "c", {"action": "merge"}),
            Output("dlq", None, {"error": "x"}),
        ]
    )
    assert view.chunks == {"c": {"revision": 2}}
    assert list(view.reviews) == ["a:b"] and len(view.audits) == 1 and view.dead_letters == 1
    assert b'"revision"' not in view.compacted(with_revision=False)
