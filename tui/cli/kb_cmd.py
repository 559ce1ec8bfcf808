"""`autoresearch kb ...`: the knowledge base. Each family of subcommands lives in its own module."""

from __future__ import annotations

import importlib

import click

# name -> (module, attribute, help); imported on use so `autoresearch kb --help` stays fast.
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "add-paper": ("tui.cli.kb_papers_cmd", "add_paper", "Ingest papers and articles (URL, file, folder)."),
    "papers": ("tui.cli.kb_papers_cmd", "papers", "List ingested papers."),
    "search": ("tui.cli.kb_papers_cmd", "search", "Full-text search over all evidence."),
    "show": ("tui.cli.kb_papers_cmd", "show", "Show one evidence item by id."),
    "stats": ("tui.cli.kb_papers_cmd", "stats", "Counts per kind and database size."),
    "add-fork": ("tui.cli.kb_forks_cmd", "add_fork", "Fetch a fork and record its fork-only commits."),
    "forks": ("tui.cli.kb_forks_cmd", "forks", "List forks with commit counts."),
    "commits": ("tui.cli.kb_forks_cmd", "commits", "List a fork's commits (filter by path)."),
    "inventory": ("tui.cli.kb_inventory_cmd", "inventory", "Scan backends for operator fusions and gaps."),
}


class _KBGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = SUBCOMMANDS.get(cmd_name)
        if spec is None:
            return None
        command = getattr(importlib.import_module(spec[0]), spec[1])
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, spec[2]) for name, spec in SUBCOMMANDS.items()])


@click.group("kb", cls=_KBGroup)
def cli() -> None:
    """Knowledge base: papers, fork diffs, backend fusion inventory, full-text search."""
