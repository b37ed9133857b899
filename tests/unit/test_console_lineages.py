"""The review queue shows, beside each pair, the lineages its sides' sources belong to and their versions."""

from __future__ import annotations

from pathlib import Path

from aiohttp.test_utils import TestClient

from streamdedup.core.lineage import LineageRules
from streamdedup.review.console.data import ConsoleData, Side, SourceInfo
from streamdedup.review.console.output_feeds import OutputFileFeed
from streamdedup.review.console.pages import LineageRow, lineage_rows
from streamdedup.review.console.web import ConsoleConfig, create_app
from tests.unit.test_console import PARAMS, Recorder, call, example  # noqa: F401 - example is a fixture

POLICIES = LineageRules.parse({"drive": ["drive:policies/{name}-v{version}.pdf"]})


def _side(*source_ids: str) -> Side:
    sources = tuple(SourceInfo(s, 0, None, None, None, ("*",)) for s in source_ids)
    return Side("a" * 64, "text", ("*",), None, sources, False, None, "canonical")


def test_each_lineage_of_a_pair_is_listed_with_the_versions_of_each_side_in_order():
    signed = "drive:policies/travel-policy-v2-final-signed.pdf"
    final, first = signed.replace("-signed", ""), signed.replace("-final-signed", "")
    rows = lineage_rows(POLICIES, _side(signed, "web:other"), _side(first, final))
    assert rows == (
        LineageRow("drive:policies/travel-policy-v{version}.pdf", ("2-final-signed",), ("2", "2-final")),
    )
    assert rows[0].order == ("2", "2-final", "2-final-signed")
    assert lineage_rows(POLICIES, _side("web:other"), _side("web:another")) == ()


def test_the_queue_page_shows_the_lineages_beside_a_pair(example, tmp_path: Path):  # noqa: F811
    state, out = example
    rules = LineageRules.parse({"default": ["{version...}/pricing-faq"]})

    def page(lineages: LineageRules | None) -> str:
        config = ConsoleConfig(
            by="ana", params=PARAMS, state=state, verdicts=None, sample=10, lineages=lineages
        )

        async def steps(client: TestClient) -> str:
            return await (await client.get("/queue")).text()

        return call(create_app(config, OutputFileFeed(out), Recorder()), steps)

    shown = page(rules)
    assert shown.count('<li class="lineage"') == 1  # the pricing pair; the others' sources match no rule
    assert 'data-lineage="{version}/pricing-faq"' in shown
    assert '<span class="versions-a">web:public</span>' in shown
    assert '<span class="versions-b">confluence:finance</span>' in shown
    assert "oldest first: confluence:finance &lt; web:public" in shown
    assert '<li class="lineage"' not in page(None)
    data: ConsoleData = OutputFileFeed(out).refresh()
    assert len(data.open_flags()) == 3
