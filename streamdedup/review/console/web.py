"""The review console's web application (aiohttp): three tabs of plain HTML, a little JavaScript, no build step.

- **Queue** (``/queue``): the open review flags, newest first, both texts side by side with the words and fact
  tokens that differ marked, and the flags already decided with who decided what and when; buttons write
  ``keep_separate``, ``merge`` and ``reopen`` decisions (``POST /api/decision``). A decision the engine would
  refuse (a merge across an ``acl_boundary``) is refused here with HTTP 409 and its reason.
- **Calibration sample** (``/calibration``): pairs drawn reproducibly around the engine's threshold from the
  state, each judged correct or incorrect (``POST /api/verdict``, kept in a JSON file), with the precision of
  merges and the threshold the verdicts suggest (:mod:`streamdedup.review.console.stats`).
- **Boilerplate** (``/boilerplate``): each collection's boilerplate and most frequent lines, with allow / strip /
  auto decisions.

The outputs come from a feed (:mod:`streamdedup.review.console.output_feeds`), decisions go to a submitter (an
embedded state or the documents topic, see :func:`embedded_submitter` and :func:`kafka_submitter`), and the state is
read by :class:`~streamdedup.review.console.reader.StateReader`, which opens it for one call at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import jinja2
from aiohttp import web

from streamdedup.core.lineage import LineageRules
from streamdedup.core.params import EngineParams
from streamdedup.errors import StreamDedupError
from streamdedup.query.calibration import VerifiedPair
from streamdedup.query.corpus import CorpusText
from streamdedup.review.console.data import ConsoleData, line_subject, pair_subject, source_subject
from streamdedup.review.console.pages import calibration_figures, queue_items, sample_items
from streamdedup.review.console.reader import StateReader
from streamdedup.review.console.stats import SAMPLE_SEED, SUGGESTION_RULE, TARGET_PRECISION, draw_sample
from streamdedup.review.console.verdicts import VERDICT_KINDS, VerdictFile
from streamdedup.review.decisions import (
    LINE_DECISIONS,
    PAIR_DECISIONS,
    SOURCE_DECISIONS,
    DecisionRefused,
    EmbeddedDecisions,
    KafkaDecisions,
    check_decision,
    decision_event,
)

__all__ = [
    "ConsoleConfig",
    "Feed",
    "ReviewConsole",
    "Submit",
    "create_app",
    "embedded_submitter",
    "kafka_submitter",
]

logger = logging.getLogger(__name__)

_HERE = Path(__file__).parent
#: Lines per collection shown besides the boilerplate ones.
FREQUENT_LINES = 20


class Feed(Protocol):
    """Where the console's fold of the outputs comes from (:mod:`streamdedup.review.console.output_feeds`)."""

    @property
    def where(self) -> str:
        """What is read, in words."""
        ...

    @property
    def problem(self) -> str | None:
        """Why the outputs cannot be shown (yet), or None."""
        ...

    def refresh(self) -> ConsoleData:
        """Bring the fold up to date and return it."""
        ...


