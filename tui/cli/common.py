"""Helpers shared by the CLI commands: finding the workspace, JSON output, tables."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click

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


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def echo_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A plain aligned table (no colour: output is often piped or read over SSH)."""
    text_rows = [["" if v is None else str(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        widths = [max(w, len(v)) for w, v in zip(widths, row, strict=False)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in text_rows:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)).rstrip())
