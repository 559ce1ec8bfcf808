"""`autoresearch kb add-paper | papers | search | show | stats`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from kb.textsafe import clip, inert
from tui.cli.common import echo, echo_json, echo_styled, echo_table, json_option, workspace
from tui.cli.params import ROW_ID, TEXT

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar


def _err(message: str) -> None:
    echo(f"Error: {inert(message)}", err=True)


@click.command("add-paper")
@click.argument("inputs", nargs=-1, required=True, type=TEXT, metavar="URL|FILE|DIR...")
@json_option
@click.pass_context
def add_paper(ctx: click.Context, inputs: tuple[str, ...], as_json: bool) -> None:
    """Ingest papers and articles: http(s) URLs, .html files, and folders of them.

    arXiv abs, html and pdf links (and arXiv:ID) map to one paper, read from its HTML version.
    Each input is all or nothing; re-adding one changes nothing. Bad inputs are reported one line
    each and make the exit status 1; the others are still added."""
    from kb.papers import PaperResult, add_papers, expand_inputs

    ws = workspace(ctx)
    items = expand_inputs(inputs)
    db = ws.db()
    show_bar = len(items) > 3 and not as_json
    results: list[PaperResult]
    if show_bar:
        bar: ProgressBar[int]
        with click.progressbar(
            length=len(items), label="papers", file=sys.stderr, show_pos=True, show_eta=True
        ) as bar:
            results = add_papers(db, items, ws.settings.kb, progress=lambda _result: bar.update(1))
    else:
        results = add_papers(db, items, ws.settings.kb)
    failed = [r for r in results if r.status == "error"]
    if as_json:
        echo_json([r.to_json() for r in results])
        for result in failed:
            _err(result.message)
    else:
        for result in results:
            if result.status == "error":
                _err(result.message)
            else:
                echo(result.message)
            for note in result.notes:
                echo(f"Warning: {result.input}: {note}", err=True)
        if len(results) > 1:
            added = sum(r.status == "added" for r in results)
            known = sum(r.status == "exists" for r in results)
            echo(f"{added} added, {known} already in the knowledge base, {len(failed)} failed", err=True)
    if failed:
        ctx.exit(1)


@click.command("papers")
@json_option
@click.pass_context
def papers(ctx: click.Context, as_json: bool) -> None:
    """List ingested papers with their passage counts."""
    from kb.papers import list_papers

    found = list_papers(workspace(ctx).db())
    if as_json:
        echo_json([p.to_json() for p in found])
        return
    if not found:
        echo("no papers yet (autoresearch kb add-paper URL|FILE|DIR)")
        return
    echo_table(
        ["id", "passages", "date", "arxiv", "title", "url"],
        [
            [
                p.id,
                p.passages,
                p.published or "",
                p.arxiv_id or "",
                clip(p.title, 50),
                p.canonical_url or p.url,
            ]
            for p in found
        ],
    )


@click.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option(
    "--kind", type=click.Choice(["paper", "commit", "fusion", "note"]), help="Only this kind of evidence."
)
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@json_option
@click.pass_context
def search(ctx: click.Context, query: tuple[str, ...], kind: str | None, limit: int, as_json: bool) -> None:
    """Full-text search over all evidence, best first. Words are matched literally (code identifiers
    such as ggml_can_fuse included); "a phrase", prefix*, and OR between terms are understood.
    Cite a result by its id (autoresearch kb show ID)."""
    from kb.search import search as run_search

    text = " ".join(query)
    db = workspace(ctx).db()
    if as_json:
        echo_json([h.to_json() for h in run_search(db, text, kind=kind, limit=limit)])
        return
    marks = ("\x01", "\x02")  # the hit's words, bold on a terminal (`**word**` in a pipe)
    hits = run_search(db, text, kind=kind, limit=limit, marks=marks)
    if not hits:
        echo(f"no results for {text!r}")
        return
    styled = sys.stdout.isatty()
    for hit in hits:
        where = f" › {hit.section}" if hit.section and hit.kind != "commit" else ""
        echo_styled([(f"[{hit.id}] {hit.kind}: {clip(hit.title, 70)}{where}", {"bold": True})])
        if hit.kind == "commit":
            echo(f"    fork {hit.section} {hit.ref[:12]}  score {hit.score:.2f}")
        else:
            echo(f"    {clip(hit.source, 60)}  score {hit.score:.2f}")
        pieces: list[tuple[object, dict[str, Any]]] = [("    ", {})]
        for i, piece in enumerate(" ".join(hit.snippet.split()).split("\x01")):
            word, _, rest = piece.partition("\x02") if i else ("", "", piece)
            if word:
                pieces.append((word if styled else f"**{word}**", {"bold": True}))
            pieces.append((rest, {}))
        echo_styled(pieces)


@click.command("show")
@click.argument("evidence_id", type=ROW_ID)
@json_option
@click.pass_context
def show(ctx: click.Context, evidence_id: int, as_json: bool) -> None:
    """Print one evidence item in full (a passage, a fork commit with its diff, a fusion or gap)."""
    from kb.search import get_evidence

    item = get_evidence(workspace(ctx).db(), evidence_id)
    if as_json:
        echo_json(item.to_json())
        return
    source = item.source
    echo(f"evidence {item.id}  {item.kind} ({item.evidence_kind})  ref {item.ref}")
    echo(f"title:    {item.title}")
    if item.section:
        echo(f"{'fork:' if item.commit else 'section:':<10}{item.section}")
    if item.position is not None:
        echo(f"passage:  {item.position}")
    label = source.get("title") or source.get("name") or ""
    echo(f"source:   {source.get('kind')} {source.get('id')}: {label}")
    url = source.get("canonical_url") or source.get("url")
    if url:
        echo(f"url:      {url}")
    if source.get("url") and source["url"] != url:
        echo(f"given:    {source['url']}")
    for key, label in (
        ("arxiv_id", "arxiv:"),
        ("authors", "authors:"),
        ("published", "date:"),
        ("site", "site:"),
    ):
        if source.get(key):
            echo(f"{label:<10}{source[key]}")
    if item.commit:
        commit = item.commit
        echo(f"commit:   {commit['sha']}")
        echo(f"author:   {commit.get('author')}  {commit.get('authored_at')}")
        echo(
            f"changes:  +{commit['insertions']} -{commit['deletions']} in {len(item.files)} files"
            f"{'  (already upstream)' if commit['upstreamed'] else ''}"
        )
        if commit.get("binary_files"):
            echo(f"binary:   {', '.join(commit['binary_files'])}")
        if commit["diff_truncated"]:
            echo("note:     diff truncated (size caps); see the commit in the mirror for all of it")
        echo("")
        echo((commit.get("message") or commit["subject"]).rstrip())
        echo("")
        echo(commit.get("diff") or "")
        return
    if item.fusion:
        fusion = item.fusion
        echo(f"fusion:   {fusion['ops']} in {fusion['backend']} at {fusion['file']}:{fusion['line']}")
    if item.meta:
        echo(f"meta:     {_compact(item.meta)}")
    echo("")
    echo(item.body)


def _compact(data: Any) -> str:
    import json

    return json.dumps(data, ensure_ascii=False, sort_keys=True)


@click.command("stats")
@json_option
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Evidence and source counts per kind, and the database size."""
    from kb.search import stats as kb_stats

    result = kb_stats(workspace(ctx).db())
    if as_json:
        echo_json(result.to_json())
        return
    echo_table(["evidence", "count"], sorted(result.evidence.items()) or [["(none)", 0]])
    echo("")
    echo_table(["sources", "count"], sorted(result.sources.items()) or [["(none)", 0]])
    echo("")
    echo(f"database: {result.db_path} ({result.db_bytes / 1e6:.1f} MB)")
