"""Helpers shared by the CLI commands: finding the workspace, output, JSON, tables.

Every line the command line prints goes through `echo` (or `echo_json`, `echo_table`,
`echo_styled`, built on it): outside text in it (commit subjects, imported descriptions, file
names, a server's status line) reaches the terminal inert (kb/textsafe.py). No other module of
tui/cli prints (tests/foundation/test_terminal_edge.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click

from kb.textsafe import inert, json_text
from kb.workspace import Workspace, find_workspace

F = TypeVar("F", bound=Callable[..., Any])


def workspace(ctx: click.Context) -> Workspace:
    """The workspace for this invocation (--workspace, $AUTORESEARCH_WORKSPACE, or cwd upwards),
    its config validated: a bad value is reported by every command, not only the ones that read it."""
    root = ctx.find_root()
    given = root.obj.get("workspace") if isinstance(root.obj, dict) else None
    ws = find_workspace(given)
    ws.settings  # noqa: B018 (loads and validates; cached on the workspace)
    return ws


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(fn)


def echo(text: object = "", *, err: bool = False, nl: bool = True) -> None:
    """Print `text` (lines and tabs kept, every other control character shown inert)."""
    click.echo(inert(text, lines=True), err=err, nl=nl)


def echo_styled(pieces: Sequence[tuple[object, dict[str, Any]]], *, err: bool = False) -> None:
    """One line of pieces, each inert, styled (click.style's keywords) when printing to a terminal."""
    styled = (sys.stderr if err else sys.stdout).isatty()
    line = "".join(
        click.style(inert(text), **style) if styled and style else inert(text) for text, style in pieces
    )
    click.echo(line, err=err)


def confirm(question: str, *, default: bool = False) -> bool:
    """A yes/no question on standard error (its text inert)."""
    return click.confirm(inert(question), default=default, err=True)


def echo_json(data: Any) -> None:
    """JSON for scripts: C0 escaped by json itself, DEL, C1, bidi controls and lone surrogates
    escaped by json_text (json.loads gives back exactly what was stored)."""
    click.echo(json_text(data))


def echo_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A plain aligned table (no colour: output is often piped or read over SSH)."""
    text_rows = [["" if v is None else inert(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        widths = [max(w, len(v)) for w, v in zip(widths, row, strict=False)]
    echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in text_rows:
        echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)).rstrip())
