"""`kill -9` of the runner at several moments of a wave, then `run --resume`: nothing lost or doubled.

The runner is the real CLI in its own process; the kills are real SIGKILLs. After each resume the
run must finish with every patch measured by exactly one experiment, every sample of every job log
in the database (and nothing else), no pair measured twice, no process and no worktree left.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kb.db import one, rows
from kb.workspace import Workspace
from runner import commands
from runner.fleet.local import session_members
from runner.harness.prepare import A_DIR, B_DIR
from runner.harness.sandbox import HARNESS_DIR
from tests.runner.runner_target import make_workspace, must, queue
from tests.runner.test_runner_loop import assert_clean, assert_logs_match_samples, wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def cli(ws: Workspace, *args: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tui.cli", "--workspace", str(ws.root), "run", *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def kill9(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def resume(ws: Workspace, log: Path, timeout: float = 180) -> None:
    proc = cli(ws, "--resume", log=log)
    try:
        proc.wait(timeout)
    finally:
        if proc.poll() is None:
            kill9(proc)
    assert proc.returncode == 0, log.read_text()[-3000:]


def assert_invariants(ws: Workspace, patches: dict[str, int], log: Path) -> dict[int, dict[str, Any]]:
    db = ws.db()
    run = one(db, "SELECT * FROM runs ORDER BY id DESC LIMIT 1")
    assert run is not None and run["status"] == "finished", log.read_text()[-3000:]
    found: dict[int, dict[str, Any]] = {}
    for name, patch_id in patches.items():
        exps = rows(db, "SELECT * FROM experiments WHERE patch_id = ? AND status != 'lost'", [patch_id])
        assert len(exps) == 1, f"{name}: {len(exps)} experiments"
        found[patch_id] = exps[0]
    for exp in rows(db, "SELECT id FROM experiments WHERE run_id = ?", [run["id"]]):
        finals = rows(db, "SELECT id FROM decisions WHERE experiment_id = ? AND is_final = 1", [exp["id"]])
        assert len(finals) <= 1
        looks = [
            d["pairs"]
            for d in rows(
                db, "SELECT pairs FROM decisions WHERE experiment_id = ? AND is_final = 0", [exp["id"]]
            )
        ]
        assert len(looks) == len(set(looks)), f"experiment {exp['id']} looked twice at the same pairs"
    for job in rows(db, "SELECT backend_job_id FROM jobs WHERE backend_job_id IS NOT NULL"):
        assert session_members(int(job["backend_job_id"])) == []
    assert_logs_match_samples(ws, run["id"])
    assert_clean(ws, run["id"])
    return found


def test_kill_during_build_then_resume(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, target={"build_cmd": "sleep 1; make -s"})
    patches = queue(ws, target, ["slowdown", "speedup"])
    log = tmp_path / "runner.log"
    proc = cli(ws, "--skip-self-test", "--no-final", log=log)
    db = ws.db()
    wait_for(
        lambda: one(db, "SELECT id FROM experiments WHERE kind = 'candidate' AND phase = 'build'"),
        what="a build",
    )
    kill9(proc)
    live = rows(db, "SELECT * FROM jobs WHERE status = 'running'")
    assert live and all(session_members(int(j["backend_job_id"])) for j in live)  # orphans, still building
    resume(ws, log)
    exps = assert_invariants(ws, patches, log)
    assert exps[patches["slowdown"]]["status"] == "discarded"
    assert "jobs reattached" in log.read_text()


def test_kill_during_bench_keeps_every_sample(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path)
    patches = queue(ws, target, ["noisy", "slowdown"])
    log = tmp_path / "runner.log"
    proc = cli(ws, "--skip-self-test", "--no-final", log=log)
    db = ws.db()
    exp = wait_for(
        lambda: one(
            db,
            "SELECT e.id FROM experiments e WHERE e.phase = 'bench' AND "
            "(SELECT count(*) FROM samples s WHERE s.experiment_id = e.id) >= 4",
        ),
        what="samples",
    )
    kill9(proc)
    before = must(one(db, "SELECT count(*) AS n FROM samples WHERE experiment_id = ?", [exp["id"]]))["n"]
    time.sleep(0.5)  # the orphaned job goes on measuring while no runner watches
    resume(ws, log)
    found = assert_invariants(ws, patches, log)
    assert (
        must(one(db, "SELECT count(*) AS n FROM samples WHERE experiment_id = ?", [exp["id"]]))["n"] > before
    )
    # The orphan's batch was reattached, not run again: batch 0 covers the same pairs once.
    jobs = rows(db, "SELECT * FROM jobs WHERE experiment_id = ? ORDER BY batch", [exp["id"]])
    assert jobs[0]["status"] == "succeeded"
    assert found[patches["noisy"]]["status"] == "inconclusive"


def test_kill_between_batches(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, fleet={"parallel": 1})
    patches = queue(ws, target, ["noisy"])
    log = tmp_path / "runner.log"
    proc = cli(ws, "--skip-self-test", "--no-final", log=log)
    db = ws.db()
    wait_for(lambda: one(db, "SELECT id FROM samples LIMIT 1"), what="the first batch")
    commands.send(db, "pause")
    # Paused after the first batch: decided `continue`, the next batch not submitted.
    wait_for(
        lambda: (
            one(db, "SELECT id FROM decisions WHERE verdict = 'continue'")
            and not one(db, "SELECT id FROM jobs WHERE status IN ('running', 'submitting')")
        ),
        what="the pause between batches",
    )
    kill9(proc)
    assert must(one(db, "SELECT count(*) AS n FROM jobs"))["n"] == 1
    resume(ws, log)
    exps = assert_invariants(ws, patches, log)
    exp = exps[patches["noisy"]]
    jobs = rows(db, "SELECT * FROM jobs WHERE experiment_id = ? ORDER BY batch", [exp["id"]])
    policy = ws.settings.policy
    assert [(j["pair_start"], j["pairs"]) for j in jobs] == [
        (0, policy.min_pairs),
        (policy.min_pairs, policy.max_pairs - policy.min_pairs),
    ]


def test_random_kills_across_a_whole_run(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path)
    patches = queue(ws, target, ["speedup", "slowdown", "noisy", "wrong"])
    log = tmp_path / "runner.log"
    rng = random.Random(int(os.environ.get("AUTORESEARCH_TEST_SEED", "20260101")))
    db = ws.db()

    def state() -> str | None:
        run = one(db, "SELECT status FROM runs ORDER BY id DESC LIMIT 1")
        return run["status"] if run else None

    proc = cli(ws, log=log)
    kills = 0
    for _ in range(4):
        time.sleep(rng.uniform(0.5, 2.5))
        if proc.poll() is not None:
            break
        kill9(proc)
        kills += 1
        # Killed before it even created the run: start again; otherwise resume.
        proc = cli(ws, "--resume", log=log) if state() is not None else cli(ws, log=log)
    proc.wait(240)
    if state() != "finished":  # killed right before it finished: one more resume
        resume(ws, log)
    assert kills >= 2
    exps = assert_invariants(ws, patches, log)
    assert exps[patches["wrong"]]["status"] == "checks_failed"
    assert exps[patches["slowdown"]]["status"] == "discarded"


def test_sigterm_stops_jobs_and_leaves_the_run_resumable(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, target={"build_cmd": "sleep 1; make -s"})
    patches = queue(ws, target, ["slowdown"])
    log = tmp_path / "runner.log"
    proc = cli(ws, "--skip-self-test", "--no-final", log=log)
    db = ws.db()
    wait_for(lambda: one(db, "SELECT id FROM experiments WHERE phase = 'build'"), what="a build")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 130
    assert "continue with: autoresearch run --resume" in log.read_text()
    assert must(one(db, "SELECT status FROM runs"))["status"] == "interrupted"
    for job in rows(db, "SELECT backend_job_id FROM jobs WHERE backend_job_id IS NOT NULL"):
        assert session_members(int(job["backend_job_id"])) == []  # nothing runs unwatched
    resume(ws, log)
    exps = assert_invariants(ws, patches, log)
    exp = exps[patches["slowdown"]]
    jobs = rows(db, "SELECT status FROM jobs WHERE experiment_id = ? ORDER BY batch", [exp["id"]])
    assert jobs[0]["status"] == "lost" and exp["status"] == "discarded"


def test_kill_while_the_trees_are_prepared_then_resume(tmp_path: Path) -> None:
    """Killed after both worktrees exist but before their scripts and harness are in place: the
    resume prepares the folder again rather than measure it half-made (found by a CI run)."""
    ws, target = make_workspace(tmp_path)
    patches = queue(ws, target, ["speedup"])
    git_dir = subprocess.run(
        ["git", "-C", str(ws.mirror_path), "rev-parse", "--absolute-git-dir"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    hook = Path(git_dir) / "hooks" / "post-checkout"
    hook.parent.mkdir(exist_ok=True)
    # git runs the hook in the new worktree: the candidate's checkout lingers there.
    sleeper = tmp_path / "hook.pid"
    hook.write_text(f'#!/bin/sh\ncase "$PWD" in */{B_DIR}) echo $$ > {sleeper}; exec sleep 60;; esac\n')
    hook.chmod(0o755)
    log = tmp_path / "runner.log"
    proc = cli(ws, "--skip-self-test", "--no-final", log=log)
    candidate = wait_for(
        lambda: next(iter(ws.worktrees_dir.glob(f"run*/exp*/{B_DIR}/Makefile")), None),
        what="the candidate's checkout",
    )
    kill9(proc)
    hook.unlink()
    os.kill(int(wait_for(lambda: sleeper.read_text().strip(), what="the hook's pid")), signal.SIGKILL)
    trees = candidate.parent.parent
    assert (trees / A_DIR).is_dir() and not (trees / HARNESS_DIR).exists()
    resume(ws, log)
    found = assert_invariants(ws, patches, log)
    assert found[patches["speedup"]]["status"] != "crashed", log.read_text()[-3000:]
