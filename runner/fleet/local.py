"""The local fleet: K slots on this machine, each running jobs as real process sessions.

A job is the rendered task run exactly as SkyPilot would run it: `setup` (before a slot's first
job) then `run`, with the task's envs, in the task's workdir. Each job starts a new session
(`setsid`), so it survives the runner being killed (and the restarted runner reattaches to it),
and cancel or a timeout can kill everything it started: the run script's `timeout` makes process
groups of its own, so whole sessions are killed, not just one group.

Files in the job dir: job.sh (the wrapper), setup.sh, run.sh, task.yaml (the rendered task), pid
(written by the job itself, so a job is findable even if the runner died right after starting it),
exit_code (written when it ends) and setup_failed (when setup exited non-zero).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import sqlite_utils

from kb.workspace import Workspace
from runner.fleet.base import Fleet, JobRef, JobSpec, JobStatus, Worker
from runner.harness.template import RenderedTask

WRAPPER = """#!/usr/bin/env bash
# Written by the autoresearch local fleet. $1: job dir, $2: workdir. Runs the rendered task's setup
# (present only for a slot's first job) and run, in the workdir, like a SkyPilot job.
echo "$$" > "$1/pid"
rc=0
cd "$2" || rc=97
if [ "$rc" -eq 0 ] && [ -f "$1/setup.sh" ]; then
  bash "$1/setup.sh" || rc=$?
  if [ "$rc" -ne 0 ]; then echo "$rc" > "$1/setup_failed"; echo "setup failed (exit $rc)"; fi
