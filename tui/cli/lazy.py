"""A click group whose subcommands are imported only when used (keeps `--help` fast)."""

from __future__ import annotations

import importlib
import sqlite3
from pathlib import Path
from typing import Any

import click

from kb.errors import UserError
from kb.textsafe import inert
from tui.errors import user_line

# name -> (module, attribute, one-line help). The help is repeated so `--help` need not import.
CommandMap = dict[str, tuple[str, str, str]]


class LazyGroup(click.Group):
    def __init__(self, *args: Any, lazy_commands: CommandMap | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: CommandMap = lazy_commands or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.lazy_commands, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = self.lazy_commands.get(cmd_name)
        if spec is None:
            return self.commands.get(cmd_name)
        command = getattr(importlib.import_module(spec[0]), spec[1])
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (
                name,
                self.lazy_commands[name][2]
                if name in self.lazy_commands
                else self.commands[name].get_short_help_str(),
            )
            for name in self.list_commands(ctx)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for arg in args:
            _require_utf8(arg)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; a failure the user can act on becomes one line and exit status 1.

        Which errors become lines, and the line, is tui/errors.py's rule (the MCP server's too):
        UserError (bad input or state), SQLite failures that are the environment's (a lock held too
        long, a read-only or full disk), OS errors on a named file. Anything else is a bug and
        keeps its traceback. The line is inert (kb/textsafe.py): errors quote file names, a
        server's reply, commit subjects."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a subcommand's bad option or argument (exit status 2)
            raise _one_line(exc) from None
        except click.ClickException as exc:  # a command's own: it may quote outside text too
            exc.message = inert(exc.message)
            raise
        except (UserError, sqlite3.Error, OSError, OverflowError) as exc:
            line = user_line(exc, lambda: _database(ctx))
            if line is None:
                raise
            raise click.ClickException(line) from None


def _one_line(exc: click.UsageError) -> click.UsageError:
    """click's usage error as one line (the reason, then where help is) instead of three."""
    if exc.ctx is None:
        exc.message = inert(exc.message)
        return exc
    where = (
        f"{exc.ctx.command_path} {exc.ctx.help_option_names[0] if exc.ctx.help_option_names else '--help'}"
    )
    return click.UsageError(inert(f"{exc.format_message()} (see {where})"))


def _require_utf8(arg: str) -> None:
    """Arguments reach SQLite and the terminal as text: bytes that are not UTF-8 (which Python
    keeps as lone surrogates) would fail deep inside a query, so they are refused up front."""
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise click.ClickException(f"argument '{inert(shown)}': not valid UTF-8 text") from None


def _database(ctx: click.Context) -> Path | None:
    """The workspace database this invocation uses, when the workspace can be found."""
    from kb.db import DB_NAME
    from kb.locate import workspace_root

    obj = ctx.find_root().obj
    try:
        root = workspace_root(obj.get("workspace") if isinstance(obj, dict) else None)
    except UserError:
        return None
    return root / DB_NAME
