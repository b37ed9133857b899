"""The edge cases of the three articles the product grew from (see DEVELOPERS.md), as named tests."""

import collections

from streamdedup.core.engine import Engine
from streamdedup.core.facts import fact_conflict
from streamdedup.core.messages import VerifyRequest
from streamdedup.core.model import AclEvent, DeleteEvent
from streamdedup.core.normalize import content_hash, normalize
from streamdedup.core.output_view import View
from streamdedup.core.params import EngineParams
from streamdedup.core.records import review_key
from streamdedup.drivers.embedded import EmbeddedRunner
from streamdedup.store.memory import MemoryStore
from streamdedup.testing.invariants import check_invariants
from streamdedup.testing.reference import Reference, live_sources
from tests.helpers import run_embedded, upsert

SERVING = (
    "To fit the model on a single accelerator the serving stack loads the weights in {dtype} and keeps the "
    "cache in the same precision which in our tests changed answer quality by less than the noise of the "
    "evaluation suite while memory use stayed within the budget of the smallest instance type we deploy on"
)
REFUND = (
    "Customers can return any product bought in our online store and receive a full refund within {days} "
    "days of delivery provided the item is unused and in its original packaging and the refund is paid to "
    "the original payment method within five business days after we receive the returned item"
)
PRICING = (
    "Our team plan costs the same per seat whether you pay monthly or yearly and every seat includes "
    "unlimited projects single sign-on and priority email support and you can add or remove seats at any "
    "time from the billing page with changes applied from the next invoice and unused time credited {how}"
)
POLICY = (
    "Expense reports must be submitted within the month in which the costs occurred together with itemized "
    "receipts for every expense and reports that arrive late or without receipts are returned to the employee "
    "who must {verb} and resubmit them before any reimbursement can be paid out by the finance team"
)
HELP = (
    "If you forgot your password open the sign-in page and choose forgot password then enter the email "
    "address you use for your account and we will send you a link that lets you choose a new password"
)


def _check(engine, events, view):
    live = live_sources(events)
    assert check_invariants(view, live, threshold=0.8, shingle_size=5) == []
    reference = Reference(engine, live)
    assert view.compacted(with_revision=False) == reference.compacted()
    return reference


def _reasons(view):
    return sorted(v["reason"] for v in view.reviews.values())


def test_float16_and_float32_are_never_merged(engine):
    events = [
        upsert("guide", 1, [SERVING.format(dtype="float16")], day=1),
        upsert("notes", 1, [SERVING.format(dtype="float32")], day=2),
    ]
    view = run_embedded(engine, events)
    _check(engine, events, view)
    assert len(view.chunks) == 2
    assert _reasons(view) == ["fact_conflict"]
    (flag,) = view.reviews.values()
    assert flag["jaccard"] >= 0.8 and "float16" in flag["detail"] and "float32" in flag["detail"]


def test_30_and_14_day_refunds_are_never_merged(engine):
    events = [
        upsert("refund-page", 1, [REFUND.format(days=30)], day=1, authority=2),
        upsert("refund-macro", 1, [REFUND.format(days=14)], day=5),
    ]
    view = run_embedded(engine, events)
    _check(engine, events, view)
    assert len(view.chunks) == 2
    assert _reasons(view) == ["fact_conflict"]


def test_restricted_newer_near_copy_does_not_swallow_the_public_page(engine):
    events = [
        upsert("public-faq", 1, [PRICING.format(how="automatically")], acl=("*",), day=1),
        upsert("finance-faq", 1, [PRICING.format(how="proportionally")], acl=("finance",), day=9),
    ]
    view = run_embedded(engine, events)
    _check(engine, events, view)
    assert sorted(tuple(c["acl"]) for c in view.chunks.values()) == [("*",), ("finance",)]
    assert _reasons(view) == ["acl_boundary"]
    assert all(m["chunks"][0]["relation"] == "canonical" for m in view.mappings.values())


def test_restricted_older_near_copy_joins_the_public_page(engine):
    # Every reader of the restricted copy can read the public one, so merging hides nothing from anyone.
    events = [
        upsert("finance-faq", 1, [PRICING.format(how="proportionally")], acl=("finance",), day=1),
        upsert("public-faq", 1, [PRICING.format(how="automatically")], acl=("*",), day=9),
    ]
    view = run_embedded(engine, events)
    _check(engine, events, view)
    (chunk,) = view.chunks.values()
    assert chunk["acl"] == ["*"] and chunk["canonical"]["source_id"] == "public-faq"
    assert view.mappings["finance-faq"]["chunks"][0]["relation"] == "near"
    assert view.reviews == {}


