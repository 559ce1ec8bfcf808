"""`autoresearch hypotheses ...`: mine, generate, patch, reflect, and steer the hypothesis queue.

Only `generate`, `patch` and `reflect` (with a model) reach litellm, and only through runner.llm,
inside the command: `hypotheses list` and `hypotheses mine` never import it.
"""

from __future__ import annotations

from typing import Any

import click

from kb.jsoncol import decoded_dict
from kb.textsafe import inert
from kb.vocabulary import HYPOTHESIS_STATUSES, OUTCOMES, SORTS, SOURCE_FORMS
from tui.cli.common import echo, echo_json, echo_table, json_option, workspace
from tui.cli.params import MAX_INT, ROW_ID, TEXT, Number

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


@cli.command("add")
@click.argument("title", type=TEXT)
@click.option(
    "--evidence",
    "evidence_ids",
    type=ROW_ID,
    multiple=True,
    help="An evidence id it cites (repeatable; `autoresearch kb search` finds them).",
)
@click.option("--source", "sources", multiple=True, help=f"Provenance (repeatable): {SOURCE_FORMS}.")
@click.option("--rationale", default="", help="Why it should help (what the evidence says).")
@click.option("--expected-effect", type=Number(), default=None, help="Expected gain, e.g. 0.05 for +5%.")
@json_option
@click.pass_context
def add(
    ctx: click.Context,
    title: str,
    evidence_ids: tuple[int, ...],
    sources: tuple[str, ...],
    rationale: str,
    expected_effect: float | None,
    as_json: bool,
) -> None:
    """Propose a hypothesis of your own, citing its evidence (at least one --evidence or --source).

    It waits as `proposed`; queue a patch for it with `autoresearch queue add PATCH --hypothesis ID`
    (or approve it for the autopilot's patch writer)."""
    from runner.submit import propose

    added = propose(
        workspace(ctx),
        title,
        evidence_ids=evidence_ids,
        sources=sources,
        rationale=rationale,
        expected_effect=expected_effect,
    )
    if as_json:
        echo_json(added.to_json())
        return
    echo(f"proposed hypothesis {added.hypothesis}: {added.title}")
    if added.evidence:
        echo(f"  cites   evidence {', '.join(map(str, added.evidence))}")
    if added.sources:
        echo(f"  sources {', '.join(added.sources)}")


