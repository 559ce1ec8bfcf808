"""The SkyPilot fleet for real, on the one-node Slurm cluster of scripts/slurm/up.sh.

1. One run of the tiny C target (tests/runner/runner_target.py) on two clusters, launched 20 s
   apart and each qualified by an A/A job. The run's self-test, then wave 1 measures a real
   speedup and a real slowdown on both clusters; the runner is killed (SIGKILL) mid-wave, the
   batches finish without it, and one cluster then loses its Slurm allocation (a preemption).
   `run --resume` collects the surviving batch, finds the lost cluster, queues its experiment
   again (it runs on the other cluster), downs a cluster recorded for a dead run, runs the failing
   experiment (wrong result: the checks fail, the job FAILED) and a tampering candidate on
   clusters reused through `sky.exec`, and downs every cluster at the end. The harness there runs
   as the cluster's user (the login user, not root: a user namespace): the candidate whose build
   rewrites the benchmark, forges markers with a nonce read from /proc and replaces the baseline's
   binary is not kept, and every experiment records the isolation the cluster gave it.
   What the SDK smoke test of scripts/slurm/smoke.py showed (launch, a job's log fetched, a second
   job through `sky.exec` numbered after the first, nothing left after down) is shown here too.
2. No capacity (more CPUs than the node has) is a state: the run stops after `max_failures`.
3. A cluster noisier than `noise_limit` is downed and replaced (here every one is: the run stops).

Each test has a deadline (pytest-timeout) well under ten minutes; past it the test fails and its
`finally` still downs what it launched. Skips when the cluster is not reachable; under CI=true that
skip is a failure (.ci/run brings the cluster up). Everything runs in subprocesses with
`<state>/env.sh` (see slurm_support.py).
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
    preempt,
    require_cluster,
    sky_query,
    slurm_jobs_of_login_user,
)
from tests.runner.runner_target import make_workspace, must, queue

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PRICE = 0.5
# One batch of 8 pairs per experiment, decided at once (a pair costs ~0.1 s; a batch ~40 s of
# SkyPilot round trips on this machine): enough for the speedup (+100%) and slowdown (-50%).
PAIRS = 8
POLICY = {
    "min_effect": 0.05,
    "min_pairs": PAIRS,
    "batch_pairs": PAIRS,
    "max_pairs": PAIRS,
    "self_test_pairs": 4,
}
# Each test's deadline, its clusters' launches and downs included (a hung cluster fails the test
# loudly, long before CI's own limit); the subprocesses' own timeouts stay inside it.
DEADLINE = 420
ATTACKS = ("rewrite_bench", "forge_proc", "baseline_tree")
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
            # Two shared cores and other tests running make any A/A noisy (30-50% seen): accept
            # every cluster here; test_a_noisy_cluster_is_downed_and_replaced refuses them.
            "noise_limit": 5.0,
            "qualify_pairs": 3,
            "stagger_seconds": 20,
            "idle_minutes": 30,
            **overrides,
        },
    }


def cli(
    env: dict[str, str], ws: Workspace, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "--workspace", str(ws.root), *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_for(what: str, check: Any, timeout: float, log: Path | None = None, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{tail}")


def timeline(ws: Workspace, since: float) -> str:
    """Where a test's time went: the runs' events, seconds from `since` (wall clock), one a line."""
    db = ws.db()
    try:
        found = rows(db, "SELECT ts, kind, message FROM events ORDER BY id")
    finally:
        db.conn.close()
    return "\n".join(f"{e['ts'] - since:7.1f} s  {e['kind']}: {e['message'][:120]}" for e in found)


@pytest.fixture
def slurm_env() -> dict[str, str]:
    return require_cluster()


@pytest.mark.timeout(DEADLINE + 120)  # the longest: two clusters, a kill, a resume
def test_a_wave_on_two_clusters_killed_resumed_and_downed(slurm_env: dict[str, str], tmp_path: Path) -> None:
    from runner.hypotheses import add_hypothesis, add_patch
    from tests.runner.attacks import RUNTIME, runtime_diff

    env = slurm_env
    ws, target = make_workspace(tmp_path, policy=POLICY, timeouts=TIMEOUTS, fleet=sky_settings(env))
    patches = queue(ws, target, ["speedup", "slowdown", "wrong"])
    db = ws.db()
    # One tampering candidate, after the others (it runs once the runner is resumed): its build
    # tries three attacks in turn, each saying in the log what it managed.
    hid = add_hypothesis(db, "Candidate tamper", status="approved", priority=0)
    assert hid is not None
    script = "".join(RUNTIME[name] for name in ATTACKS)
    tamper = add_patch(db, hid, runtime_diff(target, script), author_kind="manual", author="tamper")
    started = time.monotonic()
    wall_start = time.time()
    log = tmp_path / "runner.log"
    summary: dict[str, Any] = {}
    runner: subprocess.Popen[bytes] | None = None
    try:
        with open(log, "wb") as out:
            runner = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tui.cli",
                    "--workspace",
                    str(ws.root),
                    "run",
                    "--name",
                    "slurm",
                    "--no-final",
                ],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        # The A/A self-test holds the first qualified cluster while the second qualifies, then
        # wave 1 starts. Mid-wave: both its batches sent (sky.exec), one at least still running.
        def mid_wave() -> list[dict[str, Any]]:
            assert runner.poll() is None, "the runner ended early:\n" + log.read_text()
            found = rows(
                db,
                "SELECT j.* FROM jobs j JOIN experiments e ON e.id = j.experiment_id "
                "WHERE e.kind = 'candidate' AND j.backend_job_id IS NOT NULL ORDER BY j.id",
            )
            return found if len(found) == 2 and any(j["status"] == "running" for j in found) else []

        wave_jobs = wait_for("both wave-1 batches submitted", mid_wave, 360, log)
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(timeout=30)
        killed_at = time.monotonic() - started
        wave_jobs = [must(one(db, "SELECT * FROM jobs WHERE id = ?", [w["id"]])) for w in wave_jobs]
        killed = [j for j in wave_jobs if j["status"] == "running"]
        assert killed
        sent = {j["id"]: json.loads((Path(j["job_dir"]) / "sky.json").read_text()) for j in killed}

        # The batches go on without the runner; wait until SkyPilot says they are over.
        def finished_meanwhile() -> bool:
            code = "result = {}\n"
            for info in sent.values():
                code += (
                    f"job, _ = sky.get({info['request']!r})\n"
                    f"s = sky.get(sky.job_status({info['cluster']!r}, [job])).get(job)\n"
                    f"result[{info['cluster']!r}] = getattr(s, 'value', str(s))\n"
                )
            states = sky_query(env, code)
            return all(v in ("SUCCEEDED", "FAILED") for v in states.values())

        # Each query is a process importing sky (seconds of CPU): every 5 s, not faster.
        wait_for("the orphaned batches to finish on their clusters", finished_meanwhile, 240, every=5)
        run_before = must(one(db, "SELECT * FROM runs WHERE name = 'slurm'"))
        assert run_before["status"] in ("running", "interrupted")

        # While nobody watches, one cluster loses its Slurm allocation (a preemption), its
        # finished batch's log with it: the resume finds the cluster gone and queues that
        # experiment again.
        lost_job = killed[0]
        lost_cluster = sent[lost_job["id"]]["cluster"]
        preempt(lost_cluster)

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

        resumed = cli(env, ws, "run", "--resume", "--run", str(run_before["id"]), "--json", timeout=DEADLINE)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-5000:]
        summary = json.loads(resumed.stdout)
        total = time.monotonic() - started
    finally:
        # Whatever happened (the deadline too), no cluster of this test may survive it.
        if runner is not None and runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
        cleanup = cli(env, ws, "fleet", "down", "--all", "--json", timeout=300)
        print(f"\ntimeline (shown when the test fails):\n{timeline(ws, wall_start)}")

    assert cleanup.returncode == 0, cleanup.stderr
    assert summary["status"] == "finished", summary
    run = must(one(db, "SELECT * FROM runs WHERE name = 'slurm'"))
    assert summary["self_test"]["passed"] is True

    # Decisions from real samples, per patch (its last experiment decides).
    final = {
        name: must(one(db, "SELECT * FROM experiments WHERE patch_id = ? ORDER BY id DESC LIMIT 1", [pid]))
        for name, pid in patches.items()
    }
    decided = {e["id"]: e for e in summary["experiments"]}
    speedup, slowdown, wrong = (decided[final[n]["id"]] for n in ("speedup", "slowdown", "wrong"))
    assert speedup["status"] == "kept" and speedup["effect"] > 0.5 and speedup["pairs"] == PAIRS, speedup
    assert slowdown["status"] == "discarded" and slowdown["effect"] < -0.3, slowdown
    assert wrong["status"] == "checks_failed", wrong
    assert [w["experiment_id"] for w in summary["winners"]] == [speedup["id"]]
    for exp in (speedup, slowdown):  # PAIRS pairs x 2 sides, one sample per invocation, none twice
        got = must(
            one(
                db,
                "SELECT count(*) AS n, count(DISTINCT pair) AS p FROM samples WHERE experiment_id = ?",
                [exp["id"]],
            )
        )
        assert (got["n"], got["p"]) == (2 * PAIRS, PAIRS)

    # The lost cluster: its experiment is `lost`, its job too, and a retry decided the patch.
    lost_exp = must(one(db, "SELECT * FROM experiments WHERE id = ?", [lost_job["experiment_id"]]))
    assert lost_exp["status"] == "lost"
    retry = must(one(db, "SELECT * FROM experiments WHERE retry_of = ?", [lost_exp["id"]]))
    assert retry["id"] in (speedup["id"], slowdown["id"]) and retry["worker_id"] != lost_exp["worker_id"]
    assert must(one(db, "SELECT status FROM jobs WHERE id = ?", [lost_job["id"]]))["status"] == "lost"
    lost_samples = must(
        one(db, "SELECT count(*) AS n FROM samples WHERE experiment_id = ?", [lost_exp["id"]])
    )
    # Its finished pairs are kept: whatever of its log the runner had fetched (every 60 s while the
    # batch runs, so all of it when the kill came late), and nothing it had not.
    lost_log = Path(lost_job["log_path"])
    fetched = lost_log.read_text() if lost_log.exists() else ""
    assert lost_samples["n"] <= fetched.count("METRIC throughput=")

    # The other batch of wave 1 (over before the kill, or while no runner was there) was
    # collected, not run again.
    for job in wave_jobs:
        if job["id"] != lost_job["id"]:
            assert must(one(db, "SELECT status FROM jobs WHERE id = ?", [job["id"]]))["status"] == "succeeded"
            count = one(db, "SELECT count(*) AS n FROM jobs WHERE experiment_id = ?", [job["experiment_id"]])
            assert must(count)["n"] == 1

    # Reuse: job 1 of each cluster is its qualification (the launch); every experiment went
    # through exec, job ids counting up per cluster, and some cluster ran several experiments.
    jobs = rows(db, "SELECT * FROM jobs ORDER BY id")
    per_cluster: dict[str, list[tuple[int, int]]] = {}
    for job in jobs:
        cluster, sky_id = job["backend_job_id"].split(":")
        per_cluster.setdefault(cluster, []).append((int(sky_id), job["experiment_id"]))
    for ids in per_cluster.values():
        assert [i for i, _ in ids] == list(range(2, 2 + len(ids)))
    assert max(len({e for _, e in ids}) for ids in per_cluster.values()) >= 2
    failed = must(one(db, "SELECT * FROM jobs WHERE experiment_id = ?", [wrong["id"]]))
    assert failed["status"] == "failed"  # the job exits non-zero: SkyPilot's FAILED

    # Workers: qualified by their A/A job, all down at the end (the preempted one lost).
    workers = {
        w["name"]: w for w in rows(db, "SELECT * FROM workers WHERE run_id = ? ORDER BY id", [run["id"]])
    }
    assert set(per_cluster) <= set(workers) and len(workers) in (2, 3)  # 3: a replacement launched
    assert workers[lost_cluster]["status"] == "lost"
    for name, worker in workers.items():
        meta = json.loads(worker["meta"])
        assert meta["teardown"] == "done" and worker["status"] in ("down", "lost"), worker
        assert worker["price_per_hour"] == PRICE and worker["cost_usd"] > 0
        if name in per_cluster:
            assert meta["qualify_job"] == 1 and meta["qualified_at"] > meta["launched_at"]
            assert worker["noise"] is not None and worker["noise"] > 0
            qualify_log = (ws.logs_dir / f"run{run['id']}" / "fleet" / f"{name}-qualify.log").read_text()
            assert qualify_log.count("METRIC throughput=") == 6  # 3 A/A pairs
    # Cost: each experiment is charged its jobs' time; the run its clusters' whole time.
    for exp in (speedup, slowdown, wrong):
        assert must(one(db, "SELECT cost_usd FROM experiments WHERE id = ?", [exp["id"]]))["cost_usd"] > 0
    assert run["cost_usd"] == pytest.approx(sum(w["cost_usd"] for w in workers.values()), rel=0.05)
    assert run["cost_usd"] < PRICE * len(workers) * total / 3600 * 1.05
    # The dead run's cluster was downed by the resume.
    gone = must(one(db, "SELECT * FROM workers WHERE id = ?", [orphan]))
    assert gone["status"] == "down" and json.loads(gone["meta"])["teardown"] == "done"
    assert "not live" in json.loads(gone["meta"])["reason"]
    kinds = [e["kind"] for e in rows(db, "SELECT kind FROM events WHERE run_id = ? ORDER BY id", [run["id"]])]
    assert kinds.count("worker_ready") >= 2 and kinds.count("worker_lost") == 1 and "recovered" in kinds
    assert json.loads(workers[lost_cluster]["meta"])["reason"].startswith("the cluster is gone")

    # The tampering candidate, run by the harness as the cluster's user (a user namespace): not
    # kept, each attack seen failing in its log; every experiment records that isolation.
    evil = must(one(db, "SELECT * FROM experiments WHERE patch_id = ? ORDER BY id DESC LIMIT 1", [tamper]))
    assert evil["status"] in ("discarded", "inconclusive"), evil
    measured = rows(db, "SELECT meta FROM experiments WHERE run_id = ? AND status != 'lost'", [run["id"]])
    isolation = {json.loads(e["meta"]).get("isolation") for e in measured}
    assert isolation == {"userns+pid+mount"}, [json.loads(e["meta"]) for e in measured]
    log_text = "".join(p.read_text() for p in Path(evil["log_dir"]).glob("batch-*.log"))
    assert "sandbox: userns+pid+mount" in log_text
    assert "evil: autoresearch.sh is read-only" in log_text  # rewrite_bench
    assert "evil: nonce=unknown log=unknown" in log_text  # forge_proc
    assert "evil: the baseline tree is out of reach" in log_text  # baseline_tree
    assert "evil: rewrote" not in log_text and "evil: replaced" not in log_text

    # Nothing left: SkyPilot knows none of the clusters, Slurm holds no allocation for them.
    assert cluster_names(env, sorted(workers)) == []
    assert not [line for line in slurm_jobs_of_login_user() if "ar-r" in line]
    assert json.loads(cleanup.stdout)["downed"] == []
    status = cli(env, ws, "fleet", "status", "--all", "--json")
    shown = {w["name"]: w["status"] for w in json.loads(status.stdout)["workers"]}
    assert shown == {**{n: w["status"] for n, w in workers.items()}, "ar-r0-0rphan": "down"}
    print(f"\nslurm suite: killed after {killed_at:.0f}s, run done after {total:.0f}s")


@pytest.mark.timeout(DEADLINE)
def test_no_capacity_is_a_state_and_stops_the_run(slurm_env: dict[str, str], tmp_path: Path) -> None:
    env = slurm_env
    fleet = sky_settings(env, cpus="64", max_failures=2, stagger_seconds=0)
    ws, target = make_workspace(tmp_path, policy=POLICY, timeouts=TIMEOUTS, fleet=fleet)
    queue(ws, target, ["speedup"])
    result = cli(env, ws, "run", "--skip-self-test", "--no-final", timeout=DEADLINE)
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

    # `fleet down` downs what no live run uses: here a recorded cluster SkyPilot no longer has.
    stray = insert(
        db,
        "workers",
        {
            "run_id": run["id"],
            "name": "ar-r9-5tray0",
            "backend": "skypilot",
            "status": "ready",
            "meta": json.dumps({"cluster": "ar-r9-5tray0", "launched_at": now() - 60}),
            "started_at": now() - 60,
        },
    )
    downed = cli(env, ws, "fleet", "down", "--json", timeout=300)
    assert downed.returncode == 0, downed.stderr
    assert [(d["name"], d["status"], d["teardown"]) for d in json.loads(downed.stdout)["downed"]] == [
        ("ar-r9-5tray0", "down", "done")
    ]
    assert (
        json.loads(must(one(db, "SELECT meta FROM workers WHERE id = ?", [stray]))["meta"])["teardown"]
        == "done"
    )


@pytest.mark.timeout(DEADLINE)
def test_a_noisy_cluster_is_downed_and_replaced(slurm_env: dict[str, str], tmp_path: Path) -> None:
    env = slurm_env
    # One cluster at a time, and a noise limit no real measurement meets: the first cluster is
    # refused after its A/A, downed, and a replacement launched, refused in turn; then the run stops.
    fleet = sky_settings(env, max_clusters=1, noise_limit=0.0001, max_failures=2)
    ws, target = make_workspace(tmp_path, policy=POLICY, timeouts=TIMEOUTS, fleet=fleet)
    queue(ws, target, ["speedup"])
    try:
        result = cli(env, ws, "run", "--no-final", timeout=DEADLINE)
    finally:  # the deadline too: no cluster of this test may survive it
        cli(env, ws, "fleet", "down", "--all", "--json", timeout=300)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "fleet.skypilot: 2 clusters in a row failed to launch or qualify" in last, result.stderr
    assert "too noisy: A/A noise" in last and "> limit 0.0%" in last
    db = ws.db()
    workers = rows(db, "SELECT * FROM workers ORDER BY id")
    assert [w["status"] for w in workers] == ["failed", "failed"]
    first, second = (json.loads(w["meta"]) for w in workers)
    for worker, meta in zip(workers, (first, second), strict=True):
        assert worker["noise"] > 0.0001 and meta["reason"].startswith("too noisy")
        assert meta["teardown"] == "done" and meta["qualify_job"] == 1
    # The replacement was launched only after the first was refused (one cluster at a time).
    assert workers[0]["ended_at"] <= second["launched_at"]
    kinds = [e["kind"] for e in rows(db, "SELECT kind FROM events ORDER BY id")]
    assert kinds.count("worker_failed") == 2 and "worker_added" in kinds
    assert cluster_names(env, [w["name"] for w in workers]) == []
