"""The SkyPilot fleet's whole life against a scripted stand-in for `sky` (no cluster, no API server):
launch, the A/A qualification, a batch submitted, polled and its log fetched, a cancelled batch,
a restart that reattaches and cancels what nobody tracks, and teardown. The same paths on real
clusters are tests/fleet/test_skypilot_slurm.py; this one runs everywhere and fast."""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb import gitrepo
from kb.db import insert, now, rows
from kb.workspace import Workspace
from runner.fleet import JobRef, JobSpec
from runner.fleet.skypilot import SkyPilotFleet
from runner.harness.prepare import template_path
from runner.harness.template import load_template, render
from tests.runner.runner_target import make_workspace

FLEET = {
    "backend": "skypilot",
    "parallel": 1,
    "skypilot": {"infra": "slurm", "cpus": "1", "max_clusters": 1, "noise_limit": 0.5, "stagger_seconds": 0},
}


class FakeSky:
    """What the fleet calls of `sky`: every request succeeds at once; calls are logged by name."""

    def __init__(self, home: Path, aa_log: Any) -> None:
        self.home, self.aa_log = home, aa_log
        self.calls: list[str] = []
        self.requests: dict[str, Any] = {}
        self.ids = itertools.count(1)
        self.jobs = itertools.count(2)  # job 1 of a cluster is its qualification
        self.job_states: dict[int, list[str]] = {}

    def module(self) -> types.ModuleType:
        sky = types.ModuleType("sky")
        for name in ("api_status", "get", "launch", "exec", "job_status", "cancel", "api_cancel", "queue"):
            setattr(sky, name, getattr(self, f"sky_{name}"))
        for name in ("download_logs", "status", "down", "cost_report"):
            setattr(sky, name, getattr(self, f"sky_{name}"))
        sky.StatusRefreshMode = types.SimpleNamespace(FORCE="FORCE")
        made = types.SimpleNamespace(
            from_yaml_config=lambda cfg: types.SimpleNamespace(validate=lambda: None)
        )
        sky.Resources = sky.Task = made
        sky.sky_logging = types.SimpleNamespace(silent=contextlib.nullcontext)
        return sky

    def request(self, kind: str, result: Any) -> str:
        self.calls.append(kind)
        rid = f"{kind}-{next(self.ids)}"
        self.requests[rid] = result
        return rid

    def sky_api_status(self, ids: list[str] | None = None, **_: Any) -> list[Any]:
        return [types.SimpleNamespace(status="SUCCEEDED") for _ in ids or []]

    def sky_get(self, rid: str) -> Any:
        return self.requests[rid]

    def sky_launch(self, task: Any, cluster_name: str) -> str:
        return self.request("launch", (1, types.SimpleNamespace(launched_resources=None)))

    def sky_exec(self, task: Any, cluster_name: str) -> str:
        job = next(self.jobs)
        self.job_states[job] = ["RUNNING", "SUCCEEDED"]
        return self.request("exec", (job, None))

    def sky_job_status(self, cluster: str, ids: list[int]) -> str:
        states = self.job_states.setdefault(ids[0], ["SUCCEEDED"])
        return self.request("job_status", {ids[0]: states.pop(0) if len(states) > 1 else states[0]})

    def sky_cancel(self, cluster: str, job_ids: list[int]) -> str:
        return self.request(f"cancel {job_ids}", None)

    def sky_api_cancel(self, rid: str, silent: bool = False) -> str:
        return self.request("api_cancel", None)

    def sky_queue(self, cluster: str) -> str:
        return self.request(
            "queue", [{"job_id": 2, "status": "SUCCEEDED"}, {"job_id": 9, "status": "RUNNING"}]
        )

    def sky_download_logs(self, cluster: str, ids: list[str]) -> dict[str, str]:
        folder = self.home / f"{cluster}-{ids[0]}-{len(self.calls)}"
        (folder / "tasks").mkdir(parents=True)
        log = self.aa_log(cluster) if ids[0] == "1" else f"job {ids[0]} says hello\n".encode()
        (folder / "tasks" / "run.log").write_bytes(log)
        self.calls.append("download_logs")
        return {ids[0]: str(folder)}

    def sky_status(self, names: list[str], refresh: Any = None) -> str:
        return self.request("status", [{"name": n, "status": "UP"} for n in names])

    def sky_down(self, cluster: str) -> str:
        return self.request("down", None)

    def sky_cost_report(self, days: int) -> str:
        return self.request("cost_report", [])


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """time.time and sleeps under the test's control (the fleet rate-limits its polls by time)."""
    stamp = [time.time()]
    monkeypatch.setattr(time, "time", lambda: stamp[0])
    monkeypatch.setattr(time, "sleep", lambda s: stamp.__setitem__(0, stamp[0] + s))
    yield stamp


