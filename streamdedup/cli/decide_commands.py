"""``streamdedup decide``: the commands that record a reviewer's decision (the review console writes the same events).

One command per kind of decision: about a pair of texts (``keep-separate``, ``merge``, ``reopen``), a source
(``prefer``, ``unprefer``) or a line of a collection (``boilerplate-allow``, ``-strip``, ``-auto``). Each imports
:mod:`streamdedup.cli.decide`, which does the work, when it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from streamdedup.cli.terminal import err, guard, settings_of
from streamdedup.errors import StreamDedupError

__all__ = ["decide_app"]

decide_app = typer.Typer(
    help="Record a reviewer's decision (the review console writes the same events).", no_args_is_help=True
)

_StateOption = Annotated[Path | None, typer.Option(help="Embedded: the state directory of 'run'.")]
_OutOption = Annotated[Path | None, typer.Option(help="Embedded: the output file of 'run' (appended to).")]
_BrokerOption = Annotated[
    str | None, typer.Option(help="Kafka: send it to the documents topic at this broker.")
]
_PrintOption = Annotated[bool, typer.Option("--print", help="Print the event as a JSONL line instead.")]
_ByOption = Annotated[str | None, typer.Option(help="Who decides (default: $USER).")]
_NoteOption = Annotated[str | None, typer.Option(help="Why, for the audit record.")]
_VersionOption = Annotated[
    int | None, typer.Option(help="The decision's version (default: now in microseconds; the newest wins).")
]
_PairA = Annotated[str, typer.Argument(help="A content hash, or the review key HASH_A:HASH_B.")]
_PairB = Annotated[str | None, typer.Argument(help="The other content hash.")]
_ReasonOption = Annotated[
    str | None,
    typer.Option(
        help="The reason of the flag it answers (fact_conflict, acl_boundary, semantic); read from --out when "
        "there is one. A merge of an acl_boundary flag is refused."
    ),
]


def _decide(
    ctx: typer.Context,
    kind: str,
    subject: dict[str, Any],
    state: Path | None,
    out: Path | None,
    broker: str | None,
    print_only: bool,
    by: str | None,
    note: str | None,
    version: int | None,
    reason: str | None = None,
) -> None:
    import os

    from streamdedup.cli.decide import decide_command

    settings = settings_of(ctx)
    who = by or os.environ.get("USER") or "reviewer"
    guard(
        lambda: decide_command(
            settings,
            kind,
            subject,
            state=state,
            out=out,
            broker=broker,
            print_only=print_only,
            by=who,
            note=note,
            version=version,
            reason=reason,
            console=err(),
        )
    )


def _pair_command(kind: str, summary: str) -> None:
    def command(
        ctx: typer.Context,
        first: _PairA,
        second: _PairB = None,
        state: _StateOption = None,
        out: _OutOption = None,
        broker: _BrokerOption = None,
        print_only: _PrintOption = False,
        by: _ByOption = None,
        note: _NoteOption = None,
        version: _VersionOption = None,
        reason: _ReasonOption = None,
    ) -> None:
        from streamdedup.cli.decide import pair_of

        try:
            pair = pair_of(first, second)
        except StreamDedupError as exc:
            err().print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from exc
        _decide(ctx, kind, {"pair": pair}, state, out, broker, print_only, by, note, version, reason)

    command.__doc__ = summary
    decide_app.command(name=kind.replace("_", "-"))(command)


def _source_command(kind: str, summary: str) -> None:
    def command(
        ctx: typer.Context,
        source_id: Annotated[str, typer.Argument(help="The source.")],
        state: _StateOption = None,
        out: _OutOption = None,
        broker: _BrokerOption = None,
        print_only: _PrintOption = False,
        by: _ByOption = None,
        note: _NoteOption = None,
        version: _VersionOption = None,
    ) -> None:
        _decide(ctx, kind, {"source_id": source_id}, state, out, broker, print_only, by, note, version)

    command.__doc__ = summary
    decide_app.command(name=kind)(command)


def _line_command(kind: str, summary: str) -> None:
    def command(
        ctx: typer.Context,
        collection: Annotated[str, typer.Argument(help="The collection.")],
        line: Annotated[str, typer.Argument(help="The line (as in 'streamdedup boilerplate').")],
        state: _StateOption = None,
        out: _OutOption = None,
        broker: _BrokerOption = None,
        print_only: _PrintOption = False,
        by: _ByOption = None,
        note: _NoteOption = None,
        version: _VersionOption = None,
    ) -> None:
        subject = {"collection": collection, "line": line}
        _decide(ctx, kind, subject, state, out, broker, print_only, by, note, version)

    command.__doc__ = summary
    decide_app.command(name=kind.replace("_", "-"))(command)


_pair_command("keep_separate", "Keep two texts apart: the pair's flag is resolved and never raised again.")
_pair_command("merge", "Merge two flagged texts (fact_conflict or semantic); never across an acl_boundary.")
_pair_command("reopen", "Undo keep-separate or merge: the pair goes back to the rules.")
_source_command("prefer", "Make a source's copies the canonical ones of their clusters.")
_source_command("unprefer", "Undo prefer: the canonical policy decides again.")
_line_command("boilerplate_allow", "Keep a line of a collection although it is frequent.")
_line_command("boilerplate_strip", "Strip a line of a collection although it is rare.")
_line_command("boilerplate_auto", "Undo allow or strip: the line's counts decide again.")