def test_one_deleted_copy_of_three_keeps_the_chunk(engine):
    copies = [
        upsert(f"space-{s}", 1, [HELP], acl=(s,), day=d) for d, s in enumerate(("sales", "eng", "support"), 1)
    ]
    events = [*copies, DeleteEvent(source_id="space-eng", version=2)]
    view = run_embedded(engine, events)
    _check(engine, events, view)
    (chunk,) = view.chunks.values()
    assert chunk["acl"] == ["sales", "support"]
    assert [s["source_id"] for s in chunk["sources"]] == ["space-support", "space-sales"]  # newest first
    assert "space-eng" not in view.mappings
    # the canonical's own source goes too: the chunk lives on with the last copy
    events.append(DeleteEvent(source_id="space-support", version=2))
    view = run_embedded(engine, events)
    _check(engine, events, view)
    (chunk,) = view.chunks.values()
    assert chunk["canonical"] == {"source_id": "space-sales", "position": 0} and chunk["acl"] == ["sales"]
    events.append(DeleteEvent(source_id="space-sales", version=3))
    view = run_embedded(engine, events)
    assert view.chunks == {} and view.mappings == {}


def test_policy_v2_final_signed_becomes_canonical_and_the_swap_is_audited(engine):
    events = [
        upsert("policy-v2.pdf", 1, [POLICY.format(verb="correct")], day=1),
        upsert("policy-v2-final.pdf", 1, [POLICY.format(verb="amend")], day=2),
        upsert("policy-v2-final-signed.pdf", 1, [POLICY.format(verb="amend")], day=3),
    ]
    view = run_embedded(engine, events)
    _check(engine, events, view)
    (chunk,) = view.chunks.values()
    assert chunk["canonical"]["source_id"] == "policy-v2-final-signed.pdf"
    assert [m["relation"] for m in chunk["members"]] == ["canonical", "near"]
    relations = {sid: m["chunks"][0]["relation"] for sid, m in view.mappings.items()}
    assert relations == {
        "policy-v2.pdf": "near",
        "policy-v2-final.pdf": "exact",
        "policy-v2-final-signed.pdf": "canonical",
    }
    swaps = [a for a in view.audits if a["action"] == "swap"]
    assert any(a["reason"] == "newer modified_at" and "previous_chunk_id" in a for a in swaps)


def test_deleting_the_canonical_elects_a_new_one(engine):
    events = [
        upsert("policy-v2.pdf", 1, [POLICY.format(verb="correct")], day=1),
        upsert("policy-v2-final.pdf", 1, [POLICY.format(verb="amend")], day=2),
        DeleteEvent(source_id="policy-v2-final.pdf", version=2),
    ]
    view = run_embedded(engine, events)
    _check(engine, events, view)
    (chunk,) = view.chunks.values()
    assert chunk["canonical"]["source_id"] == "policy-v2.pdf"
    assert any(a["action"] == "swap" and a["reason"] == "canonical deleted" for a in view.audits)


def test_acl_change_splits_a_member_that_is_no_longer_covered(engine):
    events = [
        upsert("public", 1, [PRICING.format(how="automatically")], acl=("*",), day=9),
        upsert("internal", 1, [PRICING.format(how="proportionally")], acl=("finance",), day=1),
    ]
    view = run_embedded(engine, events)
    assert len(view.chunks) == 1
    events += [AclEvent(source_id="public", version=2, acl=("sales",))]
    view = run_embedded(engine, events)
    _check(engine, events, view)
    assert len(view.chunks) == 2
    assert any(a["action"] == "split" and a["reason"] == "acl boundary" for a in view.audits)
    assert _reasons(view) == ["acl_boundary"]


def test_spanish_text_normalizes_and_guards_facts(engine):
    base = (
        "Antes de indexar conviene deduplicar el corpus porque cada copia del mismo párrafo ocupa espacio en el "
        "índice cuesta dinero al generar embeddings y compite por el contexto del modelo que {neg} ve la misma "
        "idea varias veces cuando hace una consulta sobre la documentación interna de la empresa"
    )
    events = [
        upsert("manual", 1, [base.format(neg="ya")], day=1),
        upsert("faq", 1, [base.format(neg="ya").upper()], day=2),
        upsert("correo", 1, [base.format(neg="no")], day=3),
    ]
    view = run_embedded(engine, events)
    _check(engine, events, view)
    assert len(view.chunks) == 2  # the upper-case copy is exact; the negated one is a different fact
    assert view.mappings["manual"]["chunks"][0]["relation"] == "exact"
    assert _reasons(view) == ["fact_conflict"]


