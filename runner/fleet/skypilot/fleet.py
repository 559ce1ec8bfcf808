"""The SkyPilot fleet: experiment batches on SkyPilot clusters (clouds, Kubernetes, Slurm).

`SkyPilotFleet` is the `Fleet` the runner drives. It holds its parts, each an object of its own
module with its collaborators passed in (the package's `__init__` maps them), and only `sdk`
imports `sky`: `Teardown`, `CostMeter`, `Qualifier`, `Launcher`, `WorkerPool` (the clusters) and
`JobTracker` (the batches on them). `up`, `tick` and `down` here put them to work in order.

Workers are clusters, at most `fleet.skypilot.max_clusters` of a run at once, named
`ar-r<run>-<random>` and recorded in the `workers` table before anything is launched:

- A cluster is launched (`sky.launch`, launches `stagger_seconds` apart) with the rendered
  experiment template on a qualification tree (the baseline in both A and B), so it runs the
  template's `setup` once and its first job is an A/A calibration of `qualify_pairs` pairs. A
  cluster whose noise (the per-sample CV of a side, the larger one) exceeds `noise_limit` is downed
  and replaced, as are clusters that find no capacity (ResourcesUnavailableError), fail their setup
  or their calibration; `max_failures` of those in a row stop the run with the last reason.
- Batches go to qualified clusters with `sky.exec`: no setup again, the workdir (the experiment's
  own prepared tree) is synced. That sync only adds and updates files, so every job's `run` starts
  with a prelude that, when the cluster switches to another tree, deletes what the previous tree
  left behind: files missing from the manifest the fleet writes into the workdir, build stamps too.
- Slow SkyPilot calls are requests (launch, exec, job status, down): the fleet sends one, keeps its
  id (in the workers row, or `sky.json` in the job dir) and looks at it again on later polls and
  ticks, so the runner's loop never waits for a cluster. Only `cancel` (the job must be over when
  it returns), the log download at the end of a job (seconds) and `down()` at the end of a run wait.
- A job's log is the `tasks/run.log` that `download_logs` fetches (at the end of the job, and
  every minute while it runs), appended to the job's log path, which the runner parses exactly as a
  local job's. A job on a cluster that vanished (preempted, allocation gone) is `lost` and so is
  its worker; the runner then queues the experiment again.
- A qualified cluster idle for `idle_minutes` while nothing of its run is queued is downed; a new
  one is launched when work waits for workers again. `down()` downs them all.
- Cost: the price per hour (`price_per_hour`, else what SkyPilot reports for the launched
  resources) times the time since launch, kept in workers.cost_usd; an experiment is charged the
  time its jobs held their cluster (experiments.cost_usd). Once the run's `budget.usd` (VM and LLM
  cost together) is spent, nothing new is launched. `down()` takes `sky.cost_report`'s figure
  instead of the estimate wherever it reports one.
- After a restart (`run --resume`), `up()` checks the run's recorded clusters (vanished ones are
  `lost`) and downs clusters of runs that are no longer live; `reattach` finds the jobs again
  (those that finished meanwhile are collected by the next poll) and cancels what nobody tracks.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import sqlite_utils

from kb.db import now
from kb.store.tables import WorkerRow
from kb.workspace import Workspace
from runner.fleet.base import Fleet, JobRef, JobSpec, JobStatus, Worker
from runner.fleet.skypilot.common import TICK_SECONDS, FleetEvents, FleetScope
from runner.fleet.skypilot.costs import CostMeter
from runner.fleet.skypilot.jobs import JobTracker
from runner.fleet.skypilot.launch import Launcher
from runner.fleet.skypilot.pool import WorkerPool
from runner.fleet.skypilot.qualify import Qualifier
from runner.fleet.skypilot.tasks import (
    DEFAULT_ORIGIN,
    check_resources,
    for_cluster,
    resources_config,
    sky_task,
)
from runner.fleet.skypilot.teardown import DOWN_WAIT_SECONDS, Teardown


class SkyPilotFleet(Fleet):
    backend: ClassVar[str] = "skypilot"
    leaves_workers: ClassVar[bool] = True

    def __init__(self, ws: Workspace, db: sqlite_utils.Database, run_id: int, size: int) -> None:
        super().__init__(ws, db, run_id, size)
        self.conf = ws.settings.fleet.skypilot
        self.size = max(1, min(size, self.conf.max_clusters))
        scope = FleetScope(ws, db, run_id, self.records)
        self.events = FleetEvents(db, run_id)
        self.teardown = Teardown(scope, self.events)
        self.costs = CostMeter(scope)
        self.qualifier = Qualifier(scope, self.events, self.teardown)
        self.launcher = Launcher(scope, self.events, self.teardown, self.costs, self.qualifier)
        self.pool = WorkerPool(scope, self.size, self.events, self.launcher, self.teardown, self.costs)
        self.tracker = JobTracker(scope, self.events, self.teardown, self.costs)
        self._last_tick = 0.0
        self._closed = False

    @classmethod
    def preflight(cls, ws: Workspace) -> None:
        """The resources and the template, rendered and validated by SkyPilot, before any launch."""
        from runner.harness.prepare import template_path
        from runner.harness.template import load_template, render

        settings = ws.settings
        check_resources(settings.fleet.skypilot)
        path = template_path(ws, settings)
        template = load_template(path)
        with tempfile.TemporaryDirectory(prefix="autoresearch-preflight-") as tmp:
            rendered = render(
                template,
                name="ar-preflight",
                workdir=Path(tmp),
                envs={},
                resources_override=resources_config(settings.fleet.skypilot),
            )
            sky_task(for_cluster(rendered), str(path or DEFAULT_ORIGIN))

    def resources_override(self) -> dict[str, Any]:
        """The `fleet.skypilot` resources (infra, cpus, memory, accelerators) that are set."""
        return resources_config(self.conf)

    # -- workers -------------------------------------------------------------------------------

    def up(self) -> list[Worker]:
        self.preflight(self.ws)
        self.teardown.down_orphans()
        self.teardown.verify(self.workers())
        self.pool.fill()
        self.tick(force=True)
        return self.workers()

    def down(self) -> None:
        """Down every cluster of the run and wait until SkyPilot confirms (or the wait runs out)."""
        for worker in self.workers():
            self.teardown.down(worker.id, "down", "the run ended")
        self.teardown.wait(DOWN_WAIT_SECONDS)
        self.costs.update()
        self.costs.reconcile()
        self.qualifier.remove_tree()
        self._closed = True

    def tick(self, force: bool = False) -> None:
        if self._closed:
            return
        stamp = now()
        if not force and stamp - self._last_tick < TICK_SECONDS:
            return
        self._last_tick = stamp
        guarded = self.events.guarded
        guarded("teardowns", self.teardown.check)
        for worker in self.workers():
            if worker.status == "provisioning":
                guarded(worker.name, functools.partial(self.launcher.provision, worker))
            elif worker.status == "qualifying":
                guarded(worker.name, functools.partial(self.qualifier.check, worker))
        guarded("idle clusters", self.pool.idle_down)
        guarded("replacements", self.pool.replace)
        self.costs.update()
        self.pool.give_up_when_failing()

    # -- jobs ----------------------------------------------------------------------------------

    def submit(self, worker: Worker, spec: JobSpec) -> str:
        return self.tracker.submit(worker, spec)

    def poll(self, job: JobRef) -> JobStatus:
        return self.tracker.poll(job)

    def cancel(self, job: JobRef) -> None:
        self.tracker.cancel(job)

    def reattach(self, jobs: Sequence[JobRef]) -> dict[int, JobStatus]:
        return self.tracker.reattach(jobs)

    # -- outside a run (`autoresearch fleet`) --------------------------------------------------

    @classmethod
    def outside_statuses(cls, names: Sequence[str]) -> dict[str, str]:
        """SkyPilot's own status of these clusters (refreshed from the infra)."""
        from runner.fleet.skypilot.cli import cluster_statuses

        return cluster_statuses(names)

    @classmethod
    def down_recorded(
        cls, db: sqlite_utils.Database, worker_ids: Sequence[int], *, wait: float
    ) -> list[WorkerRow]:
        from runner.fleet.skypilot.cli import down_workers

        return down_workers(db, worker_ids, wait=wait)
