"""The SkyPilot fleet's bookkeeping that needs no cluster: costs, the budget that stops launches,
replacements while work waits, giving up after failures in a row, and state that survives a
restart (`sky.json`). The cluster side is tests/fleet/test_skypilot_slurm.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kb.db import insert, now, one, rows
from kb.errors import UserError
from kb.workspace import Workspace
from runner.fleet import JobRef, make_fleet
from runner.fleet.base import WorkerRecords
from runner.fleet.skypilot import CostMeter, FleetScope, SkyPilotFleet, _Job
from tests.runner.runner_target import make_workspace, must

FLEET = {"backend": "skypilot", "parallel": 3, "skypilot": {"infra": "kubernetes", "max_clusters": 2}}


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace, _ = make_workspace(tmp_path, fleet=FLEET)
    return workspace


def new_run(ws: Workspace, budget: dict[str, Any] | None = None) -> int:
    return insert(
        ws.db(),
        "runs",
        {
            "name": f"r{now()}",
            "status": "running",
            "backend": "skypilot",
            "budget": json.dumps(budget or {}),
            "started_at": now(),
            "heartbeat_at": now(),
        },
    )


def fleet(ws: Workspace, run_id: int) -> SkyPilotFleet:
    made = make_fleet("skypilot", ws, ws.db(), run_id, 3)
    assert isinstance(made, SkyPilotFleet)
    return made


def worker(ws: Workspace, run_id: int, status: str, **meta: Any) -> int:
    return insert(
        ws.db(),
        "workers",
        {
            "run_id": run_id,
            "name": f"ar-r{run_id}-{len(meta)}{status}",
            "backend": "skypilot",
            "status": status,
            "price_per_hour": meta.pop("price", None),
            "meta": json.dumps(meta),
            "started_at": now(),
        },
    )


def test_the_run_is_capped_by_max_clusters(ws: Workspace) -> None:
    assert fleet(ws, new_run(ws)).size == 2


def test_costs_are_price_times_time_since_launch(ws: Workspace) -> None:
    run_id = new_run(ws)
    live = worker(ws, run_id, "ready", price=0.5, launched_at=now() - 3600)
    done = worker(ws, run_id, "down", price=2.0, launched_at=now() - 1000, torn_down_at=now() - 100)
    unpriced = worker(ws, run_id, "ready", launched_at=now() - 3600)
    db = ws.db()
    meter = CostMeter(FleetScope(ws, db, run_id, WorkerRecords(db, run_id, "skypilot")))  # alone
    meter.update()
    cost = {r["id"]: r["cost_usd"] for r in rows(db, "SELECT id, cost_usd FROM workers")}
    assert cost[live] == pytest.approx(0.5, rel=0.01)
    assert cost[done] == pytest.approx(2.0 * 900 / 3600, rel=0.001)
    assert cost[unpriced] == 0
    assert meter.total() == fleet(ws, run_id).cost_usd() == pytest.approx(0.5 + 0.5, rel=0.01)


def test_a_spent_budget_stops_new_launches(ws: Workspace) -> None:
    run_id = new_run(ws, budget={"usd": 1.0})
    worker(ws, run_id, "ready", price=0.5, launched_at=now() - 3600)
    insert(
        ws.db(),
        "llm_calls",
        {
            "run_id": run_id,
            "purpose": "patch",
            "model": "m",
            "prompt": "[]",
            "cost_usd": 0.6,
            "created_at": now(),
        },
    )
    waiting = worker(ws, run_id, "provisioning", launch_at=now() - 1)
    f = fleet(ws, run_id)
    f.costs.update()
    f.tick(force=True)  # would launch `waiting`, but $0.50 of VM + $0.60 of LLM >= $1
    row = must(one(ws.db(), "SELECT * FROM workers WHERE id = ?", [waiting]))
    meta = json.loads(row["meta"])
    assert row["status"] == "down" and meta["reason"] == "budget spent" and "launch_request" not in meta
    assert "worker_skipped" in [e["kind"] for e in rows(ws.db(), "SELECT kind FROM events")]


def test_workers_are_added_while_work_waits_staggered(ws: Workspace) -> None:
    run_id = new_run(ws)
    db = ws.db()
    for n in range(3):
        insert(
            db, "experiments", {"run_id": run_id, "title": f"e{n}", "status": "queued", "created_at": now()}
        )
    launched = worker(ws, run_id, "qualifying", launched_at=now())
    f = fleet(ws, run_id)
    f.pool.replace()
    added = rows(db, "SELECT * FROM workers WHERE id != ? ORDER BY id", [launched])
    assert len(added) == 1  # two at most, one is there
    meta = json.loads(added[0]["meta"])
    assert meta["phase"] == "waiting" and meta["cluster"] == added[0]["name"].lower()
    assert meta["launch_at"] >= now() + f.conf.stagger_seconds - 5  # not before the stagger
    f.pool.replace()
    assert must(one(db, "SELECT count(*) AS n FROM workers"))["n"] == 2


def test_failures_in_a_row_stop_the_run_with_the_last_reason(ws: Workspace) -> None:
    run_id = new_run(ws)
    worker(ws, run_id, "down", qualified_at=now() - 500, teardown="done")  # an earlier good one
    for reason in ("no capacity: A", "setup failed", "too noisy: A/A noise 30.0% > limit 10.0%"):
        worker(ws, run_id, "failed", reason=reason, teardown="done")
    f = fleet(ws, run_id)
    assert f.pool.failures_in_a_row() == (3, "too noisy: A/A noise 30.0% > limit 10.0%")
    with pytest.raises(UserError, match=r"^fleet.skypilot: 3 clusters in a row failed .*last: too noisy"):
        f.tick(force=True)


def test_a_job_is_found_again_from_its_job_dir(tmp_path: Path) -> None:
    ref = JobRef(7, 3, "req", tmp_path / "batch-0.log", tmp_path / "jobs" / "batch-0")
    assert _Job.load(ref) is None  # never submitted
    job = _Job(7, "ar-r1-abcdef", 3, 12, 100.0, ref.log_path, ref.job_dir, request="rid-1")
    job.save()
    again = _Job.load(ref)
    assert again is not None
    assert (again.cluster, again.worker_id, again.experiment_id, again.request, again.sky_job) == (
        "ar-r1-abcdef",
        3,
        12,
        "rid-1",
        None,
    )
    job.sky_job = 4
    job.save()
    loaded = _Job.load(ref)
    assert loaded is not None and loaded.sky_job == 4


def test_poll_and_reattach_of_a_job_that_never_started(ws: Workspace, tmp_path: Path) -> None:
    f = fleet(ws, new_run(ws))
    ref = JobRef(1, 1, None, tmp_path / "log", tmp_path / "job")
    assert f.poll(ref).state == "lost" and f.poll(ref).detail == "never started"


def test_the_fleet_gives_its_resources_to_every_task(ws: Workspace, tmp_path: Path) -> None:
    from runner.harness.prepare import template_path
    from runner.harness.template import load_template, render

    f = fleet(ws, new_run(ws))
    assert f.resources_override() == {"infra": "kubernetes", "cpus": "4+"}  # the keys that are set
    template = load_template(template_path(ws, ws.settings))
    sky = ws.settings.fleet.skypilot
    every_key = {"infra": sky.infra, "cpus": sky.cpus, "memory": sky.memory, "accelerators": sky.accelerators}

    def resources(override: dict[str, Any]) -> object:
        return render(template, name="t", workdir=tmp_path, envs={}, resources_override=override).config[
            "resources"
        ]

    assert resources(f.resources_override()) == resources(every_key)  # what the runner passed so far