#: Applies or sends one decision event; returns what happened, in words. Raises DecisionRefused or
#: StreamDedupError.
Submit = Callable[[dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """How the console runs: who reviews, the engine parameters, the state, the sample and its verdicts."""

    by: str
    params: EngineParams
    state: Path | None
    verdicts: Path | None
    sample: int = 50
    applies_at_once: bool = True  # embedded: a decision is in the outputs when the call returns
    lineages: LineageRules | None = None  # STREAMDEDUP_LINEAGE_RULES: each side's versions beside a pair


@dataclass(frozen=True, slots=True)
class _Sample:
    pairs: tuple[VerifiedPair, ...]
    texts: dict[str, CorpusText]
    corpus_texts: int
    verified: int


def embedded_submitter(decisions: EmbeddedDecisions) -> Submit:
    """Return a submitter that applies decisions to an embedded state, one at a time, off the event loop."""
    lock = asyncio.Lock()

    async def submit(event: dict[str, Any]) -> str:
        async with lock:
            outputs = await asyncio.to_thread(decisions.submit, event)
        return f"applied: {len(outputs)} output record(s) written"

    return submit


def kafka_submitter(decisions: KafkaDecisions) -> Submit:
    """Return a submitter that sends decisions to the documents topic."""

    async def submit(event: dict[str, Any]) -> str:
        await decisions.submit(event)
        return "sent to the documents topic; the page shows it once the worker has applied it"

    return submit


class ReviewConsole:
    """The console's request handlers and what they share: the feed, the submitter, the sample, the verdicts."""

    def __init__(self, config: ConsoleConfig, feed: Feed, submit: Submit) -> None:
        self.config = config
        self.feed = feed
        self.submit = submit
        self.reader = None if config.state is None else StateReader(config.state, config.params)
        self.verdicts = None if config.verdicts is None else VerdictFile(config.verdicts)
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=jinja2.select_autoescape(["html"]),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._data_lock = asyncio.Lock()  # a refresh never runs while a page reads the fold
        self._sample_lock = asyncio.Lock()
        self._sample: _Sample | None = None

    def routes(self) -> list[web.AbstractRouteDef]:
        """Return the application's routes."""
        return [
            web.get("/", self.index),
            web.get("/queue", self.queue),
            web.get("/calibration", self.calibration),
            web.post("/calibration/redraw", self.redraw),
            web.get("/boilerplate", self.boilerplate),
            web.post("/api/decision", self.decide),
            web.post("/api/verdict", self.judge),
            web.static("/static", _HERE / "static"),
        ]

    def _page(self, template: str, tab: str, **context: Any) -> web.Response:
        body = self.templates.get_template(template).render(
            tab=tab,
            by=self.config.by,
            where=self.feed.where,
            problem=self.feed.problem,
            state=self.config.state,
            **context,
        )
        return web.Response(text=body, content_type="text/html")

    async def _data(self) -> ConsoleData:
        return await asyncio.to_thread(self.feed.refresh)

    # -- pages -------------------------------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.StreamResponse:
        """Send the reviewer to the queue."""
        raise web.HTTPFound("/queue")

    async def queue(self, request: web.Request) -> web.Response:
        """Show the open flags, newest first, then the decided ones."""
        async with self._data_lock:
            data = await self._data()
            open_flags, resolved = data.open_flags(), data.resolved_flags()
            missing = [
                side.content_hash
                for flag in (*open_flags, *resolved)
                for side in (data.side(flag, "a"), data.side(flag, "b"))
                if side.text is None
            ]
            texts: dict[str, str] = {}
            if missing and self.reader is not None:
                try:
                    texts = await asyncio.to_thread(self.reader.texts, missing)
                except StreamDedupError as exc:
                    logger.warning("cannot read texts from the state: %s", exc)
            return self._page(
                "queue.html",
                "queue",
                open_items=queue_items(data, open_flags, texts, self.config.lineages),
                resolved_items=queue_items(data, resolved, texts, self.config.lineages),
                records=data.records,
            )

    async def _drawn(self, *, again: bool = False) -> _Sample:
        async with self._sample_lock:
            if self._sample is None or again:
                self._sample = await asyncio.to_thread(self._draw)
            return self._sample

    def _draw(self) -> _Sample:
        if self.reader is None:  # pragma: no cover - the pages check first
            raise StreamDedupError("no state directory")
        corpus, pairs = self.reader.calibration_pairs()
        drawn = draw_sample(pairs, self.config.params.threshold, self.config.sample)
        wanted = {h for p in drawn for h in (p.better, p.worse)}
        texts = {t.content_hash: t for t in corpus.texts if t.content_hash in wanted}
        return _Sample(tuple(drawn), texts, len(corpus.texts), len(pairs))

    async def calibration(self, request: web.Request) -> web.Response:
        """Show the calibration sample with its verdicts and what they say."""
        threshold = self.config.params.threshold
        context: dict[str, Any] = {
            "threshold": threshold,
            "sample_size": self.config.sample,
            "seed": SAMPLE_SEED,
            "rule": SUGGESTION_RULE,
            "target": TARGET_PRECISION,
            "verdicts_path": self.config.verdicts,
            "error": None,
            "items": [],
            "sample": None,
            "figures": None,
        }
        if self.reader is None or self.verdicts is None:
            context["error"] = (
                "The calibration sample is drawn from the engine's state: start the console with --state DIR."
            )
            return self._page("calibration.html", "calibration", **context)
        try:
            sample = await self._drawn()
            verdicts = await asyncio.to_thread(self.verdicts.load)
            figures = calibration_figures(await asyncio.to_thread(self.verdicts.verdicts), threshold)
        except StreamDedupError as exc:
            context["error"] = str(exc)
            return self._page("calibration.html", "calibration", **context)
        async with self._data_lock:
            data = await self._data()
            keys = [pair_subject(p.better, p.worse) for p in sample.pairs]
            decisions = {key: found for key in keys if (found := data.decision(key)) is not None}
        context.update(
            sample=sample,
            items=sample_items(sample.pairs, sample.texts, threshold, verdicts, decisions),
            figures=figures,
        )
        return self._page("calibration.html", "calibration", **context)

    async def redraw(self, request: web.Request) -> web.StreamResponse:
        """Draw the sample again from the state as it is now (verdicts are kept)."""
        if self.reader is not None:
            try:
                await self._drawn(again=True)
            except StreamDedupError as exc:
                logger.warning("cannot draw the sample: %s", exc)
        raise web.HTTPSeeOther("/calibration")

    async def boilerplate(self, request: web.Request) -> web.Response:
        """Show each collection's lines with their counts, decisions and buttons."""
        if self.reader is None:
            return self._page(
                "boilerplate.html",
                "boilerplate",
                collections=[],
                decisions={},
                error="The boilerplate lines are read from the engine's state: start the console with --state DIR.",
                params=self.config.params,
            )
        async with self._data_lock:
            data = await self._data()
            decided: dict[str, list[str]] = {}
            for decision in data.decisions.values():
                collection, line = decision.event.get("collection"), decision.event.get("line")
                if decision.kind in LINE_DECISIONS and isinstance(collection, str) and isinstance(line, str):
                    decided.setdefault(collection, []).append(line)
            error = None
            reader = self.reader
            try:
                collections = await asyncio.to_thread(
                    lambda: reader.collections(top=FREQUENT_LINES, decided=decided)
                )
            except StreamDedupError as exc:
                collections, error = [], str(exc)
            decisions = {
                line_subject(c.name, line.text): data.decision(line_subject(c.name, line.text))
                for c in collections
                for line in (*c.boilerplate, *c.frequent)
            }
            return self._page(
                "boilerplate.html",
                "boilerplate",
                collections=collections,
                decisions=decisions,
                error=error,
                params=self.config.params,
            )

    # -- actions -----------------------------------------------------------------------------------------------

    async def decide(self, request: web.Request) -> web.Response:
        """Check a decision, then apply or send it; 409 with the reason when it is refused."""
        body = await _json_body(request)
        if isinstance(body, web.Response):
            return body
        async with self._data_lock:
            data = await self._data()
            try:
                event, subject, flag = self._event(body, data)
            except LookupError as exc:
                return _error(404, str(exc.args[0]))
            except DecisionRefused as exc:  # the engine would not take it (a merge across an acl_boundary)
                return _error(409, str(exc))
            except ValueError as exc:
                return _error(400, str(exc))
            try:
                check_decision(event, flag)
                message = await self.submit(event)
            except DecisionRefused as exc:
                return _error(409, str(exc))
            except StreamDedupError as exc:
                return _error(503, f"the decision could not be applied: {exc}")
        return web.json_response(
            {"ok": True, "applied": self.config.applies_at_once, "message": message, "subject": subject}
        )

    def _event(
        self, body: dict[str, Any], data: ConsoleData
    ) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
        """Return the decision a request asks for, its subject key and the flag it answers.

        ValueError when the request is not a decision; LookupError when a pair decision names no known flag.
        """
        kind = body.get("decision")
        note = body.get("note") if isinstance(body.get("note"), str) and body.get("note") else None
        by = self.config.by
        if kind in PAIR_DECISIONS:
            pair = body.get("pair")
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not all(isinstance(h, str) and h and ":" not in h for h in pair)
            ):
                raise ValueError("a pair decision needs 'pair': two content hashes")
            low, high = sorted(pair)
            subject = pair_subject(low, high)
            flag = data.flags.get(subject)
            if flag is None:
                raise LookupError(f"no review flag for the pair {subject}")
            # Checked before it is built, so that a refusal reads as the check words it, not as a parse error.
            check_decision({"decision": kind, "pair": [low, high], "reason": flag.reason}, flag.value)
            event = decision_event(kind, by=by, pair=(low, high), note=note, reason=flag.reason or None)
            return event, subject, flag.value
        if kind in SOURCE_DECISIONS:
            source_id = body.get("source_id")
            if not isinstance(source_id, str) or not source_id:
                raise ValueError("a source decision needs 'source_id'")
            return (
                decision_event(kind, by=by, source_id=source_id, note=note),
                source_subject(source_id),
                None,
            )
        if kind in LINE_DECISIONS:
            collection, line = body.get("collection"), body.get("line")
            if not isinstance(collection, str) or not isinstance(line, str) or not collection or not line:
                raise ValueError("a line decision needs 'collection' and 'line'")
            event = decision_event(kind, by=by, collection=collection, line=line, note=note)
            return event, line_subject(collection, line), None
        known = ", ".join((*PAIR_DECISIONS, *SOURCE_DECISIONS, *LINE_DECISIONS))
        raise ValueError(f"'decision' is one of {known}, not {kind!r}")

    async def judge(self, request: web.Request) -> web.Response:
        """Record a verdict on a sample pair and answer with the figures it changes."""
        if self.verdicts is None or self.reader is None:
            return _error(409, "no calibration sample: start the console with --state DIR")
        body = await _json_body(request)
        if isinstance(body, web.Response):
            return body
        key, verdict = body.get("key"), body.get("verdict")
        if verdict is not None and verdict not in VERDICT_KINDS:
            return _error(400, f"'verdict' is one of {', '.join(VERDICT_KINDS)} or null")
        try:
            sample = await self._drawn()
        except StreamDedupError as exc:
            return _error(503, str(exc))
        pair = next((p for p in sample.pairs if pair_subject(p.better, p.worse) == key), None)
        if pair is None or not isinstance(key, str):
            return _error(404, f"no pair {key!r} in the sample")
        verdicts = self.verdicts
        try:
            await asyncio.to_thread(
                lambda: verdicts.record(
                    key, verdict, jaccard=pair.jaccard, fact_conflict=pair.fact_conflict, by=self.config.by
                )
            )
            figures = calibration_figures(
                await asyncio.to_thread(verdicts.verdicts), self.config.params.threshold
            )
        except StreamDedupError as exc:
            return _error(503, str(exc))
        html = self.templates.get_template("_figures.html").render(
            figures=figures, rule=SUGGESTION_RULE, target=TARGET_PRECISION
        )
        return web.json_response({"ok": True, "key": key, "verdict": verdict, "html": html})


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "error": message}, status=status)


