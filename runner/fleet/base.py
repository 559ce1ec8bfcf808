"""The fleet interface: where experiment batches run (local processes, SkyPilot clusters).

The runner talks to a fleet only through `Fleet`, single-threaded, from its polling loop:

- `up()` brings the run's workers up once (SkyPilot: clusters; local: slots) and records them in the
  `workers` table; a worker then runs many jobs, one at a time. `down()` tears them down at the end.
- `submit(worker, spec)` starts one job: the rendered task of one batch of A/B pairs of one
  experiment (the A/B loop lives in the task's `run` script). The first job on a worker also runs
  the task's `setup`. It must return quickly (seconds): slow provisioning continues in the
  background and `poll` reports `pending` meanwhile. More pairs for the same experiment is another
  job on the same worker (its trees are built there).
- `poll(job)` brings the job's output up to date in `spec.log_path` (appending; a local job writes
  there directly, a remote one is downloaded or tailed into it) and returns its state. The runner
  parses that file. Polls may be rate-limited inside the fleet: return the last state when asked
  too often.
- `cancel(job)` stops a job and everything it started.
- `reattach(jobs)` is called once after a runner restart, with the jobs the database says are live:
  report each one's state, and clean up what the fleet finds running that is not in the list.
- `tick()` is called by the runner's loop every few seconds, whatever else happens: a fleet whose
  workers come and go in the background (SkyPilot: staggered launches, qualification, idle
  clusters downed, costs) advances that work there, without blocking.
- `preflight(ws)` (a classmethod) checks the configuration before a run is created, so a malformed
  template or resource spec is a one-line error before anything launches.

Nothing lives only in memory: everything needed to find a job again is in the `jobs` row
(`backend_job_id`, `log_path`, `job_dir`) and the `workers` row (`name`, `meta`).

Notes for remote backends (SkyPilot):
- The runner gives a new experiment to a worker whose row is `ready` or `busy` and that no running
  experiment holds. A backend that provisions in the background keeps its rows `provisioning`
  (from its own thread, with its own `ws.db()` connection) and turns them `ready` when usable.
- The value `submit` returns is stored in `jobs.backend_job_id`; a backend that learns the real id
  later (after `sky.launch` resolves) writes that column itself (`spec.job_id` is the row's id).
- `log_path` must only grow (the runner reads from the offset it reached): append, or rewrite
  the file with the whole log so far (e.g. a downloaded `run.log`).
- The task's `workdir` is the experiment's folder (trees `a/` and `b/` with the scripts placed),
  different for every experiment; build stamps in the run script are per experiment, but a
  remote workdir shared by successive experiments should still be emptied between them.
- Timeouts and the job deadline are the runner's: it calls `cancel` when a job runs too long.
- `cost_usd()` sums `workers.cost_usd`, which the backend keeps current; `--budget-usd` reads it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import sqlite_utils

from kb.db import now
from kb.jsoncol import decoded_dict
from kb.store import workers as store
from kb.store.tables import WorkerRow
from kb.workspace import Workspace
from runner.harness.template import RenderedTask

JobState = Literal["pending", "running", "succeeded", "failed", "cancelled", "lost"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "lost"})


@dataclass(frozen=True)
class Worker:
    id: int
    """workers.id"""
    name: str
    backend: str
    status: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobSpec:
    """One batch of one experiment, to run on one worker."""

    job_id: int
    """The runner's jobs.id."""
    experiment_id: int
    batch: int
    task: RenderedTask
    log_path: Path
    """Where the job's combined stdout and stderr must appear (appended as it comes)."""
    job_dir: Path
    """A scratch folder for this job on the runner's machine (wrapper scripts, downloads)."""


@dataclass(frozen=True)
class JobRef:
    """A submitted job as the jobs table stores it: enough to find it again after a restart."""

    job_id: int
    worker_id: int
    backend_job_id: str | None
    log_path: Path
    job_dir: Path


@dataclass(frozen=True)
class JobStatus:
    state: JobState
    exit_code: int | None = None
    detail: str = ""
    """Why, when not obvious: `setup failed`, `process vanished`, the backend's own status."""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


class Fleet(ABC):
    """Where jobs run. One instance per runner process and run."""

    backend: ClassVar[str]

    def __init__(self, ws: Workspace, db: sqlite_utils.Database, run_id: int, size: int) -> None:
        self.ws = ws
        self.db = db
        self.run_id = run_id
        self.size = size

    @classmethod  # noqa: B027 - an optional hook: nothing to check by default
    def preflight(cls, ws: Workspace) -> None:
        """Check the workspace's settings for this backend; raise UserError naming what is wrong."""

    def sharing(self) -> int:
        """Workers that take turns on one machine for their pairs (the local fleet's machine lock):
        a job may wait that many times its own length, which its deadline allows. 1: none."""
        return 1

    def tick(self) -> None:  # noqa: B027 - optional hook
        """Advance background work (provisioning, qualification, idle shutdown, costs); quick."""

    # -- workers -------------------------------------------------------------------------------

    @abstractmethod
    def up(self) -> list[Worker]:
        """Bring `size` workers up (reusing this run's live ones after a restart); return them."""

    @abstractmethod
    def down(self) -> None:
        """Tear every worker of this run down (after fetching what the runner still needs)."""

    def workers(self) -> list[Worker]:
        """This run's workers that are not down."""
        return [_worker(row) for row in store.up_of_run(self.db, self.run_id, self.backend)]

    # -- jobs ----------------------------------------------------------------------------------

    @abstractmethod
    def submit(self, worker: Worker, spec: JobSpec) -> str:
        """Start the job; return the backend's id for it (stored in jobs.backend_job_id)."""

    @abstractmethod
    def poll(self, job: JobRef) -> JobStatus:
        """Refresh job.log_path and report the job's state."""

    @abstractmethod
    def cancel(self, job: JobRef) -> None:
        """Stop the job and everything it started; idempotent."""

    @abstractmethod
    def reattach(self, jobs: Sequence[JobRef]) -> dict[int, JobStatus]:
        """After a runner restart: the state of each job (by job_id); clean up unknown leftovers."""

    def cost_usd(self) -> float:
        """What this run's workers cost so far (kept current in workers.cost_usd by the fleet)."""
        return store.cost_of_run(self.db, self.run_id)

    # -- helpers for backends ------------------------------------------------------------------

    def _add_worker(
        self,
        name: str,
        *,
        status: str = "provisioning",
        resources: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None,
        price_per_hour: float | None = None,
    ) -> Worker:
        wid = store.create(
            self.db,
            {
                "run_id": self.run_id,
                "name": name,
                "backend": self.backend,
                "status": status,
                "resources": resources,
                "meta": meta or {},
                "price_per_hour": price_per_hour,
                "started_at": now(),
            },
        )
        return Worker(wid, name, self.backend, status, dict(meta or {}))

    def _set_worker(self, worker_id: int, **values: Any) -> None:
        if values.get("status") in ("down", "lost", "failed"):
            values.setdefault("ended_at", now())
        store.update(self.db, worker_id, values)

    def _worker_meta(self, worker_id: int) -> dict[str, Any]:
        row = store.row(self.db, worker_id)
        return _meta(row["meta"] if row else None)


def _meta(raw: str | None) -> dict[str, Any]:
    return decoded_dict(raw)


def _worker(row: WorkerRow) -> Worker:
    return Worker(row["id"], row["name"], row["backend"], row["status"], _meta(row["meta"]))
