"""One run per workspace: two `autoresearch run` started at the same instant, real processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kb.db import one, rows
from kb.errors import UserError
from runner.measure import runlock
from tests.runner.runner_target import make_workspace, must, queue

FAST = {"min_pairs": 6, "batch_pairs": 2, "max_pairs": 6, "self_test_pairs": 6}
REPO = Path(__file__).resolve().parents[2]


def cli(ws_root: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "tui.cli", "--workspace", str(ws_root), *args]


@pytest.mark.slow
def test_two_runs_started_together_one_runs_the_other_names_it(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, policy=FAST, fleet={"parallel": 1})
    queue(ws, target, ["slowdown"])
    argv = cli(ws.root, "run")
    procs = [
        subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 1], outputs
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    db = ws.db()
    (run,) = rows(db, "SELECT * FROM runs")  # exactly one run was created
    assert run["status"] == "finished" and run["pid"] == procs[winner].pid
    message = outputs[loser].strip().splitlines()
    assert message == [
        f"Error: run {run['name']} is going (pid {procs[winner].pid} on {socket.gethostname()}): "
        "wait for it, stop it, or use another workspace"
    ], outputs[loser]
    # The patch was measured once.
    assert must(one(db, "SELECT count(*) AS n FROM experiments WHERE kind = 'candidate'"))["n"] == 1
    assert not (ws.root / runlock.LOCK_NAME).read_text().strip()  # released: no holder recorded


def test_the_lock_is_the_processs_and_dies_with_it(tmp_path: Path) -> None:
    """Another process holds the lock: refused with its pid; killed with -9: the lock is free."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from runner.measure import runlock; "
            "lock = runlock.acquire(Path(sys.argv[1])); lock.record(7, 'r7'); print('held', flush=True); "
            "time.sleep(600)",
            str(tmp_path),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(UserError, match=rf"run r7 is going \(pid {holder.pid} on "):
            runlock.acquire(tmp_path)
        assert time.monotonic() - started < 1  # the holder named its run: no waiting
        info = json.loads((tmp_path / runlock.LOCK_NAME).read_text())
        assert info["pid"] == holder.pid and info["run"] == 7
    finally:
        holder.kill()
        holder.wait()
    lock = runlock.acquire(tmp_path, wait=0)
    assert json.loads((tmp_path / runlock.LOCK_NAME).read_text())["pid"] == os.getpid()
    again = runlock.acquire(tmp_path, wait=0)  # shared within this process, counted
    lock.release()
    again.release()
    assert not (tmp_path / runlock.LOCK_NAME).read_text().strip()


@pytest.mark.slow
def test_a_detached_run_holds_the_lock(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, policy=FAST, fleet={"parallel": 1})
    queue(ws, target, ["slowdown"])
    started = subprocess.run(
        cli(ws.root, "run", "--detach", "--json"), cwd=REPO, capture_output=True, text=True, check=True
    )
    info = json.loads(started.stdout)
    second = subprocess.run(cli(ws.root, "run"), cwd=REPO, capture_output=True, text=True)
    assert second.returncode == 1
    assert f"run {info['name']} is going (pid {info['pid']} on" in second.stdout + second.stderr
    deadline = time.monotonic() + 300
    db = ws.db()
    while time.monotonic() < deadline:
        run = must(one(db, "SELECT status FROM runs WHERE id = ?", [info["run"]]))
        if run["status"] == "finished":
            break
        time.sleep(0.2)
    assert run["status"] == "finished"
