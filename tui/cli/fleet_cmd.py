"""`autoresearch fleet status|down`: the workers of runs (local slots, SkyPilot clusters) and their cost.

`status` reads the database only (add --refresh to ask SkyPilot about each cluster); `down` tears
SkyPilot clusters down through runner/fleet/skypilot/ (whose `sdk` is the one module that imports `sky`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from kb.jsoncol import decoded_dict
from tui.cli.common import echo, echo_json, echo_table, json_option, workspace
from tui.cli.params import ROW_ID, Number

if TYPE_CHECKING:
    from kb.store.workers import Worker

LIVE = ("provisioning", "qualifying", "ready", "busy")


@click.group("fleet")
def cli() -> None:
    """Fleet workers and clusters: status, down."""


def _meta(raw: str | None) -> dict[str, Any]:
    return decoded_dict(raw)


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _describe(worker: Worker, stamp: float) -> dict[str, Any]:
    meta = _meta(worker.meta)
    started = meta.get("launched_at") or worker.started_at
    ended = meta.get("torn_down_at") or worker.ended_at
    teardown = meta.get("teardown")
    return {
        "id": worker.id,
        "run_id": worker.run_id,
        "run": worker.run_name,
        "run_status": worker.run_status,
        "name": worker.name,
        "backend": worker.backend,
        "status": worker.status,
        "phase": "downing"
        if teardown == "pending"
        else f"experiment {meta.get('experiment')}"
        if worker.status == "busy" and meta.get("experiment")
        else meta.get("phase") or worker.status,
        "teardown": teardown,
        "noise": worker.noise,
        "price_per_hour": worker.price_per_hour,
        "cost_usd": worker.cost_usd,
        "age_seconds": round((ended or stamp) - started, 1) if started else None,
        "reason": meta.get("reason"),
        "resources": _meta(worker.resources) if worker.resources else None,
    }


@cli.command("status")
@click.option("--all", "show_all", is_flag=True, help="Every worker ever recorded, down ones too.")
@click.option("--run", "run_id", type=ROW_ID, help="Only this run's workers (by run id).")
@click.option("--refresh", is_flag=True, help="Also ask SkyPilot for each cluster's own status (slower).")
@json_option
@click.pass_context
def status(ctx: click.Context, show_all: bool, run_id: int | None, refresh: bool, as_json: bool) -> None:
    """Workers (local slots, SkyPilot clusters): phase, A/A noise, price and cost, with run totals."""
    from kb.db import now
    from kb.store import llm_calls
    from kb.store import workers as worker_store

    ws = workspace(ctx)
    db = ws.db()
    stamp = now()
    workers = [_describe(w, stamp) for w in worker_store.listed(db, LIVE, show_all=show_all, run_id=run_id)]
    if refresh:
        from runner.fleet.skypilot import cluster_statuses

        names = [w["name"] for w in workers if w["backend"] == "skypilot"]
        found = cluster_statuses(names)
        for worker in workers:
            if worker["backend"] == "skypilot":
                worker["sky_status"] = found.get(worker["name"], "missing")
    run_ids = sorted({w["run_id"] for w in workers if w["run_id"] is not None})
    llm = llm_calls.cost_by_run(db, run_ids)
    totals = [
        {
            "run_id": c.run_id,
            "run": c.run,
            "status": c.status,
            "vm_usd": c.vm_usd,
            "experiments_usd": c.experiments_usd,
            "llm_usd": llm.get(c.run_id, 0.0),
        }
        for c in worker_store.run_costs(db, run_ids)
    ]
    if as_json:
        echo_json({"workers": workers, "runs": totals})
        return
    if not workers:
        echo("No workers" + ("." if show_all else " up (--all shows past ones)."))
        return
    headers = ["id", "run", "name", "backend", "status", "phase", "noise", "$/h", "cost", "age", "reason"]
    if refresh:
        headers.insert(6, "sky")
    table = []
    for w in workers:
        line = [
            w["id"],
            w["run"] or "",
            w["name"],
            w["backend"],
            w["status"],
            w["phase"],
            "" if w["noise"] is None else f"{w['noise']:.1%}",
            "" if w["price_per_hour"] is None else f"${w['price_per_hour']:.3f}",
            f"${w['cost_usd']:.4f}",
            "" if w["age_seconds"] is None else _age(w["age_seconds"]),
            " ".join(str(w["reason"] or "").split())[:60],
        ]
        if refresh:
            line.insert(6, w.get("sky_status", ""))
        table.append(line)
    echo_table(headers, table)
    echo("")
    for t in totals:
        echo(
            f"run {t['run']} ({t['status']}): VM ${t['vm_usd']:.4f} "
            f"(experiments ${t['experiments_usd']:.4f}), LLM ${t['llm_usd']:.4f}"
        )


@cli.command("down")
@click.option(
    "--all", "down_all", is_flag=True, help="Also clusters of runs still going (they see them lost)."
)
@click.option("--run", "run_id", type=ROW_ID, help="Only this run's clusters (by run id).")
@click.option(
    "--wait", type=Number(min=0, max=86_400), default=900, show_default=True, help="Seconds to wait."
)
@json_option
@click.pass_context
def down(ctx: click.Context, down_all: bool, run_id: int | None, wait: float, as_json: bool) -> None:
    """Tear down SkyPilot clusters recorded in this workspace that no live run uses (--all: every one).

    Clusters whose teardown failed or was never confirmed are tried again.
    """
    from kb.store.workers import teardown_candidates

    ws = workspace(ctx)
    db = ws.db()
    from runner.fleet.skypilot import down_workers, run_is_live

    candidates = teardown_candidates(db, LIVE, run_id)
    kept = [
        c
        for c in candidates
        if not down_all
        and run_is_live({"status": c.run_status, "heartbeat_at": c.run_heartbeat})
        and c.status in LIVE
    ]
    chosen = [c for c in candidates if c not in kept]
    if not as_json:
        for c in kept:
            echo(f"kept {c.name}: its run {c.run_id} is live (--all downs it too)", err=True)
        if chosen:
            echo(f"downing {len(chosen)} cluster(s): {', '.join(c.name for c in chosen)}", err=True)
    started = time.monotonic()
    after = down_workers(db, [c.id for c in chosen], wait=wait) if chosen else []
    results = [
        {
            "id": r["id"],
            "name": r["name"],
            "run_id": r["run_id"],
            "status": r["status"],
            "teardown": _meta(r["meta"]).get("teardown"),
        }
        for r in after
    ]
    failed = [r for r in results if r["teardown"] != "done"]
    if as_json:
        echo_json(
            {
                "downed": results,
                "kept": [{"id": c.id, "name": c.name, "run_id": c.run_id} for c in kept],
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    elif not chosen:
        echo("Nothing to down.")
    else:
        echo_table(
            ["id", "name", "run", "teardown"],
            [[r["id"], r["name"], r["run_id"], r["teardown"]] for r in results],
        )
    if failed:
        raise click.ClickException(
            f"{len(failed)} cluster(s) not confirmed down: "
            + ", ".join(f"{r['name']} ({r['teardown']})" for r in failed)
        )
