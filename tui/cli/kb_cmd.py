"""`autoresearch kb ...`: the knowledge base. Each family of subcommands lives in its own module."""

from __future__ import annotations

import click

from tui.cli.lazy import CommandMap, LazyGroup

# name -> (module, attribute, help); imported on use so `autoresearch kb --help` stays fast.
SUBCOMMANDS: CommandMap = {
    "add-paper": ("tui.cli.kb_papers_cmd", "add_paper", "Ingest papers and articles (URL, file, folder)."),
    "discover": ("tui.cli.kb_discover_cmd", "discover", "Find papers in arXiv, OpenAlex, Semantic Scholar."),
    "papers": ("tui.cli.kb_papers_cmd", "papers", "List ingested papers."),
    "search": ("tui.cli.kb_papers_cmd", "search", "Full-text search over all evidence."),
    "show": ("tui.cli.kb_papers_cmd", "show", "Show one evidence item by id."),
    "stats": ("tui.cli.kb_papers_cmd", "stats", "Counts per kind and database size."),
    "add-fork": ("tui.cli.kb_forks_cmd", "add_fork", "Fetch a fork and record its fork-only commits."),
    "forks": ("tui.cli.kb_forks_cmd", "forks", "List forks with commit counts."),
    "commits": ("tui.cli.kb_forks_cmd", "commits", "List a fork's commits (filter by path)."),
    "add-prs": ("tui.cli.kb_prs_cmd", "add_prs", "Read the upstream's pull requests (refs/pull/*/head)."),
    "prs": ("tui.cli.kb_prs_cmd", "prs", "List the pull requests read."),
    "inventory": ("tui.cli.kb_inventory_cmd", "inventory", "Scan backends for operator fusions and gaps."),
}


@click.group("kb", cls=LazyGroup, lazy_commands=SUBCOMMANDS)
def cli() -> None:
    """Knowledge base: papers (discovered or given), fork diffs, the upstream's pull requests,
    backend fusion inventory, full-text search."""