fi
if [ "$rc" -eq 0 ]; then bash "$1/run.sh" || rc=$?; fi
echo "$rc" > "$1/exit_code.tmp" && mv -f "$1/exit_code.tmp" "$1/exit_code"
exit "$rc"
"""


def start_job(
    task: RenderedTask,
    job_dir: Path,
    log_path: Path,
    *,
    setup: bool,
    task_id: str,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """One rendered task started as a job on this machine, the one way the local fleet and
    `validate` start a job: the wrapper, setup.sh (only when `setup` and the task has one), run.sh
    and task.yaml in `job_dir`, a session of its own, its output appended to `log_path`, and the
    environment a one-node SkyPilot job sees."""
    job_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("pid", "exit_code", "setup_failed", "setup.sh"):
        (job_dir / stale).unlink(missing_ok=True)
    wrapper = job_dir / "job.sh"
    wrapper.write_text(WRAPPER, encoding="utf-8")
    (job_dir / "run.sh").write_text(task.run, encoding="utf-8")
    (job_dir / "task.yaml").write_text(task.to_yaml(), encoding="utf-8")
    if setup and task.setup.strip():
        (job_dir / "setup.sh").write_text(task.setup, encoding="utf-8")
    environment = {
        **os.environ,
        **task.envs,
        # What a one-node SkyPilot job sees, so scripts can rely on it on both backends.
        "SKYPILOT_NODE_RANK": "0",
        "SKYPILOT_NUM_NODES": "1",
        "SKYPILOT_TASK_ID": task_id,
        **(env or {}),
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            ["bash", str(wrapper), str(job_dir), str(task.workdir)],
            cwd=job_dir,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


class LocalFleet(Fleet):
    backend = "local"

    def __init__(self, ws: Workspace, db: sqlite_utils.Database, run_id: int, size: int) -> None:
        super().__init__(ws, db, run_id, size)
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # -- workers -------------------------------------------------------------------------------

    def up(self) -> list[Worker]:
        existing = self.workers()
        for number in range(len(existing) + 1, self.size + 1):
            self._add_worker(
                f"local-{number}",
                status="ready",
                resources={"cpus": os.cpu_count(), "host": os.uname().nodename},
            )
        return self.workers()

    def machine_lock(self) -> Path | None:
        """The file the template's `machine` locks (experiment.yaml): with more than one slot, each
        pair holds it alone, builds and checks share it, so no worker's step runs on this machine
        during another's pair. None with one slot or `fleet.exclusive_pairs = false`."""
        if self.size < 2 or not self.ws.settings.fleet.exclusive_pairs:
            return None
        return self.ws.logs_dir / "machine.lock"

    def sharing(self) -> int:
        return self.size if self.machine_lock() is not None else 1

    def down(self) -> None:
        for child in list(self._children.values()):
            if child.poll() is None:
                kill_session(child.pid)
                child.wait()
        self._children.clear()
        for worker in self.workers():
            self._set_worker(worker.id, status="down")

    # -- jobs ----------------------------------------------------------------------------------

    def submit(self, worker: Worker, spec: JobSpec) -> str:
        lock = self.machine_lock()
        child = start_job(
            spec.task,
            spec.job_dir,
            spec.log_path,
            setup=not self._worker_meta(worker.id).get("setup_done"),
            task_id=f"autoresearch-local-{spec.job_id}",
            env={"AR_MACHINE_LOCK": str(lock)} if lock is not None else None,
        )
        self._children[child.pid] = child
        self._set_worker(worker.id, status="busy")
        return str(child.pid)

    def poll(self, job: JobRef) -> JobStatus:
        pid = self._pid(job)
        if pid is None:
            return JobStatus("lost", detail="never started")
        if _read_int(job.job_dir / "exit_code") is None and self._alive(pid, job):
            return JobStatus("running")
        # The wrapper has ended; anything it left behind in its session goes too.
        kill_session(pid)
        self._reap(pid)
        exit_code = _read_int(job.job_dir / "exit_code")
        self._set_worker(job.worker_id, status="ready")
        if exit_code is None:
            return JobStatus("lost", detail="the job's process vanished without an exit code")
        setup_rc = _read_int(job.job_dir / "setup_failed")
        if setup_rc is not None:
            return JobStatus("failed", setup_rc, "setup failed")
        if (job.job_dir / "setup.sh").exists():
            meta = self._worker_meta(job.worker_id)
            if not meta.get("setup_done"):
                self._set_worker(job.worker_id, meta={**meta, "setup_done": True})
        return JobStatus("succeeded" if exit_code == 0 else "failed", exit_code)

    def cancel(self, job: JobRef) -> None:
        pid = self._pid(job)
        if pid is not None:
            kill_session(pid)
            self._reap(pid)
        self._set_worker(job.worker_id, status="ready")

    def reattach(self, jobs: Sequence[JobRef]) -> dict[int, JobStatus]:
        states: dict[int, JobStatus] = {}
        known: set[int] = set()
        for job in jobs:
            pid = self._pid(job, wait=1.0)
            if pid is not None:
                known.add(pid)
            states[job.job_id] = self.poll(job)
        # Jobs of this run that the database does not know as live (a runner killed between
        # starting a job and recording it, a cancelled experiment): nothing of theirs survives.
        prefix = str(self.ws.logs_dir / f"run{self.run_id}") + os.sep
        for pid, cmdline in _processes():
            if pid in known or pid != _session_of(pid):
                continue
            if len(cmdline) >= 2 and cmdline[1].startswith(prefix) and cmdline[1].endswith("job.sh"):
                kill_session(pid)
        return states

    # -- internals -----------------------------------------------------------------------------

    def _pid(self, job: JobRef, wait: float = 0.0) -> int | None:
        if job.backend_job_id:
            return int(job.backend_job_id)
        # Started but not recorded (the runner died in between): the job wrote its own pid.
        deadline = time.monotonic() + wait
        while True:
            pid = _read_int(job.job_dir / "pid")
            if pid is not None or time.monotonic() >= deadline:
                return pid
            time.sleep(0.05)

    def _alive(self, pid: int, job: JobRef) -> bool:
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        # Not our child (we restarted): it must still be this job's wrapper, not a reused pid.
        cmdline = _cmdline(pid)
        return (
            bool(cmdline)
            and _state(pid) not in ("Z", "X", None)
            and any(arg == str(job.job_dir / "job.sh") for arg in cmdline)
        )

    def _reap(self, pid: int) -> None:
        child = self._children.pop(pid, None)
        if child is not None:
            child.wait()


# --- processes (Linux /proc) ---------------------------------------------------------------------


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
    return raw[raw.rfind(")") + 2 :].split()


def _state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _session_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[3]) if fields else None


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _processes() -> Iterator[tuple[int, list[str]]]:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            yield int(entry.name), _cmdline(int(entry.name))


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`."""
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            found.append(int(entry.name))
    return found


def kill_session(sid: int, timeout: float = 5.0) -> bool:
    """SIGKILL every process of the session until none is left; True when it is empty."""
    deadline = time.monotonic() + timeout
    while True:
        members = session_members(sid)
        if not members:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
