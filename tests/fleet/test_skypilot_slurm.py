"""The SkyPilot fleet for real, on the one-node Slurm cluster of scripts/slurm/up.sh.

One run of the tiny C target (tests/runner/runner_target.py) on two SkyPilot clusters: each is
launched (staggered) and qualified by an A/A job, wave 1 measures a real speedup and a real
slowdown in parallel, the runner is killed with SIGKILL while both batches run on the clusters,
the batches finish without it, `run --resume` collects them, downs a cluster of a dead run, runs
the failing experiment (wrong result: checks fail) on a cluster reused through `sky.exec`, and
downs every cluster at the end. A second run asks for more CPUs than the node has: no capacity is
a state, and the run stops after `max_failures` launches with the reason.

Skips when the cluster is not reachable; under CI=true that skip is a failure (.ci/run brings the
cluster up). Everything runs in subprocesses with `<state>/env.sh` (see slurm_support.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kb.db import insert, now, one, rows
from kb.workspace import Workspace
from tests.fleet.slurm_support import (
    REPO,
    cluster_names,
    require_cluster,
    sky_query,
    slurm_jobs_of_login_user,
)
from tests.runner.runner_target import make_workspace, must, queue

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PRICE = 0.5
# One batch of 12 pairs per experiment, decided at once (a pair costs ~0.1 s; a batch ~40 s of
# SkyPilot round trips on this machine).
PAIRS = 12
POLICY = {
    "min_effect": 0.05,
    "min_pairs": PAIRS,
    "batch_pairs": PAIRS,
    "max_pairs": PAIRS,
    "self_test_pairs": 6,
}
TIMEOUTS = {"build": 120, "bench": 30, "check": 60}


def sky_settings(env: dict[str, str], **overrides: Any) -> dict[str, Any]:
    return {
        "backend": "skypilot",
        "parallel": 2,
        "skypilot": {
            "infra": env["AUTORESEARCH_SLURM_INFRA"],
            "cpus": "1",
            "memory": "1",
            "max_clusters": 2,
            "price_per_hour": PRICE,
            # Two shared cores, other tests running: only a wildly noisy cluster is refused here.
            "noise_limit": 0.5,
            "qualify_pairs": 3,
            "stagger_seconds": 20,
            "idle_minutes": 30,
            **overrides,
        },
    }


def cli(
    env: dict[str, str], ws: Workspace, *args: str, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "--workspace", str(ws.root), *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_for(what: str, check: Any, timeout: float, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(2)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{tail}")


@pytest.fixture
def slurm_env() -> dict[str, str]:
    return require_cluster()


def test_a_wave_on_two_clusters_killed_resumed_and_downed(slurm_env: dict[str, str], tmp_path: Path) -> None:
    env = slurm_env
    ws, target = make_workspace(tmp_path, policy=POLICY, timeouts=TIMEOUTS, fleet=sky_settings(env))
    patches = queue(ws, target, ["speedup", "slowdown", "wrong"])
    db = ws.db()
    started = time.monotonic()
    log = tmp_path / "runner.log"
    try:
        with open(log, "wb") as out:
            runner = subprocess.Popen(
                [sys.executable, "-m", "tui.cli", "--workspace", str(ws.root), "run", "--name", "slurm"]
                + ["--skip-self-test", "--no-final"],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        # Mid-wave: both batches of wave 1 sent to their clusters (sky.exec), one at least still
        # running (the clusters qualify ~30 s apart, so the first may be over already).
        def mid_wave() -> list[dict[str, Any]]:
            assert runner.poll() is None, "the runner ended early:\n" + log.read_text()
            found = rows(db, "SELECT * FROM jobs WHERE backend_job_id IS NOT NULL ORDER BY id")
            return found if len(found) == 2 and any(j["status"] == "running" for j in found) else []

        wave_jobs = wait_for("both wave-1 batches submitted", mid_wave, 900, log)
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(timeout=30)
        killed_at = time.monotonic() - started
        wave_jobs = [must(one(db, "SELECT * FROM jobs WHERE id = ?", [j["id"]])) for j in wave_jobs]
        killed_jobs = [j for j in wave_jobs if j["status"] == "running"]
        clusters = {json.loads((Path(j["job_dir"]) / "sky.json").read_text())["cluster"] for j in wave_jobs}
        assert len(clusters) == 2 and killed_jobs  # one experiment per cluster, in parallel
        submitted = [json.loads((Path(j["job_dir"]) / "sky.json").read_text()) for j in killed_jobs]

        # The batches go on without the runner; wait until SkyPilot says they are over.
        def finished_meanwhile() -> bool:
            code = "result = {}\n"
            for info in submitted:
                code += (
                    f"job, _ = sky.get({info['request']!r})\n"
                    f"s = sky.get(sky.job_status({info['cluster']!r}, [job])).get(job)\n"
                    f"result[{info['cluster']!r}] = getattr(s, 'value', str(s))\n"
                )
            states = sky_query(env, code)
            return all(v in ("SUCCEEDED", "FAILED") for v in states.values())

        wait_for("the orphaned batches to finish on their clusters", finished_meanwhile, 600)
        run_before = must(one(db, "SELECT * FROM runs WHERE name = 'slurm'"))
        assert run_before["status"] in ("running", "interrupted")
        samples_before = must(one(db, "SELECT count(*) AS n FROM samples"))["n"]

        # A cluster recorded for a run nobody drives any more (here: one whose cluster is already
        # gone from SkyPilot) must be downed by the resume.
        old_run = insert(
            db, "runs", {"name": "old", "status": "interrupted", "backend": "skypilot", "started_at": now()}
        )
        orphan = insert(
            db,
            "workers",
            {
                "run_id": old_run,
                "name": "ar-r0-0rphan",
                "backend": "skypilot",
                "status": "ready",
                "price_per_hour": PRICE,
                "meta": json.dumps({"cluster": "ar-r0-0rphan", "launched_at": now() - 60}),
                "started_at": now() - 60,
            },
        )

        resumed = cli(env, ws, "run", "--resume", "--json", timeout=1200)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-5000:]
        summary = json.loads(resumed.stdout)
        total = time.monotonic() - started
    finally:
        # Whatever happened, no cluster of this test may survive it.
        cleanup = cli(env, ws, "fleet", "down", "--all", "--json", timeout=900)

    assert cleanup.returncode == 0, cleanup.stderr
    assert summary["status"] == "finished", summary
    by_title = {e["title"]: e for e in summary["experiments"]}
    speedup, slowdown, wrong = (
        by_title[t] for t in ("Skip the unused warm-up", "Repeat the work more", "Faster modulo (wrong)")
    )
    assert speedup["status"] == "kept" and speedup["effect"] > 0.5 and speedup["pairs"] == PAIRS, speedup
    assert slowdown["status"] == "discarded" and slowdown["effect"] < -0.3, slowdown
    assert wrong["status"] == "checks_failed", wrong
    assert [w["experiment_id"] for w in summary["winners"]] == [speedup["id"]]
    assert {e["patch_id"] for e in summary["experiments"]} == set(patches.values())

    # Real METRIC samples: 6 pairs x 2 sides, one sample per invocation, none twice; the two
    # batches that finished while no runner was there were collected, not run again.
    for exp in (speedup, slowdown):
        got = must(
            one(
                db,
                "SELECT count(*) AS n, count(DISTINCT pair) AS p FROM samples WHERE experiment_id = ?",
                [exp["id"]],
            )
        )
        assert (got["n"], got["p"]) == (2 * PAIRS, PAIRS)
    # Killed with batches running: their samples came from the resume (logs arrive whole).
    assert samples_before in (2 * PAIRS * (2 - len(killed_jobs)), 4 * PAIRS)
    jobs = rows(db, "SELECT * FROM jobs ORDER BY id")
    assert sorted(j["experiment_id"] for j in jobs) == sorted([speedup["id"], slowdown["id"], wrong["id"]])
    for job, info in zip(killed_jobs, submitted, strict=True):
        after = must(one(db, "SELECT * FROM jobs WHERE id = ?", [job["id"]]))
        assert after["status"] == "succeeded" and after["backend_job_id"].startswith(info["cluster"] + ":")
    failed = must(one(db, "SELECT * FROM jobs WHERE experiment_id = ?", [wrong["id"]]))
    assert failed["status"] == "failed"  # the job exits non-zero: SkyPilot's FAILED

    # Reuse: job 1 of each cluster is its qualification (the launch); experiments went through
    # exec, and one cluster ran two experiments.
    per_cluster: dict[str, list[int]] = {}
    for job in jobs:
        cluster, sky_id = job["backend_job_id"].split(":")
        per_cluster.setdefault(cluster, []).append(int(sky_id))
    assert set(per_cluster) == clusters
    assert all(min(ids) >= 2 for ids in per_cluster.values())
    assert sorted(len(ids) for ids in per_cluster.values()) == [1, 2]
    run = must(one(db, "SELECT * FROM runs WHERE name = 'slurm'"))
    workers = rows(db, "SELECT * FROM workers WHERE run_id = ? ORDER BY id", [run["id"]])
    assert {w["name"] for w in workers} == clusters
    for worker in workers:
        meta = json.loads(worker["meta"])
        assert worker["status"] == "down" and meta["teardown"] == "done", worker
        assert worker["noise"] is not None and 0 < worker["noise"] <= 0.5
        assert meta["qualify_job"] == 1 and meta["qualified_at"] > meta["launched_at"]
        assert worker["price_per_hour"] == PRICE and worker["cost_usd"] > 0
        qualify_log = (
            ws.logs_dir / f"run{run['id']}" / "fleet" / f"{worker['name']}-qualify.log"
        ).read_text()
        assert qualify_log.count("METRIC throughput=") == 6  # 3 A/A pairs
    # Cost: each experiment is charged its jobs' time; the run its clusters' whole time.
    for exp in (speedup, slowdown, wrong):
        assert must(one(db, "SELECT cost_usd FROM experiments WHERE id = ?", [exp["id"]]))["cost_usd"] > 0
    assert run["cost_usd"] == pytest.approx(sum(w["cost_usd"] for w in workers), rel=0.05)
    assert run["cost_usd"] < PRICE * 2 * total / 3600 * 1.05
    # The dead run's cluster was downed by the resume.
    gone = must(one(db, "SELECT * FROM workers WHERE id = ?", [orphan]))
    assert gone["status"] == "down" and json.loads(gone["meta"])["teardown"] == "done"
    assert "not live" in json.loads(gone["meta"])["reason"]
    kinds = [e["kind"] for e in rows(db, "SELECT kind FROM events WHERE run_id = ? ORDER BY id", [run["id"]])]
    assert kinds.count("worker_ready") == 2 and kinds.count("worker_down") == 2
    assert "recovered" in kinds

    # Nothing left: SkyPilot knows none of the clusters, Slurm holds no allocation for them.
    assert cluster_names(env, sorted(clusters)) == []
    assert not [line for line in slurm_jobs_of_login_user() if "ar-r" in line]
    assert json.loads(cleanup.stdout)["downed"] == []
    status = cli(env, ws, "fleet", "status", "--all", "--json")
    assert {w["name"]: w["status"] for w in json.loads(status.stdout)["workers"]} == {
        **{name: "down" for name in clusters},
        "ar-r0-0rphan": "down",
    }
    print(f"\nslurm suite: killed after {killed_at:.0f}s, run done after {total:.0f}s")


def test_no_capacity_is_a_state_and_stops_the_run(slurm_env: dict[str, str], tmp_path: Path) -> None:
    env = slurm_env
    fleet = sky_settings(env, cpus="64", max_failures=2, stagger_seconds=0)
    ws, target = make_workspace(tmp_path, policy=POLICY, timeouts=TIMEOUTS, fleet=fleet)
    queue(ws, target, ["speedup"])
    result = cli(env, ws, "run", "--skip-self-test", "--no-final", timeout=600)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "fleet.skypilot: 2 clusters in a row failed to launch or qualify" in last, result.stderr
    assert "no capacity: ResourcesUnavailableError" in last
    db = ws.db()
    run = must(one(db, "SELECT * FROM runs"))
    assert run["status"] == "interrupted" and "no capacity" in run["error"]
    workers = rows(db, "SELECT * FROM workers ORDER BY id")
    assert [w["status"] for w in workers] == ["failed", "failed"]
    for worker in workers:
        meta = json.loads(worker["meta"])
        assert (
            meta["reason"].startswith("no capacity: ResourcesUnavailableError") and meta["teardown"] == "done"
        )
    assert must(one(db, "SELECT status FROM experiments"))["status"] == "queued"  # nothing ran
    assert cluster_names(env, [w["name"] for w in workers]) == []
