"""The SkyPilot fleet: experiment batches on SkyPilot clusters (clouds, Kubernetes, Slurm).

`SkyPilotFleet` is the `Fleet` the runner drives: `up`, `tick` and `down` here; each concern below
is a mixin of its own module (the package's `__init__` maps them), and only `sdk` imports `sky`.

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
from pathlib import Path

from kb.db import now
from kb.workspace import Workspace
from runner.fleet.base import Worker
from runner.fleet.skypilot.jobs import JobsMixin
from runner.fleet.skypilot.scaling import ScalingMixin
from runner.fleet.skypilot.state import TICK_SECONDS
from runner.fleet.skypilot.tasks import (
    DEFAULT_ORIGIN,
    check_resources,
    for_cluster,
    resources_config,
    sky_task,
)
from runner.fleet.skypilot.teardown import DOWN_WAIT_SECONDS


class SkyPilotFleet(JobsMixin, ScalingMixin):
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

    # -- workers -------------------------------------------------------------------------------

    def up(self) -> list[Worker]:
        self.preflight(self.ws)
        self._down_orphans()
        self._verify(self.workers())
        live = self.workers()
        start = max(now(), self._next_launch_at())
        for n in range(self.size - len(live)):
            self._new_worker(start + n * self.conf.stagger_seconds)
        self.tick(force=True)
        return self.workers()

    def down(self) -> None:
        """Down every cluster of the run and wait until SkyPilot confirms (or the wait runs out)."""
        for worker in self.workers():
            self._teardown(worker.id, "down", "the run ended")
        self._wait_teardowns(DOWN_WAIT_SECONDS)
        self._costs()
        self._reconcile_costs()
        if self.qualify_dir.exists():
            from runner.harness.prepare import remove_workdir

            remove_workdir(self._repo(), self.qualify_dir)
        self._closed = True

    def tick(self, force: bool = False) -> None:
        if self._closed:
            return
        stamp = now()
        if not force and stamp - self._last_tick < TICK_SECONDS:
            return
        self._last_tick = stamp
        self._guarded("teardowns", self._check_teardowns)
        for worker in self.workers():
            if worker.status == "provisioning":
                self._guarded(worker.name, functools.partial(self._provision, worker))
            elif worker.status == "qualifying":
                self._guarded(worker.name, functools.partial(self._qualify, worker))
        self._guarded("idle clusters", self._idle_down)
        self._guarded("replacements", self._replace)
        self._costs()
        self._give_up_when_failing()
