"""`autoresearch hypotheses ...`: mine, generate, patch, reflect, and steer the hypothesis queue.

Only `generate`, `patch` and `reflect` (with a model) reach litellm, and only through runner.llm,
inside the command: `hypotheses list` and `hypotheses mine` never import it.
"""

from __future__ import annotations

import json
from typing import Any

import click

from tui.cli.common import echo_json, echo_table, json_option, workspace
from tui.cli.params import ROW_ID, Number

_MODEL = click.option(
    "--model", default=None, help="litellm model string (default: llm.model in the config)."
)
_API_BASE = click.option(
    "--api-base", default=None, help="API base URL, e.g. a local OpenAI-compatible server."
)


@click.group("hypotheses")
def cli() -> None:
    """Mine, generate, list and steer hypotheses."""


def _short(value: Any, width: int) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


@cli.command("mine")
@json_option
@click.pass_context
def mine(ctx: click.Context, as_json: bool) -> None:
    """Turn backend gaps and fork commits into hypotheses (no LLM). Re-running adds nothing twice."""
    from runner.research.miners import mine as run_miners

    ws = workspace(ctx)
    db = ws.db()
    report = run_miners(ws, db)
    if as_json:
        echo_json(report.to_json())
        return
    click.echo(
        f"Added {len(report.gap_added)} backend-gap and {len(report.fork_added)} fork-commit hypotheses"
        + (
            f" ({len(report.conflicts)} fork patches do not apply to the baseline)"
            if report.conflicts
            else ""
        )
    )
    if report.skipped:
        click.echo("Skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(report.skipped.items())))
    if not report.gap_added and not report.fork_added:
        for line in _why_nothing_mined(db, report.skipped, ws.settings.kb.inventory.target_backend):
            click.echo(line)


# What each skip reason means and what would change it.
_SKIP_HELP = {
    "already_mined": "already a hypothesis (see `hypotheses list`)",
    "not_missing_in_target": "gaps the target backend ({target}) does not have: kb.inventory.target_backend "
    "names the backend being optimised",
    "outside_paths_of_interest": "fork commits outside target.paths_of_interest (widen it in the config)",
    "upstreamed": "fork commits the target already has (same patch-id)",
    "already_in_baseline": "fork commits whose change the baseline already contains",
    "protected_path": "fork commits that touch a protected path (the benchmark, checks, target.protect)",
    "truncated_diff": "fork commits whose diff was cut at kb.max_commit_diff_bytes",
    "empty_diff": "fork commits with no diff (merges)",
}

_FILL_QUEUE = (
    "Papers become hypotheses only through a model (`autoresearch hypotheses generate --model MODEL`) or a "
    "patch you write citing them (`autoresearch queue add PATCH --title T --source paper:ID`)."
)


def _why_nothing_mined(db: Any, skipped: dict[str, int], target: str) -> list[str]:
    """Why `mine` added nothing, and what would give it something to mine."""
    from kb.db import one

    def count(sql: str) -> int:
        row = one(db, sql)
        return int(row["n"]) if row else 0

    gaps = count("SELECT count(*) AS n FROM evidence WHERE kind = 'gap'")
    forks = count("SELECT count(*) AS n FROM sources WHERE kind = 'fork'")
    lines = ["Nothing new to mine."]
    if not gaps:
        lines.append(
            "  No backend gaps in the knowledge base: `autoresearch kb inventory` finds them (ops fused "
            "in one backend and not in another); a tree without backends has none."
        )
    if not forks:
        lines.append(
            "  No forks: `autoresearch kb add-fork NAME URL` fetches one; its commits that touch "
            "target.paths_of_interest become hypotheses."
        )
    for reason, n in sorted(skipped.items()):
        lines.append(f"  {n} skipped: {_SKIP_HELP.get(reason, reason).format(target=target)}.")
    lines.append("  " + _FILL_QUEUE)
    return lines


@cli.command("generate")
@click.option(
    "--n", "n", type=click.IntRange(1, 20), default=5, show_default=True, help="Hypotheses to ask for."
)
@click.option("--focus", default=None, help="What to concentrate on (also used as a search query).")
@_MODEL
@_API_BASE
@json_option
@click.pass_context
def generate(
    ctx: click.Context, n: int, focus: str | None, model: str | None, api_base: str | None, as_json: bool
) -> None:
    """Ask the model for hypotheses grounded in the knowledge base and the measured bottleneck."""
    from runner.llm import client_for
    from runner.research.generate import generate as run_generate

    ws = workspace(ctx)
    db = ws.db()
    client = client_for(db, ws.settings.llm, model=model, api_base=api_base)
    report = run_generate(ws, db, client, n=n, focus=focus)
    if as_json:
        echo_json(report.to_json())
        return
    click.echo(f"Bottleneck: {report.bottleneck.get('verdict')}")
    click.echo(f"Queries: {'; '.join(report.queries)}")
    click.echo(f"Evidence shown: {len(report.evidence_shown)} items")
    click.echo(f"Added {len(report.added)} hypotheses: {', '.join(f'#{i}' for i in report.added) or '-'}")
    for merged in report.merged:
        click.echo(f"Merged into #{merged['into']}: {merged['title']}")
    for rejected in report.rejected:
        click.echo(f"Rejected: {rejected['title']}: {rejected['reason']}")


@cli.command("patch")
@click.argument("ids", nargs=-1, type=ROW_ID)
@click.option(
    "--attempts",
    type=click.IntRange(1, 10),
    default=3,
    show_default=True,
    help="Model attempts per hypothesis (each failed `git apply --check` is fed back).",
)
@_MODEL
@_API_BASE
@json_option
@click.pass_context
def patch(
    ctx: click.Context,
    ids: tuple[int, ...],
    attempts: int,
    model: str | None,
    api_base: str | None,
    as_json: bool,
) -> None:
    """Write patches for hypotheses IDS (default: every approved one without a patch that applies)."""
    from runner.llm import client_for
    from runner.research.patch_writer import write_patches

    ws = workspace(ctx)
    db = ws.db()
    client = client_for(db, ws.settings.llm, model=model, api_base=api_base)
    outcomes = write_patches(ws, db, client, list(ids) or None, attempts=attempts)
    if as_json:
        echo_json([o.to_json() for o in outcomes])
        return
    if not outcomes:
        click.echo("No hypothesis needs a patch.")
        return
    echo_table(
        ["hypothesis", "status", "patch", "attempts", "reason"],
        [[o.hypothesis_id, o.status, o.patch_id, o.attempts, _short(o.reason, 80)] for o in outcomes],
    )
    if any(o.status == "failed" for o in outcomes):
        ctx.exit(1)


@cli.command("reflect")
@click.argument("wave", type=ROW_ID)
@click.option("--no-model", is_flag=True, help="Store the plain summary even when a model is configured.")
@_MODEL
@_API_BASE
@json_option
@click.pass_context
def reflect(
    ctx: click.Context, wave: int, no_model: bool, model: str | None, api_base: str | None, as_json: bool
) -> None:
    """Write the post-mortem of WAVE (a wave id) as a KB note for the next research phase."""
    from kb.db import one
    from runner.research.reflection import reflect_on_wave

    ws = workspace(ctx)
    db = ws.db()
    client = None
    if not no_model and (model or ws.settings.llm.model):
        from runner.llm import client_for

        client = client_for(db, ws.settings.llm, model=model, api_base=api_base)
    evidence_id = reflect_on_wave(ws, db, wave, client=client, use_model=not no_model)
    note = one(db, "SELECT body, meta FROM evidence WHERE id = ?", [evidence_id]) or {}
    if as_json:
        echo_json(
            {
                "wave": wave,
                "evidence_id": evidence_id,
                "meta": json.loads(note.get("meta") or "{}"),
                "body": note.get("body"),
            }
        )
        return
    click.echo(f"Reflection stored as evidence {evidence_id}:\n")
    click.echo(note.get("body", ""))


_LIST_SQL = """
SELECT h.id, h.status, h.priority, h.origin, h.expected_effect, h.confidence, h.cost, h.title,
       (SELECT count(*) FROM hypothesis_evidence he WHERE he.hypothesis_id = h.id) AS evidence,
       p.id AS patch_id, p.apply_status
FROM hypotheses h
LEFT JOIN patches p ON p.id = (SELECT max(id) FROM patches WHERE hypothesis_id = h.id)
{where}
ORDER BY h.priority DESC, h.id
"""


@cli.command("list")
@click.option(
    "--status",
    type=click.Choice(["proposed", "approved", "rejected", "patched", "unpatchable"]),
    default=None,
    help="Only hypotheses with this status.",
)
@json_option
@click.pass_context
def list_(ctx: click.Context, status: str | None, as_json: bool) -> None:
    """The queue, best first."""
    from kb.db import rows

    db = workspace(ctx).db()
    found = rows(
        db, _LIST_SQL.format(where="WHERE h.status = ?" if status else ""), [status] if status else []
    )
    if as_json:
        echo_json(found)
        return
    if not found:
        if status:
            click.echo(f"No hypotheses with status {status} (`autoresearch hypotheses list` shows them all).")
            return
        click.echo("No hypotheses. To fill the queue:")
        click.echo(
            "  autoresearch hypotheses mine       backend gaps (kb inventory) and fork commits "
            "(kb add-fork); no model needed"
        )
        click.echo(
            "  autoresearch hypotheses generate   a model reads the knowledge base (--model, or llm.model)"
        )
        click.echo(
            "  autoresearch queue add PATCH -t T  a patch of your own (--source paper:ID cites a paper)"
        )
        click.echo(_FILL_QUEUE)
        return
    echo_table(
        ["id", "status", "priority", "origin", "effect", "patch", "ev", "title"],
        [
            [
                h["id"],
                h["status"],
                f"{h['priority']:.2f}",
                h["origin"],
                "" if h["expected_effect"] is None else f"{h['expected_effect']:+.1%}",
                "" if h["patch_id"] is None else f"{h['patch_id']}:{h['apply_status']}",
                h["evidence"],
                _short(h["title"], 60),
            ]
            for h in found
        ],
    )


def _details(db: Any, hypothesis_id: int) -> dict[str, Any]:
    from kb.db import one, rows
    from kb.errors import UserError

    row = one(db, "SELECT * FROM hypotheses WHERE id = ?", [hypothesis_id])
    if row is None:
        raise UserError(f"hypothesis {hypothesis_id}: no such hypothesis")
    row["evidence"] = rows(
        db,
        "SELECT e.id, e.kind, e.title, e.ref, coalesce(s.title, s.name, s.url) AS source, s.url "
        "FROM hypothesis_evidence he JOIN evidence e ON e.id = he.evidence_id "
        "JOIN sources s ON s.id = e.source_id WHERE he.hypothesis_id = ? ORDER BY e.id",
        [hypothesis_id],
    )
    row["sources"] = [
        r["ref"]
        for r in rows(
            db, "SELECT ref FROM hypothesis_sources WHERE hypothesis_id = ? ORDER BY ref", [hypothesis_id]
        )
    ]
    row["patches"] = rows(
        db,
        "SELECT id, author_kind, author, llm_call_id, apply_status, apply_error, files, diff, created_at "
        "FROM patches WHERE hypothesis_id = ? ORDER BY id",
        [hypothesis_id],
    )
    for p in row["patches"]:
        p["files"] = json.loads(p["files"])
    return row


@cli.command("show")
@click.argument("hypothesis_id", type=ROW_ID)
@json_option
@click.pass_context
def show(ctx: click.Context, hypothesis_id: int, as_json: bool) -> None:
    """One hypothesis: rationale, evidence, patches."""
    db = workspace(ctx).db()
    h = _details(db, hypothesis_id)
    if as_json:
        echo_json(h)
        return
    click.echo(f"#{h['id']} [{h['status']}] {h['title']}")
    effect = "?" if h["expected_effect"] is None else f"{h['expected_effect']:+.1%}"
    click.echo(
        f"priority {h['priority']:.2f}  origin {h['origin']}  expected {effect}  "
        f"confidence {h['confidence'] if h['confidence'] is not None else '?'}  "
        f"cost {h['cost'] if h['cost'] is not None else '?'}"
        + (f"  llm call {h['llm_call_id']}" if h["llm_call_id"] else "")
    )
    if h["risk"]:
        click.echo(f"risk: {h['risk']}")
    click.echo(f"\n{h['rationale']}\n")
    if h["evidence"]:
        click.echo("Evidence:")
        for e in h["evidence"]:
            click.echo(f"  {e['id']:>5} {e['kind']:<8} {_short(e['title'], 60)}  ({_short(e['source'], 40)})")
    for ref in h["sources"]:
        click.echo(f"  source {ref}")
    for p in h["patches"]:
        click.echo(
            f"Patch {p['id']}: {p['author_kind']} {p['author'] or ''} apply={p['apply_status']} "
            f"files={', '.join(p['files'])}"
        )
        if p["apply_error"]:
            click.echo(f"  {_short(p['apply_error'], 200)}")
    if h["notes"]:
        click.echo(f"\nNotes:\n{h['notes']}")


def _steer(ctx: click.Context, ids: tuple[int, ...], action: str) -> None:
    from kb.db import log_event, transaction
    from runner.hypotheses import approval_status, get, set_status

    db = workspace(ctx).db()
    changed: list[str] = []
    with transaction(db):  # all or nothing: an unknown id leaves every status as it was
        for hid in ids:
            hyp = get(db, hid)
            new = "rejected" if action == "reject" else approval_status(db, hid)
            if hyp.status != new:
                set_status(db, hid, new)
                log_event(db, f"hypothesis.{action}", f"hypothesis {hid}: {hyp.status} -> {new}")
            changed.append(f"#{hid} {new}")
    click.echo(", ".join(changed))


@cli.command("approve")
@click.argument("ids", nargs=-1, type=ROW_ID, required=True)
@click.pass_context
def approve(ctx: click.Context, ids: tuple[int, ...]) -> None:
    """Approve hypotheses (those with a patch that applies become `patched`)."""
    _steer(ctx, ids, "approve")


@cli.command("reject")
@click.argument("ids", nargs=-1, type=ROW_ID, required=True)
@click.pass_context
def reject(ctx: click.Context, ids: tuple[int, ...]) -> None:
    """Reject hypotheses: they are never patched or run."""
    _steer(ctx, ids, "reject")


@cli.command("prioritize")
@click.argument("hypothesis_id", type=ROW_ID)
@click.argument("priority", type=Number())
@click.pass_context
def prioritize(ctx: click.Context, hypothesis_id: int, priority: float) -> None:
    """Set a hypothesis's priority (higher runs first)."""
    from kb.db import log_event, transaction
    from runner.hypotheses import set_priority

    db = workspace(ctx).db()
    with transaction(db):
        set_priority(db, hypothesis_id, priority)
        log_event(db, "hypothesis.prioritize", f"hypothesis {hypothesis_id}: priority {priority}")
    click.echo(f"#{hypothesis_id} priority {priority}")
