"""`autoresearch kb discover`: papers from arXiv, OpenAlex or Semantic Scholar, and `--add N`."""

from __future__ import annotations

import textwrap
from typing import Any

import click

from kb.errors import UserError
from tui.cli.common import echo, echo_json, json_option, workspace
from tui.cli.params import TEXT


@click.command("discover")
@click.argument("query", nargs=-1, required=True, type=TEXT)
@click.option(
    "--source",
    type=click.Choice(["arxiv", "openalex", "semantic-scholar"]),
    help="Which API to ask (default: kb.discovery.source, arxiv).",
)
@click.option("--limit", type=click.IntRange(1, 100), default=10, show_default=True, help="Candidates.")
@click.option("--since", metavar="DATE", help="Only papers from this date on (YYYY-MM-DD, YYYY-MM or YYYY).")
@click.option(
    "--add",
    "add",
    type=click.IntRange(1, 100),
    metavar="N",
    help="Ingest the first N candidates not in the knowledge base yet (HTML or PDF, as add-paper).",
)
@json_option
@click.pass_context
def discover(
    ctx: click.Context,
    query: tuple[str, ...],
    source: str | None,
    limit: int,
    since: str | None,
    add: int | None,
    as_json: bool,
) -> None:
    """List candidate papers for QUERY from a public scholarly API: title, authors, date, venue,
    citations (OpenAlex and Semantic Scholar count them), the abstract, and whether the knowledge
    base has the paper already. No key is needed; rate limits are respected and said.

    With --add N the first N candidates not in the knowledge base are ingested (an arXiv paper from
    its HTML version, else its PDF; others from their open PDF, else their landing page)."""
    from kb.papers.discover import discover as run_discover
    from kb.papers.ingest import PaperResult, add_paper

    ws = workspace(ctx)
    db = ws.db()
    found = run_discover(db, " ".join(query), ws.settings.kb, source=source, limit=limit, since=since)
    results: list[PaperResult] = []
    if add:
        for cand in [c for c in found.candidates if c.known is None][:add]:
            where = cand.location
            if where is None:
                results.append(PaperResult(cand.title, "error", f"{cand.title}: no address to read it from"))
                continue
            try:
                results.append(add_paper(db, where, ws.settings.kb, known=cand.keys()))
            except UserError as exc:  # one paper's failure; the others still go in
                results.append(PaperResult(where, "error", str(exc)))
    if as_json:
        echo_json({**found.to_json(), "added": [r.to_json() for r in results]})
        for result in results:
            if result.status == "error":
                echo(f"Error: {result.message}", err=True)
    else:
        _show(found.to_json())
        for result in results:
            if result.status == "error":
                echo(f"Error: {result.message}", err=True)
            else:
                echo(result.message)
        if add:
            added = sum(r.status == "added" for r in results)
            failed = sum(r.status == "error" for r in results)
            echo(f"{added} added, {failed} failed", err=True)
    for note in found.notes:
        echo(f"Note: {note}", err=True)
    if any(r.status == "error" for r in results):
        ctx.exit(1)


def _show(found: dict[str, Any]) -> None:
    candidates = found["candidates"]
    total = f" of {found['total']:,}" if isinstance(found.get("total"), int) else ""
    echo(f"{len(candidates)}{total} candidates from {found['source']} for {found['query']!r}")
    for i, c in enumerate(candidates, start=1):
        mark = f"in kb: paper {c['known']}" if c["known"] is not None else "new"
        facts = [c["published"] or "no date", c["venue"] or ""]
        if c["citations"] is not None:
            facts.append(f"{c['citations']:,} citations")
        echo(f"{i:>2}. [{mark}] {c['title']}")
        echo(f"    {', '.join(f for f in facts if f)}")
        authors = c["authors"]
        if authors:
            shown = ", ".join(authors[:4]) + (f" and {len(authors) - 4} more" if len(authors) > 4 else "")
            echo(f"    {shown}")
        if c["abstract"]:
            abstract = c["abstract"] if len(c["abstract"]) <= 300 else c["abstract"][:299] + "…"
            echo(textwrap.fill(abstract, 96, initial_indent="    ", subsequent_indent="    "))
        if c["location"]:
            echo(f"    {c['location']}")
