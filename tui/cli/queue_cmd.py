"""`autoresearch queue`: add patches to the experiment queue by hand, and list the queue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kb.vocabulary import SOURCE_FORMS, help_epilog
from tui.cli.common import echo, echo_json, echo_table, json_option, workspace
from tui.cli.params import ROW_ID, Number, PathArg


@click.group("queue")
def cli() -> None:
    """The hypothesis queue: patches waiting to be measured."""


@cli.command("add")
@click.argument("patch_file", type=PathArg(dir_okay=False, path_type=Path))
@click.option("--title", "-t", help="What the patch does (one line); required without --hypothesis.")
@click.option("--source", "sources", multiple=True, help=f"Provenance (repeatable): {SOURCE_FORMS}.")
@click.option(
    "--hypothesis",
    "hypothesis_id",
    type=ROW_ID,
    help="Queue it for this existing hypothesis (its title and citations) instead of a new one.",
)
@click.option("--rationale", default="", help="Why it should help.")
@click.option("--priority", type=Number(), default=0.0, show_default=True, help="Higher runs first.")
@click.option(
    "--unchecked",
    is_flag=True,
    help="Queue it even if it does not apply to the baseline today (e.g. written for a run's winners).",
)
@json_option
@click.pass_context
def add(
    ctx: click.Context,
    patch_file: Path,
    title: str | None,
    sources: tuple[str, ...],
    rationale: str,
    priority: float,
    unchecked: bool,
    hypothesis_id: int | None,
    as_json: bool,
) -> None:
    """Queue PATCH_FILE (a unified diff against the target) as a new hypothesis with its patch.

    Checked at once, not at the next run: a patch that touches a protected path is refused, and so
    is one that does not apply to the baseline (unless --unchecked). With --hypothesis ID the patch
    is queued for that hypothesis (an idea of `hypotheses add`), which it approves."""
    from kb.files import read_text
    from runner.submit import queue_patch

    ws = workspace(ctx)
    diff = read_text(patch_file)
    queued = queue_patch(
        ws,
        diff,
        label=str(patch_file),
        title=title,
        sources=sources,
        rationale=rationale,
        priority=priority,
        unchecked=unchecked,
        hypothesis_id=hypothesis_id,
        author=patch_file.name,
    )
    if as_json:
        echo_json(queued.to_json())
        return
    base = queued.baseline
    echo(f"queued hypothesis {queued.hypothesis} (patch {queued.patch}): {queued.title}")
    twin = queued.measured_twin
    if twin is not None:
        echo(
            f"  note    the same change as hypothesis {twin['id']} ({twin['title']!r}), "
            f"measured already ({twin['outcome']}): it is measured again"
        )
    echo(f"  files   {', '.join(queued.files)}")
    echo(
        f"  applies to the baseline {base[:12]}"
        if queued.applies
        else f"  does NOT apply to the baseline {base[:12]} (queued with --unchecked)"
    )
    if queued.sources:
        echo(f"  sources {', '.join(queued.sources)}")
    for c in queued.cited:
        if c.evidence_ids:
            echo(f"  cites   {c.what} (evidence {', '.join(map(str, c.evidence_ids))})")


@cli.command("list", epilog=help_epilog())
@click.option("--all", "show_all", is_flag=True, help="Include hypotheses without a patch.")
@json_option
@click.pass_context
def list_(ctx: click.Context, show_all: bool, as_json: bool) -> None:
    """Hypotheses in queue order, with their patch and latest experiment outcome."""
    from kb.store.hypotheses import by_priority
    from runner.hypotheses import runnable

    ws = workspace(ctx)
    db = ws.db()
    ready = {r["id"] for r in runnable(db, require_approval=ws.settings.hypotheses.require_approval)}
    items: list[dict[str, Any]] = [
        {
            "hypothesis": r.id,
            "title": r.title,
            "status": r.status,
            "priority": r.priority,
            "origin": r.origin,
            "patch": r.patch_id,
            "files": r.files,
            "sources": r.sources,
            "runnable": r.patch_id in ready,
            "experiment": r.experiment_id,
            "outcome": r.outcome,
            "outcome_reason": r.outcome_reason,
        }
        for r in by_priority(db)
        if r.patch_id is not None or show_all
    ]
    if as_json:
        echo_json(items)
        return
    if not items:
        echo("the queue is empty (add a patch: autoresearch queue add PATCH --title T)")
        return
    echo_table(
        ["id", "status", "prio", "patch", "next", "outcome", "title"],
        [
            (
                i["hypothesis"],
                i["status"],
                f"{i['priority']:g}",
                i["patch"] or "-",
                "yes" if i["runnable"] else "",
                (i["outcome"] or "") + (f" ({i['outcome_reason']})" if i["outcome_reason"] else ""),
                i["title"],
            )
            for i in items
        ],
    )
