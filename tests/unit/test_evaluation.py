"""Retrieval figures: a corpus whose top-k is known by hand, heading queries, and the eval command."""

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from streamdedup.cli.evaluate import eval_command
from streamdedup.cli.main import app
from streamdedup.contract.codec import encode_event
from streamdedup.core.chunking import Chunk
from streamdedup.core.engine import Engine
from streamdedup.core.model import SourceAttrs, UpsertEvent
from streamdedup.core.normalize import normalize
from streamdedup.core.params import EngineParams
from streamdedup.core.stages.collection import line_hash
from streamdedup.errors import StreamDedupError
from streamdedup.query.evaluation import (
    Bm25Index,
    chunk_passages,
    document_positions,
    evaluate,
    heading_queries,
    headings,
    position_passages,
)
from streamdedup.settings import Settings
from tests.helpers import DAY, run_embedded, upsert

EXAMPLE = Path(__file__).parents[2] / "examples" / "feed.jsonl"

SHARED = (
    "The backup job copies every database to the offsite vault at midnight and keeps the daily snapshots "
    "for a month."
)
RESTORE = (
    "Restoring a backup needs the recovery key, which the operations team keeps in the shared password "
    "manager under the name restore {}."
)
REFUND = (
    "Customers who are not happy with an order can ask the billing team for their money back by writing "
    "from the address on the account within {} days"
)
PRICING = (
    "Our pricing plans are billed per seat and every plan includes email support and single sign on for all "
    "members of the workspace at no extra {}"
)
QUERIES = ["offsite snapshots", "recovery operations", "invoices emailed", "pricing seat"]


def _corpus():
    """Four sources: one paragraph in a, b and c exactly, a near copy in a and b (b's is newer, so canonical),
    a 14- vs 30-day refund pair (fact conflict) and a newer finance-only near copy of a public page (ACL
    boundary), each query's words found in one place only."""
    events = [
        upsert("a", 1, [SHARED, RESTORE.format("key"),
                        "Alerts from the monitoring system page the engineer on call through the incident tool.",
                        REFUND.format(14)], day=1),
        upsert("b", 1, [SHARED, RESTORE.format("secret"),
                        "Holiday requests go through the people portal and need approval from your manager."],
               day=2),
        upsert("c", 1, [SHARED,
                        "Invoices are emailed to customers on the first working day of each billing period.",
                        REFUND.format(30), PRICING.format("cost")], day=1),
        upsert("d", 1, [PRICING.format("charge")], acl=("finance",), day=3),
    ]  # fmt: skip
    params = EngineParams()
    view = run_embedded(Engine(params), events)
    chunked = {event.source_id: document_positions(event, params) for event in events}
    positions = position_passages(chunked, view.mappings)
    return view, chunked, positions, chunk_passages(positions, view.chunks, view.mappings)


def test_the_top_k_of_each_index_is_the_one_derived_by_hand():
    _view, _chunked, positions, chunks = _corpus()
    without, with_ = Bm25Index(positions), Bm25Index(chunks)

    def found(index, query):
        return [(p.source_id, p.position, p.sources) for p in index.search(query, 2)]

    # Equal copies score equally and rank by source; the chunk is the newer copy's, reaching every source.
    assert found(without, "offsite snapshots") == [("a", 0, ("a",)), ("b", 0, ("b",))]
    assert found(with_, "offsite snapshots") == [("b", 0, ("a", "b", "c"))]
    assert found(without, "recovery operations") == [("a", 1, ("a",)), ("b", 1, ("b",))]
    assert found(with_, "recovery operations") == [("b", 1, ("a", "b"))]
    assert found(with_, "invoices emailed") == found(without, "invoices emailed") == [("c", 1, ("c",))]
    # The ACL-boundary pair stays two chunks, so neither index finds one of them redundant.
    assert found(without, "pricing seat") == [("c", 3, ("c",)), ("d", 0, ("d",))]
    assert found(with_, "pricing seat") == [("c", 3, ("c",)), ("d", 0, ("d",))]
    assert without.search("zebra", 2) == [] and with_.search("zebra", 2) == []