def test_a_popular_text_keeps_a_bounded_record_that_lists_its_first_sources_and_counts_all(engine):
    # 150 copies of one passage, then the 100 newest of them deleted: the record lists the first 100 sources in
    # the canonical policy's order (the newest first) and counts all, and after the deletions the next ones.
    copies = [upsert(f"copy-{i:03d}", 1, [HELP], acl=(f"team-{i % 7}",), day=i + 1) for i in range(150)]
    deletes = [DeleteEvent(source_id=f"copy-{i:03d}", version=2) for i in range(50, 150)]
    view = run_embedded(engine, copies, batch=16)
    _check(engine, copies, view)
    (chunk,) = view.chunks.values()
    assert (chunk["source_count"], chunk["member_count"]) == (150, 1)
    assert [s["source_id"] for s in chunk["sources"]] == [f"copy-{i:03d}" for i in range(149, 49, -1)]
    assert chunk["acl"] == [f"team-{i}" for i in range(7)]  # the ACL stays complete
    view = run_embedded(engine, copies + deletes, batch=16)
    _check(engine, copies + deletes, view)
    (chunk,) = view.chunks.values()
    assert chunk["source_count"] == 50 and chunk["canonical"]["source_id"] == "copy-049"
    assert [s["source_id"] for s in chunk["sources"]] == [f"copy-{i:03d}" for i in range(49, -1, -1)]


def test_each_text_raises_one_fact_conflict_flag_against_the_better_text_it_would_have_joined(engine):
    # Three refund pages that differ in their number of days, the newest best ranked: each of the two others is
    # flagged once, against the better-ranked page it would otherwise have joined (equal Jaccard: the best rank).
    pages = {days: upsert(f"refund-{days}", 1, [REFUND.format(days=days)], day=days) for days in (30, 14, 7)}
    hashes = {days: content_hash(REFUND.format(days=days)) for days in pages}
    forward = [pages[30], pages[14], pages[7]]
    view = run_embedded(engine, forward)
    _check(engine, forward, view)
    assert len(view.chunks) == 3
    assert set(view.reviews) == {review_key(hashes[30], hashes[14]), review_key(hashes[30], hashes[7])}
    # Worst ranked first: each page is flagged by the time a better one arrives, once.
    backward = forward[::-1]
    view = run_embedded(engine, backward)
    _check(engine, backward, view)
    assert set(view.reviews) == {review_key(hashes[7], hashes[14]), review_key(hashes[14], hashes[30])}
    assert _reasons(view) == ["fact_conflict", "fact_conflict"]


def test_a_dense_neighbourhood_verifies_a_bounded_number_of_candidates_and_flags_each_text_once(monkeypatch):
    # 60 near copies that each state another number: every pair is above the threshold and in conflict. Each copy
    # verifies at most max_candidates others, raises at most one flag, and nothing merges.
    engine = Engine(EngineParams(max_candidates=5))
    copies = [upsert(f"ticket-{i:02d}", 1, [REFUND.format(days=i + 1)], day=i + 1) for i in range(60)]
    requests: list[VerifyRequest] = []
    content = engine.stages["content"]
    handle = content.handle

    def counting(messages, state):
        out = handle(messages, state)
        requests.extend(m for m in out if isinstance(m, VerifyRequest))
        return out

    monkeypatch.setattr(content, "handle", counting)
    runner = EmbeddedRunner(engine, MemoryStore())
    outputs = [
        o for start in range(0, 60, 4) for o in runner.process(copies[start : start + 4], lambda _: None)
    ]
    view = View().apply_all(outputs)
    _check(engine, copies, view)
    assert len(view.chunks) == 60
    per_text = collections.Counter(r.sender for r in requests)
    assert max(per_text.values()) <= 5
    flags = [o.value for o in outputs if o.topic == "review"]
    assert 0 < len(flags) <= 59 and {f["reason"] for f in flags} == {"fact_conflict"}
    norms = {content_hash(REFUND.format(days=i + 1)): normalize(REFUND.format(days=i + 1)) for i in range(60)}
    for flag in flags:
        a, b = norms[flag["a"]["content_hash"]], norms[flag["b"]["content_hash"]]
        assert flag["jaccard"] >= 0.8 and fact_conflict(a, b)
