"""`autoresearch queue`: add patches to the experiment queue by hand, and list the queue."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kb.vocabulary import help_epilog
from tui.cli.common import echo, echo_json, echo_table, json_option, workspace
from tui.cli.params import MAX_INT, Number, PathArg

if TYPE_CHECKING:
    import sqlite_utils

    from kb.store.hypotheses import SameChange

_SOURCE_FORMS = (
    "URL, fork:NAME@SHA, evidence:ID, paper:ID (or the paper's URL or file:// address), gap:ID or note:TEXT"
)


def _check_source(ref: str) -> str:
    """One provenance ref as the user typed it, checked for shape (one-line error otherwise)."""
    from kb.errors import UserError

    ref = ref.strip()
    if re.fullmatch(r"(https?|file)://\S+", ref):
        return ref
    if re.fullmatch(r"fork:[\w.-]+@[0-9a-fA-F]{7,40}", ref):
        return ref
    if re.fullmatch(r"(gap|evidence|passage|paper):[0-9]+", ref):
        if int(ref.split(":", 1)[1]) > MAX_INT:
            raise UserError(f"--source {ref}: no such evidence id (ids are at most {MAX_INT})")
        return ref
    if ref.startswith("note:") and ref[5:].strip():
        return "note:" + " ".join(ref[5:].split())
    raise UserError(f"--source {ref!r}: must be {_SOURCE_FORMS}")


@click.group("queue")
def cli() -> None:
    """The hypothesis queue: patches waiting to be measured."""


def _same_change(db: sqlite_utils.Database, patch_file: Path, diff: str) -> SameChange | None:
    """Refuse a patch whose change waits in the queue already (a second `queue add` of the same
    file); the hypothesis that measured it before, if any (it is measured again: a note)."""
    from kb.errors import UserError
    from kb.patchnorm import normalized_sha
    from kb.store.hypotheses import same_change

    measured = None
    for twin in same_change(db, normalized_sha(diff)):
        if twin["status"] == "rejected":
            continue
        if twin["outcome"] in (None, "queued", "running", "lost"):
            raise UserError(
                f"{patch_file}: the same change as hypothesis {twin['id']} ({twin['title']!r}), which is "
                f"still in the queue; nothing queued (`autoresearch hypotheses reject {twin['id']}` "
                "first to replace it)"
            )
        measured = measured or twin
    return measured


@cli.command("add")
@click.argument("patch_file", type=PathArg(dir_okay=False, path_type=Path))
@click.option("--title", "-t", required=True, help="What the patch does (one line).")
@click.option("--source", "sources", multiple=True, help=f"Provenance (repeatable): {_SOURCE_FORMS}.")
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
    title: str,
    sources: tuple[str, ...],
    rationale: str,
    priority: float,
    unchecked: bool,
    as_json: bool,
) -> None:
    """Queue PATCH_FILE (a unified diff against the target) as a new hypothesis with its patch.

    Checked at once, not at the next run: a patch that touches a protected path is refused, and so
    is one that does not apply to the baseline (unless --unchecked)."""
    from kb.db import transaction
    from kb.errors import UserError
    from kb.files import read_text
    from kb.store.hypotheses import patch as stored_patch
    from runner.cite import resolve
    from runner.hypotheses import add_hypothesis, add_patch

    ws = workspace(ctx)
    diff = read_text(patch_file)
    if not title.strip():
        raise UserError("--title: must not be empty")
    refs = [_check_source(s) for s in sources]
    from kb import gitrepo
    from runner.harness.patchpaths import PatchUnreadable, baseline_of, workspace_check

    try:
        refused = workspace_check(ws, diff)
    except PatchUnreadable as exc:
        raise UserError(f"{patch_file}: not a unified diff git can read ({exc})") from None
    if refused:
        raise UserError(f"{patch_file}: refused: the patch {refused}")
    repo, base = baseline_of(ws)
    apply_error = gitrepo.apply_check(repo, base, diff)
    if apply_error is not None and not unchecked:
        why = apply_error.splitlines()[0]
        raise UserError(
            f"{patch_file}: does not apply to the baseline {base[:12]} ({why}); "
            "rebase it, or queue it anyway with --unchecked"
        )
    db = ws.db()
    with transaction(db):
        # Refs into the knowledge base become evidence links (the provenance chain).
        cited = [resolve(db, r) for r in refs]
        measured_twin = _same_change(db, patch_file, diff)
        refs = list(dict.fromkeys(c.ref for c in cited))
        gaps = list(dict.fromkeys(e for c in cited for e in c.evidence_ids))
        hid = add_hypothesis(
            db,
            " ".join(title.split()),
            rationale=rationale,
            origin="manual",
            status="approved",
            priority=priority,
            evidence_ids=gaps,
            source_refs=refs,
        )
        assert hid is not None
        try:
            pid = add_patch(
                db,
                hid,
                diff,
                author_kind="manual",
                author=patch_file.name,
                # queued anyway with --unchecked: still runnable, the error kept for the record
                apply_status="ok" if apply_error is None else "unchecked",
                apply_error=apply_error,
            )
        except UserError as exc:
            raise UserError(f"{patch_file}: {str(exc).split(': ', 1)[-1]}") from None
        patch = stored_patch(db, pid)
    from runner.rank import rerank

    rerank(ws, db, ids=[hid])  # its place in the queue (runner/rank.py)
    files = patch.files if patch else []
    if as_json:
        echo_json(
            {
                "hypothesis": hid,
                "patch": pid,
                "title": title,
                "files": files,
                "sources": refs,
                "evidence": gaps,
                "applies": apply_error is None,
                "measured_before": measured_twin["id"] if measured_twin else None,
            }
        )
        return
    echo(f"queued hypothesis {hid} (patch {pid}): {title}")
    if measured_twin is not None:
        echo(
            f"  note    the same change as hypothesis {measured_twin['id']} ({measured_twin['title']!r}), "
            f"measured already ({measured_twin['outcome']}): it is measured again"
        )
    echo(f"  files   {', '.join(files)}")
    echo(
        f"  applies to the baseline {base[:12]}"
        if apply_error is None
        else f"  does NOT apply to the baseline {base[:12]} (queued with --unchecked)"
    )
    if refs:
        echo(f"  sources {', '.join(refs)}")
    for c in cited:
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