def test_redundancy_sources_savings_and_review_flags():
    view, _chunked, positions, chunks = _corpus()
    result = evaluate(positions, chunks, QUERIES, k=2, reviews=view.reviews)
    without, with_ = result.without_dedup, result.with_dedup

    assert (without.entries, with_.entries, result.embedding_calls_saved) == (12, 9, 3)
    assert [q.without_dedup.redundant for q in result.queries] == [1, 1, 0, 0]
    assert [q.with_dedup.redundant for q in result.queries] == [0, 0, 0, 0]
    assert (without.results, without.redundant_results, without.queries_with_redundancy) == (7, 2, 2)
    assert (with_.results, with_.redundant_results, with_.queries_with_redundancy) == (5, 0, 0)
    assert without.redundant_share == pytest.approx((1 / 2 + 1 / 2 + 0 + 0) / 4)
    assert with_.redundant_share == 0.0
    assert [q.without_dedup.sources for q in result.queries] == [2, 2, 1, 2]
    assert [q.with_dedup.sources for q in result.queries] == [3, 2, 1, 2]
    assert (without.unique_sources, with_.unique_sources) == (pytest.approx(7 / 4), pytest.approx(2.0))
    assert dict(result.review_flags) == {"fact_conflict": 1, "acl_boundary": 1, "semantic": 0}
    data = result.as_dict()
    assert data["embedding_calls_saved"] == 3
    assert data["per_query"][0] == {
        "query": "offsite snapshots",
        "without_dedup": {"results": 2, "redundant": 1, "sources": 2},
        "with_dedup": {"results": 1, "redundant": 0, "sources": 3},
    }


def test_chunks_that_differ_from_the_engines_positions_are_refused():
    view, chunked, _positions, _chunks = _corpus()
    changed = dict(chunked)
    changed["b"] = [chunked["b"][0], Chunk("Another text.", "Another text."), chunked["b"][2]]
    with pytest.raises(StreamDedupError, match="position 1 of 'b' does not match its mapping"):
        position_passages(changed, view.mappings)
    with pytest.raises(StreamDedupError, match="cut into 2 chunks, but its mapping has 3"):
        position_passages({**chunked, "b": chunked["b"][:2]}, view.mappings)
    with pytest.raises(StreamDedupError, match="no document for the live source 'd'"):
        position_passages({k: v for k, v in chunked.items() if k != "d"}, view.mappings)


def test_boilerplate_lines_are_stripped_as_the_source_stage_strips_them():
    footer = "Acme Corp internal use only"
    event = UpsertEvent(
        source_id="x",
        version=1,
        attrs=SourceAttrs(acl=("*",), modified_at=DAY),
        text=f"A paragraph.\n\n{footer}",
    )
    params = EngineParams()
    assert [c.plain for c in document_positions(event, params)] == ["A paragraph.", footer]
    assert [c.plain for c in document_positions(event, params, {line_hash(normalize(footer))})] == [
        "A paragraph."
    ]


def test_headings_by_content_type():
    markdown = "# Install\n\nRun it.\n\n## Configure the *CLI*\n\nSet it.\n\nSetext title\n---\n\nText."
    assert headings(markdown, "text/markdown") == ["Install", "Configure the CLI", "Setext title"]
    html = "<h1>Pricing</h1><p>x</p><h2>Plans</h2><h4>Fine print</h4><div><h3>FAQ</h3></div>"
    assert headings(html, "text/html") == ["Pricing", "Plans", "FAQ"]
    rst = (
        "==============\nMaking queries\n==============\n\n"
        "Intro text here\nstill intro.\n------------\n\n"
        "``QuerySet`` API\n----------------\n\nBody.\n\n"
        "    Indented\n    --------\n\n"
        "Too short for its underline\n---\n\n"
        "=====  =====\nA      B\n=====  =====\n\n"
        ":class:`Model` fields\n~~~~~~~~~~~~~~~~~~~~~\n"
    )
    assert headings(rst, "text/plain") == ["Making queries", "QuerySet API", "Model fields"]


def test_heading_queries_are_distinct_in_corpus_order_and_capped_evenly():
    def doc(source_id, text, content_type="text/markdown", title=None):
        attrs = SourceAttrs(acl=("*",), modified_at=DAY, title=title)
        return UpsertEvent(source_id=source_id, version=1, attrs=attrs, text=text, content_type=content_type)

    documents = [
        doc("a", "# Install\n\ntext\n\n# Upgrade\n\ntext", title="Setup guide"),
        doc("b", "<h1>INSTALL</h1><h2>Remove</h2><h5>Details</h5>", "text/html"),
        doc("c", "Backups\n=======\n\nText.\n\nUpgrade\n-------\n\n!!!\n---\n", "text/plain"),
    ]
    assert heading_queries(documents) == ["Setup guide", "Install", "Upgrade", "Remove", "Backups"]
    assert heading_queries(documents, limit=2) == ["Setup guide", "Upgrade"]
    assert heading_queries(reversed(documents)) == ["Backups", "Upgrade", "INSTALL", "Remove", "Setup guide"]


def _eval(tmp_path, source, settings, queries=None, k=5):
    out = tmp_path / "figures.json"
    console = Console(file=io.StringIO(), width=120)
    eval_command(settings, source, queries, k, out, console)
    return json.loads(out.read_text()), console.file.getvalue()


