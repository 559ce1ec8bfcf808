"""The local fleet runs the rendered task as real process sessions, and kills them whole."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kb.db import insert, now
from kb.init import TargetSpec, create_workspace
from kb.workspace import Workspace
from runner.fleet import Fleet, JobRef, JobSpec, JobStatus, make_fleet
from runner.fleet.local import LocalFleet, _cmdline, session_members
from runner.harness.template import render

TEMPLATE: dict[str, Any] = {
    "name": "t",
    "workdir": ".",
    "envs": {
        "EXPERIMENT_ID": "0",
        "EXPERIMENT_DESC": "",
        "BUILD_CMD": "",
        "BUILD_TIMEOUT": "1",
        "BENCH_TIMEOUT": "1",
        "CHECK_TIMEOUT": "1",
    },
    "setup": "echo SETUP-RAN in $(pwd)\n",
    "run": "echo RUN id=$EXPERIMENT_ID rank=$SKYPILOT_NODE_RANK pwd=$(pwd)\n",
}


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    from tests.runner.runner_target import git

    target = tmp_path / "target"
    target.mkdir()
    git(target, "init", "-q", "-b", "main")
    (target / "f").write_text("x\n")
    git(target, "add", "-A")
    git(target, "commit", "-q", "-m", "base")
    return create_workspace(tmp_path / "ws", TargetSpec(location=str(target)))


def new_run(ws: Workspace) -> int:
    db = ws.db()
    return insert(db, "runs", {"name": f"r{time.monotonic_ns()}", "status": "running", "started_at": now()})


def spec(ws: Workspace, job_id: int, run: str, workdir: Path, **envs: object) -> JobSpec:
    config = {**TEMPLATE, "run": run}
    task = render(config, name=f"job{job_id}", workdir=workdir, envs={"EXPERIMENT_ID": job_id, **envs})
    folder = ws.logs_dir / "run1" / f"exp{job_id}"
    return JobSpec(job_id, job_id, 0, task, folder / "batch-0.log", folder / "jobs" / "batch-0")


def ref(s: JobSpec, worker_id: int, backend_id: str | None) -> JobRef:
    return JobRef(s.job_id, worker_id, backend_id, s.log_path, s.job_dir)


def wait(fleet: Fleet, job: JobRef, timeout: float = 20.0) -> JobStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = fleet.poll(job)
        if status.terminal:
            return status
        time.sleep(0.02)
    raise AssertionError(f"job {job.job_id} did not end")


def test_jobs_run_the_rendered_task_and_setup_once_per_worker(ws: Workspace, tmp_path: Path) -> None:
    run_id = new_run(ws)
    fleet = make_fleet("local", ws, ws.db(), run_id, 2)
    workers = fleet.up()
    assert [w.name for w in workers] == ["local-1", "local-2"]
    assert len(fleet.up()) == 2  # idempotent: a resumed runner reuses the rows
    workdir = tmp_path / "wd"
    workdir.mkdir()
    first = spec(ws, 1, TEMPLATE["run"], workdir)
    job = ref(first, workers[0].id, fleet.submit(workers[0], first))
    assert wait(fleet, job) == JobStatus("succeeded", 0)
    log = first.log_path.read_text()
    assert f"SETUP-RAN in {workdir}" in log
    assert f"RUN id=1 rank=0 pwd={workdir}" in log
    saved = yaml.safe_load((first.job_dir / "task.yaml").read_text())
    assert saved["envs"]["EXPERIMENT_ID"] == "1" and saved["run"] == TEMPLATE["run"]
    second = spec(ws, 2, TEMPLATE["run"], workdir)
    job2 = ref(second, workers[0].id, fleet.submit(workers[0], second))
    assert wait(fleet, job2).state == "succeeded"
    assert "SETUP-RAN" not in second.log_path.read_text()  # the worker was set up already
    third = spec(ws, 3, "exit 3\n", workdir)
    job3 = ref(third, workers[1].id, fleet.submit(workers[1], third))
    assert wait(fleet, job3) == JobStatus("failed", 3)
    fleet.down()
    assert fleet.workers() == []


def test_setup_failure_is_reported(ws: Workspace, tmp_path: Path) -> None:
    fleet = make_fleet("local", ws, ws.db(), new_run(ws), 1)
    (worker,) = fleet.up()
    s = spec(ws, 1, "echo never\n", tmp_path)
    s = JobSpec(
        s.job_id,
        s.experiment_id,
        0,
        render({**TEMPLATE, "setup": "exit 4\n"}, name="x", workdir=tmp_path, envs={}),
        s.log_path,
        s.job_dir,
    )
    status = wait(fleet, ref(s, worker.id, fleet.submit(worker, s)))
    assert status == JobStatus("failed", 4, "setup failed")
    assert "never" not in s.log_path.read_text()


# Children in process groups of their own (as `timeout` makes), and one that outlives its parent.
SPAWNER = """
timeout 100 sleep 4301 &
(set -m; sleep 4302 & wait) &
bash -c 'sleep 4303 & wait' &
echo spawned
wait
"""


def test_cancel_kills_the_whole_session(ws: Workspace, tmp_path: Path) -> None:
    fleet = make_fleet("local", ws, ws.db(), new_run(ws), 1)
    (worker,) = fleet.up()
    s = spec(ws, 1, SPAWNER, tmp_path)
    job = ref(s, worker.id, fleet.submit(worker, s))
    pid = int(job.backend_job_id or 0)
    deadline = time.monotonic() + 10
    while len(session_members(pid)) < 6 and time.monotonic() < deadline:
        time.sleep(0.02)
    groups = {
        int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[2]) for p in session_members(pid)
    }
    assert len(groups) >= 2, "the test needs children outside the job's own process group"
    fleet.cancel(job)
    assert session_members(pid) == []
    assert fleet.poll(job).state == "lost"  # no exit code: the wrapper was killed


def test_leftovers_of_a_finished_job_are_killed(ws: Workspace, tmp_path: Path) -> None:
    fleet = make_fleet("local", ws, ws.db(), new_run(ws), 1)
    (worker,) = fleet.up()
    s = spec(ws, 1, "(set -m; sleep 4300 &)\necho done\n", tmp_path)
    job = ref(s, worker.id, fleet.submit(worker, s))
    assert wait(fleet, job).state == "succeeded"
    assert session_members(int(job.backend_job_id or 0)) == []


def test_a_restarted_runner_reattaches_and_kills_unknown_jobs(ws: Workspace, tmp_path: Path) -> None:
    run_id = new_run(ws)
    first = make_fleet("local", ws, ws.db(), run_id, 2)
    w1, w2 = first.up()
    known = spec(ws, 1, "sleep 0.5\necho finished\n", tmp_path)
    unknown = spec(ws, 2, "sleep 4300\n", tmp_path)
    first.submit(w1, known)
    stray = int(first.submit(w2, unknown))
    # Under load the stray may not have exec'd its job script yet; the restart happens later.
    deadline = time.monotonic() + 10
    while not any(arg.endswith("job.sh") for arg in _cmdline(stray)) and time.monotonic() < deadline:
        time.sleep(0.02)
    # A new runner process: it knows job 1 only from the database, without its pid (as when the
    # runner died between starting the job and recording it); job 2 it does not know at all.
    second = make_fleet("local", ws, ws.db(), run_id, 2)
    job = ref(known, w1.id, None)
    states = second.reattach([job])
    assert states[1].state == "running"
    assert session_members(stray) == []
    assert wait(second, job) == JobStatus("succeeded", 0)
    assert "finished" in known.log_path.read_text()
    assert isinstance(first, LocalFleet)
    first._children.clear()  # the old runner's handles: it is gone in real life


def test_unknown_backend() -> None:
    from kb.errors import UserError

    with pytest.raises(UserError, match="must be one of"):
        make_fleet("cloud", Workspace(Path("/nonexistent")), None, 1, 1)  # type: ignore[arg-type]


def test_no_job_process_survives(ws: Workspace) -> None:
    """Guard for the module: nothing started above is still running."""
    mine = [p for p in os.listdir("/proc") if p.isdigit()]
    for pid in mine:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        # The durations are this module's own (43xx s): an unrelated `sleep` on the machine is no match.
        assert not re.search(rb"sleep 43\d\d\b", cmdline.replace(b"\0", b" ")), cmdline