async def _json_body(request: web.Request) -> dict[str, Any] | web.Response:
    """Return a request's JSON object, or the error response to send.

    Only ``application/json`` is taken: another site's page cannot send that to the console without the CORS
    preflight, which the console never answers, so it cannot make decisions in the reviewer's name.
    """
    if request.content_type != "application/json":
        return _error(415, "send the body as application/json")
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "the body is not JSON")
    if not isinstance(body, dict):
        return _error(400, "the body is not a JSON object")
    return body


def create_app(
    config: ConsoleConfig,
    feed: Feed,
    submit: Submit,
    *,
    background: Callable[[asyncio.Event], Coroutine[Any, Any, None]] | None = None,
) -> web.Application:
    """Return the console's application; ``background`` (a feed's follower) runs while the application does."""
    console = ReviewConsole(config, feed, submit)
    app = web.Application()
    app.add_routes(console.routes())
    if background is not None:
        follower = background

        async def run_background(app: web.Application) -> Any:
            stop = asyncio.Event()
            task = asyncio.create_task(follower(stop))
            yield
            stop.set()
            try:
                await asyncio.wait_for(task, timeout=10)
            except asyncio.TimeoutError:  # pragma: no cover - a broker that does not answer
                task.cancel()

        app.cleanup_ctx.append(run_background)
    return app
