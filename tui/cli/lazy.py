"""A click group whose subcommands are imported only when used (keeps `--help` fast)."""

from __future__ import annotations

import importlib
from typing import Any

import click

from kb.errors import UserError

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

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as exc:
            # One line naming the input and the reason; exit status 1.
            raise click.ClickException(str(exc)) from None