@cli.command("mine")
@json_option
@click.pass_context
def mine(ctx: click.Context, as_json: bool) -> None:
    """Turn what the knowledge base holds (backend gaps, fork commits, ...) into hypotheses, with
    every registered miner (no LLM). Re-running adds nothing twice."""
    from runner.research.miners import mine as run_miners

    ws = workspace(ctx)
    db = ws.db()
    report = run_miners(ws, db)
    if as_json:
        echo_json(report.to_json())
        return
    echo(report.line())
    if report.skipped:
        echo("Skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(report.skipped.items())))
    if report.left_out:
        top = sorted(report.left_out.items(), key=lambda kv: (-kv[1], kv[0]))
        echo(
            "Left out of the queue (browsable with `autoresearch kb commits`): "
            + ", ".join(f"{what} {n}" for what, n in top[:12])
            + (f", ... ({len(top) - 12} more kinds)" if len(top) > 12 else "")
        )
    if report.ranked:
        echo(
            f"Ranked {report.ranked['ranked']} hypotheses; {report.ranked['families']} families of fork "
            f"commits on the same functions ({report.ranked['in_families']} hypotheses in them)"
        )
    if not report.all_added:
        for line in _why_nothing_mined(db, report.skipped, ws.settings.kb.inventory.target_backend):
            echo(line)


_FILL_QUEUE = (
    "Papers become hypotheses only through a model (`autoresearch hypotheses generate --model MODEL`) or a "
    "patch you write citing them (`autoresearch queue add PATCH --title T --source paper:ID`)."
)


def _why_nothing_mined(db: Any, skipped: dict[str, int], target: str) -> list[str]:
    """Why `mine` added nothing, and what would give it something to mine."""
    from kb.store.knowledge import fork_count, gap_count
    from runner.research.miners import reasons

    gaps = gap_count(db)
    forks = fork_count(db)
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
    meaning = reasons()
    for reason, n in sorted(skipped.items()):
        lines.append(f"  {n} skipped: {meaning.get(reason, reason).format(target=target)}.")
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
    echo(f"Bottleneck: {report.bottleneck.get('verdict')}")
    echo(f"Queries: {'; '.join(report.queries)}")
    echo(f"Evidence shown: {len(report.evidence_shown)} items")
    echo(f"Added {len(report.added)} hypotheses: {', '.join(f'#{i}' for i in report.added) or '-'}")
    for merged in report.merged:
        echo(f"Merged into #{merged['into']}: {merged['title']}")
    for rejected in report.rejected:
        echo(f"Rejected: {rejected['title']}: {rejected['reason']}")


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
        echo("No hypothesis needs a patch.")
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
    from kb.store.knowledge import note as stored_note
    from runner.research.reflection import reflect_on_wave

    ws = workspace(ctx)
    db = ws.db()
    client = None
    if not no_model and (model or ws.settings.llm.model):
        from runner.llm import client_for

        client = client_for(db, ws.settings.llm, model=model, api_base=api_base)
    evidence_id = reflect_on_wave(ws, db, wave, client=client, use_model=not no_model)
    note = stored_note(db, evidence_id)
    if as_json:
        echo_json(
            {
                "wave": wave,
                "evidence_id": evidence_id,
                "meta": decoded_dict(note.meta if note else None),
                "body": note.body if note else None,
            }
        )
        return
    echo(f"Reflection stored as evidence {evidence_id}:\n")
    echo(note.body if note else "")


_LIST_LIMIT = 50


@cli.command("list")
@click.option("--status", type=click.Choice(HYPOTHESIS_STATUSES), default=None, help="Only this status.")
@click.option(
    "--outcome",
    type=click.Choice(OUTCOMES),
    default=None,
    help="Only hypotheses whose latest experiment ended so (`none`: never measured).",
)
@click.option(
    "--origin", default=None, help="miner:fork, miner:gap, llm, manual, import, or a part: miner, fork."
)
@click.option(
    "--path", "path", default=None, help="A file or folder the patch or the cited fork commit touches."
)
@click.option("--backend", default=None, help="A compute backend it touches (cpu, cuda, metal, ...).")
@click.option("--search", default=None, help="Words in the title or rationale, or in the evidence it cites.")
@click.option(
    "--sort",
    type=click.Choice(SORTS),
    default="rank",
    show_default=True,
    help="rank: the queue order (a person's priority first); priority; recent: newest first; effect.",
)
@click.option("--limit", type=click.IntRange(1, 100_000), default=None, help="Rows per page (text: 50).")
@click.option("--offset", type=click.IntRange(0, MAX_INT), default=0, show_default=True, help="Rows to skip.")
@json_option
@click.pass_context
def list_(
    ctx: click.Context,
    status: str | None,
    outcome: str | None,
    origin: str | None,
    path: str | None,
    backend: str | None,
    search: str | None,
    sort: str,
    limit: int | None,
    offset: int,
    as_json: bool,
) -> None:
    """The queue, in the order the runner takes it (or --sort), filtered and paged.

    Text shows 50 rows at a time (--limit, --offset); --json every matching row unless --limit."""
    from kb.store.queue import QueueFilter, queue_page

    flt = QueueFilter(status, outcome, origin, path, backend, search, sort)
    db = workspace(ctx).db()
    page = queue_page(db, flt, offset=offset, limit=limit or (None if as_json else _LIST_LIMIT))
    if as_json:
        echo_json([r.to_json() for r in page.rows])
        return
    if not page.rows:
        _nothing_listed(flt)
        return
    echo_table(
        ["id", "status", "outcome", "rank", "priority", "origin", "effect", "patch", "family", "title"],
        [
            [
                h.id,
                h.status,
                h.outcome or "-",
                "-" if h.rank is None else f"{h.rank:.1f}",
                f"{h.priority:.2f}" + ("*" if h.priority_set else ""),
                h.origin,
                "" if h.expected_effect is None else f"{h.expected_effect:+.1%}",
                "" if h.patch_id is None else f"{h.patch_id}:{h.apply_status}",
                _family(h),
                _short(h.title, 60),
            ]
            for h in page.rows
        ],
    )
    _footer(page, flt)


def _family(h: Any) -> str:
    if h.family is None:
        return ""
    if h.waits_behind is not None:
        return f"{h.family}/{h.family_size} waits #{h.waits_behind}"
    return f"{h.family}/{h.family_size}"


def _footer(page: Any, flt: Any) -> None:
    first, last = page.offset + 1, page.offset + len(page.rows)
    filters = f"; {flt.describe()}" if flt.describe() else ""
    echo(f"\n{first:,}-{last:,} of {page.total:,} (sorted by {flt.sort}{filters}).", nl=False)
    if page.remaining:
        echo(f" {page.remaining:,} more: --offset {last} (--limit N for more per page).")
    else:
        echo("")
    if any(h.priority_set for h in page.rows):
        echo("* a person set the priority: above 0 it goes before the ranked queue, 0 or below after it.")
    if any(h.waits_behind is not None for h in page.rows):
        echo(
            "family F/N: one of N fork commits on the same functions; `waits #ID`: it runs after every "
            "hypothesis that does not wait, once #ID (its family's best) has been measured."
        )


def _nothing_listed(flt: Any) -> None:
    if flt.describe():
        echo(f"No hypotheses with {flt.describe()} (`autoresearch hypotheses list` shows them all).")
        return
    echo("No hypotheses. To fill the queue:")
    echo(
        "  autoresearch hypotheses mine       backend gaps (kb inventory) and fork commits "
        "(kb add-fork); no model needed"
    )
    echo("  autoresearch hypotheses generate   a model reads the knowledge base (--model, or llm.model)")
    echo("  autoresearch queue add PATCH -t T  a patch of your own (--source paper:ID cites a paper)")
    echo(_FILL_QUEUE)


@cli.command("rank")
@json_option
@click.pass_context
def rank(ctx: click.Context, as_json: bool) -> None:
    """Rank every hypothesis again and regroup the families (after a profile, a config change)."""
    from runner.rank import rerank

    ws = workspace(ctx)
    report = rerank(ws, ws.db())
    if as_json:
        echo_json(report.to_json())
        return
    echo(
        f"Ranked {report.ranked} hypotheses in {report.seconds:.2f} s; {report.families} families of fork "
        f"commits on the same functions ({report.in_families} hypotheses in them)."
    )


@cli.command("show")
@click.argument("hypothesis_id", type=ROW_ID)
@json_option
@click.pass_context
def show(ctx: click.Context, hypothesis_id: int, as_json: bool) -> None:
    """One hypothesis: rationale, evidence, patches."""
    from runner.hypotheses import details

    db = workspace(ctx).db()
    h = details(db, hypothesis_id)
    if as_json:
        echo_json(h)
        return
    outcome = f", outcome {h['outcome']}" if h["outcome"] else ""  # the latest experiment's status
    echo(f"#{h['id']} [{h['status']}{outcome}] {h['title']}")
    if h.get("repeat_of"):
        echo(f"a repeat of #{h['repeat_of']}: already measured here, not run again")
    if h.get("wave_id"):
        echo(f"proposed after the post-mortem of wave {h['wave_id']} (wave id)")
    effect = "?" if h["expected_effect"] is None else f"{h['expected_effect']:+.1%}"
    who = " (set by a person: it orders the queue before the rank)" if h["priority_set"] else ""
    echo(
        f"priority {h['priority']:.2f}{who}  origin {h['origin']}  expected {effect}  "
        f"confidence {h['confidence'] if h['confidence'] is not None else '?'}  "
        f"cost {h['cost'] if h['cost'] is not None else '?'}"
        + (f"  llm call {h['llm_call_id']}" if h["llm_call_id"] else "")
    )
    _show_rank(h)
    if h["risk"]:
        echo(f"risk: {h['risk']}")
    echo(f"\n{h['rationale']}\n")
    if h["evidence"]:
        echo("Evidence:")
        for e in h["evidence"]:
            echo(f"  {e['id']:>5} {e['kind']:<8} {_short(e['title'], 60)}  ({_short(e['source'], 40)})")
    for ref in h["sources"]:
        echo(f"  source {inert(ref)}")
    for p in h["patches"]:
        # One line each: a file name may hold a newline (it would forge a line of its own).
        echo(
            f"Patch {p['id']}: {p['author_kind']} {inert(p['author'] or '')} apply={p['apply_status']} "
            f"files={inert(', '.join(p['files']))}"
        )
        if p["apply_error"]:
            echo(f"  {_short(p['apply_error'], 200)}")
    if h["notes"]:
        echo(f"\nNotes:\n{h['notes']}")


def _show_rank(h: dict[str, Any]) -> None:
    from runner.rank import explain

    if h["rank"] is None:
        echo("rank: not ranked yet (`autoresearch hypotheses rank`)")
    else:
        echo(f"rank {h['rank']:.1f} of 100: relevance to the target")
        for line in explain(h["rank_why"]):
            echo(f"  {line}")
    members = h["family_members"]
    if members:
        lead = next((m for m in members if m["id"] == h["waits_behind"]), None)
        role = (
            f"waits behind #{lead['id']} (its best open member) until that one is measured"
            if lead
            else "leads it (the best open member runs first)"
        )
        echo(f"family {h['family']}: {len(members)} fork commits on the same functions; this one {role}")
        for m in members[:10]:
            rank = "-" if m["rank"] is None else f"{m['rank']:.1f}"
            echo(f"  #{m['id']:<6} {rank:>5}  {m['status']:<11} {_short(m['title'], 70)}")
        if len(members) > 10:
            echo(f"  ... {len(members) - 10} more (`hypotheses list` shows the family column)")


def _steer(ctx: click.Context, ids: tuple[int, ...], action: str) -> None:
    from kb.db import transaction
    from runner.hypotheses import approve_or_reject

    db = workspace(ctx).db()
    changed: list[str] = []
    with transaction(db):  # all or nothing: an unknown id leaves every status as it was
        for hid in ids:
            new = approve_or_reject(db, hid, action, by="cli")
            changed.append(f"#{hid} {new}")
    echo(", ".join(changed))


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


@cli.command("prioritize", context_settings={"ignore_unknown_options": True})  # `prioritize 7 -1`
@click.argument("hypothesis_id", type=ROW_ID)
@click.argument("priority", type=Number(), required=False, metavar="PRIORITY")
@click.option("--clear", is_flag=True, help="Drop the priority a person set: back to its place by rank.")
@click.pass_context
def prioritize(ctx: click.Context, hypothesis_id: int, priority: float | None, clear: bool) -> None:
    """Set a hypothesis's priority: it overrides the rank (above 0 before the ranked queue, higher
    first; 0 or below after it). --clear puts it back by rank."""
    from kb.db import log_event, transaction
    from kb.errors import UserError
    from runner.hypotheses import clear_priority, set_priority

    if (priority is None) == (not clear):
        raise UserError("prioritize: give a PRIORITY or --clear (not both)")
    db = workspace(ctx).db()
    with transaction(db):
        if clear:
            clear_priority(db, hypothesis_id)
            log_event(db, "hypothesis.prioritize", f"hypothesis {hypothesis_id}: priority cleared (by rank)")
        else:
            assert priority is not None
            set_priority(db, hypothesis_id, priority)
            log_event(db, "hypothesis.prioritize", f"hypothesis {hypothesis_id}: priority {priority}")
    echo(f"#{hypothesis_id} " + ("back to its rank" if clear else f"priority {priority}"))