def test_documents_chunked_before_and_after_a_boilerplate_list_match_the_engine(tmp_path):
    # With one event per batch, the footer becomes boilerplate after the second document: the first two keep it
    # as a position, the third is chunked without it. Chunking all three alike would not match the mappings.
    footer = "Acme Corp internal use only"
    feed = tmp_path / "feed.jsonl"
    bodies = [
        "Quarterly planning starts in the first week and every team brings its roadmap.",
        "Expense reports are due on the fifth working day after a trip ends.",
        "The office opens at eight and the front desk closes at six every weekday.",
    ]
    feed.write_bytes(
        b"".join(
            encode_event(
                UpsertEvent(
                    source_id=f"doc{i}",
                    version=1,
                    attrs=SourceAttrs(acl=("*",), modified_at=DAY * (i + 1)),
                    text=f"{body}\n\n{footer}",
                )
            )
            + b"\n"
            for i, body in enumerate(bodies)
        )
    )
    queries = tmp_path / "queries.txt"
    queries.write_text("internal use\nfront desk\n")
    settings = Settings(boilerplate_min_docs=2, boilerplate_fraction=1.0, batch_size=1)
    data, _ = _eval(tmp_path, feed, settings, queries)
    assert (data["without_dedup"]["entries"], data["with_dedup"]["entries"]) == (5, 4)
    assert [q["without_dedup"] for q in data["per_query"]] == [
        {"results": 2, "redundant": 1, "sources": 2},
        {"results": 1, "redundant": 0, "sources": 1},
    ]
    assert data["per_query"][0]["with_dedup"] == {"results": 1, "redundant": 0, "sources": 2}


def test_a_folder_evaluated_with_queries_from_its_headings(tmp_path):
    folder = tmp_path / "docs"
    guide = "# Install the tool\n\nRun the installer and follow the prompts on screen until it reports success.\n\n"
    guide += "## Configure proxies\n\nSet the proxy address in the settings file before the first run starts."
    (folder / "copy").mkdir(parents=True)
    (folder / "guide.md").write_text(guide)
    (folder / "copy" / "guide.md").write_text(guide)
    (folder / "page.html").write_text(
        "<h1>Install the tool</h1><p>Download it.</p><h2>Pricing</h2><p>Free.</p>"
    )
    (folder / "notes.rst").write_text(
        "Release notes\n=============\n\nThe tool now runs on every platform.\n"
    )
    data, printed = _eval(tmp_path, folder, Settings())
    assert [q["query"] for q in data["per_query"]] == [
        "Install the tool",
        "Configure proxies",
        "Release notes",
        "Pricing",
    ]
    assert data["queries_from"] == "headings (at most 500)"
    assert data["without_dedup"]["redundant_results"] == 2  # each heading's chunk in guide.md and its copy
    assert data["with_dedup"]["redundant_results"] == 0
    assert data["embedding_calls_saved"] == 2
    assert "4 queries from headings" in printed


def test_eval_command_on_the_example_feed(tmp_path):
    queries = tmp_path / "queries.txt"
    queries.write_text("reset password email link\n\ninstall the cli\nrefund window days\nfloat16 serving\n")
    out = tmp_path / "figures.json"
    result = CliRunner().invoke(app, ["eval", str(EXAMPLE), "--queries", str(queries), "--json", str(out)])
    assert result.exit_code == 0, result.output
    for label in (
        "without dedup",
        "with dedup",
        "redundant results",
        "unique sources",
        "embedding calls saved",
    ):
        assert label in result.output
    data = json.loads(out.read_text())
    assert {"k", "queries", "without_dedup", "with_dedup", "embedding_calls_saved", "review_flags"} <= set(
        data
    )
    assert data["k"] == 5 and data["queries"] == 4
    figures = {"entries", "results", "redundant_results", "redundant_share", "queries_with_redundancy",
               "unique_sources"}  # fmt: skip
    assert figures <= set(data["without_dedup"]) and figures <= set(data["with_dedup"])
    assert data["without_dedup"]["redundant_results"] > 0
    assert data["with_dedup"]["redundant_results"] == 0
    assert data["with_dedup"]["unique_sources"] > data["without_dedup"]["unique_sources"]
    assert data["embedding_calls_saved"] == 3  # the run summary of the same feed says 3
    assert data["review_flags"] == {"fact_conflict": 2, "acl_boundary": 1, "semantic": 0}


def test_eval_without_queries_or_headings_says_what_to_do(tmp_path):
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(encode_event(upsert("a", 1, ["Just one paragraph without any heading at all."])) + b"\n")
    result = CliRunner().invoke(app, ["eval", str(feed)])
    assert result.exit_code == 1
    assert "pass --queries FILE" in " ".join(result.output.split())