def test_a_cluster_launches_qualifies_runs_batches_and_goes_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    ws, _ = make_workspace(tmp_path, fleet=FLEET)
    db = ws.db()

    def aa_log(cluster: str) -> bytes:
        meta = json.loads(rows(db, "SELECT meta FROM workers WHERE name = ?", [cluster])[0]["meta"])
        nonce = meta["qualify_nonce"]
        lines = [f"@@AR {nonce} 1.0 PHASE bench"]
        for pair, (a, b) in enumerate([(100.0, 101.0), (102.0, 99.0), (98.0, 100.0)]):
            for side, value in (("A", a), ("B", b)):
                lines += [
                    f"@@AR {nonce} 2.0 BEGIN {pair} {side}",
                    f"METRIC throughput={value}",
                    f"@@AR {nonce} 3.0 END {pair} {side} 0",
                ]
        return ("\n".join([*lines, f"@@AR {nonce} 5.0 STATUS done"]) + "\n").encode()

    fake = FakeSky(tmp_path / "sky-home", aa_log)
    monkeypatch.setitem(sys.modules, "sky", fake.module())
    run_id = new_run(ws)
    experiment = insert(
        db, "experiments", {"run_id": run_id, "title": "e", "status": "queued", "created_at": now()}
    )

    fleet = SkyPilotFleet(ws, db, run_id, 1)
    [worker] = fleet.up()
    assert worker.status == "provisioning" and fake.calls == ["launch"]
    for _ in range(3):  # the launch resolves, then the qualification job is checked, then it is read
        clock[0] += 3
        fleet.tick(force=True)
    [worker] = fleet.workers()
    assert worker.status == "ready", worker.meta
    assert (fleet.qualifier.logs_dir / f"{worker.name}-qualify.log").is_file()

    spec = job_spec(ws, run_id, experiment, worker.id, tmp_path, batch=0)
    fleet.submit(worker, spec)
    ref = JobRef(spec.job_id, worker.id, None, spec.log_path, spec.job_dir)
    states = []
    for _ in range(5):
        clock[0] += 61  # past the poll and log intervals
        states.append(fleet.poll(ref).state)
    assert states[-1] == "succeeded" and "running" in states
    assert spec.log_path.read_text() == "job 2 says hello\n"  # fetched while running and at the end
    assert rows(db, "SELECT backend_job_id FROM jobs WHERE id = ?", [spec.job_id])[0]["backend_job_id"] == (
        f"{worker.name}:2"
    )

    second = job_spec(ws, run_id, experiment, worker.id, tmp_path, batch=1)
    fleet.submit(worker, second)
    ref2 = JobRef(second.job_id, worker.id, None, second.log_path, second.job_dir)
    fleet.cancel(ref2)
    assert fleet.poll(ref2).detail == "cancelled by the runner" and "cancel [3]" in fake.calls

    restarted = SkyPilotFleet(ws, ws.db(), run_id, 1)
    states_after = restarted.reattach([ref])
    assert states_after[spec.job_id].state == "pending"  # found again from sky.json; the next poll ends it
    assert "cancel [9]" in fake.calls  # a job on the cluster nobody tracks
    restarted.down()
    [row] = rows(db, "SELECT status, meta FROM workers")
    assert row["status"] == "down" and json.loads(row["meta"])["teardown"] == "done"
    assert not fleet.qualifier.tree_dir.exists()
    kinds = [e["kind"] for e in rows(db, "SELECT kind FROM events ORDER BY id")]
    assert kinds[:3] == ["worker_launching", "worker_launched", "worker_ready"]
    assert kinds[-1] == "worker_down"


def new_run(ws: Workspace) -> int:
    baseline = gitrepo.resolve(gitrepo.open_repo(ws.mirror_path), ws.settings.target.baseline)
    return insert(
        ws.db(),
        "runs",
        {
            "name": "r",
            "status": "running",
            "backend": "skypilot",
            "started_at": now(),
            "heartbeat_at": now(),
            "baseline_commit": baseline,
        },
    )


def job_spec(ws: Workspace, run_id: int, experiment: int, worker_id: int, root: Path, batch: int) -> JobSpec:
    workdir = root / f"exp-{batch}"
    workdir.mkdir()
    (workdir / "f.txt").write_text("x")
    job_id = insert(
        ws.db(),
        "jobs",
        {
            "run_id": run_id,
            "experiment_id": experiment,
            "worker_id": worker_id,
            "batch": batch,
            "pair_start": 0,
            "pairs": 2,
            "nonce": "n",
            "backend": "skypilot",
            "status": "running",
            "log_path": "x",
            "job_dir": "y",
            "submitted_at": now(),
        },
    )
    task = render(
        load_template(template_path(ws, ws.settings)),
        name=f"ar-exp-{batch}",
        workdir=workdir,
        envs={"BATCH": batch},
        resources_override={"cpus": "1"},
    )
    return JobSpec(job_id, experiment, batch, task, root / f"logs/{job_id}.log", root / f"jobs/{job_id}")
