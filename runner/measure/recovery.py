"""After a restart: reattach live jobs, remove what nothing refers to; leaving cleanly on interrupt."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import cast

from kb import gitrepo
from kb.db import transaction
from kb.store import experiments, jobs, run_records
from runner.fleet import JobRef
from runner.harness.prepare import (
    remove_workdir,
)
from runner.harness.protocol import LogParser
from runner.measure.common import (
    LIVE,
    ActiveJob,
)
from runner.measure.context import RunContext
from runner.measure.live import LiveJobs

# Jobs a fleet may still be running (or about to): a restarted runner reattaches them.
LIVE_JOBS = ("submitting", "running")


class Recovery:
    """A run taken over after its runner died, and a run left resumable when this process goes."""

    def __init__(self, ctx: RunContext, live: LiveJobs) -> None:
        self.ctx = ctx
        self.live = live

    def recover(self) -> None:
        """After a restart: reattach live jobs, clean what nothing refers to."""
        live_jobs = jobs.of_run(self.ctx.db, self.ctx.run_id, LIVE_JOBS)
        # The loop submits every job to a worker (jobs.worker_id is NULL only in the schema).
        refs = [
            JobRef(j.id, cast(int, j.worker_id), j.backend_job_id, Path(j.log_path), Path(j.job_dir))
            for j in live_jobs
        ]
        states = self.live.fleet.reattach(refs)
        reattached = 0
        for job, ref in zip(live_jobs, refs, strict=True):
            exp = self.ctx.exp(job.experiment_id)
            state = states.get(job.id)
            if state is not None and state.state == "lost" and state.detail == "never started":
                # The runner died between writing the row and starting the job: forget the row.
                with transaction(self.ctx.db):
                    jobs.forget(self.ctx.db, job.id)
                continue
            self.live.add(
                ActiveJob(
                    ref,
                    exp["id"],
                    job.batch,
                    job.nonce,
                    LogParser(job.nonce, range(job.pair_start, job.pair_start + job.pairs)),
                    job.parsed_lines,
                    job.deadline,
                )
            )
            reattached += 1
        # Worktrees of experiments that are over (or never were) go; so do stale git records.
        keep = set(experiments.ids_of_run(self.ctx.db, self.ctx.run_id, LIVE))
        removed = 0
        folder = self.ctx.ws.worktrees_dir / f"run{self.ctx.run_id}"
        if folder.exists():
            for child in sorted(folder.iterdir()):
                exp_number = child.name[3:] if child.name.startswith("exp") else ""
                if not exp_number.isdigit() or int(exp_number) not in keep:
                    remove_workdir(self.ctx.repo, child)
                    removed += 1
        gitrepo.run(self.ctx.repo, "worktree", "prune")
        self.ctx.event(
            "recovered",
            f"run {self.ctx.state.name}: {reattached} jobs reattached, {removed} orphaned worktrees removed",
            data={"reattached": reattached, "worktrees_removed": removed},
        )
        self.ctx.say(f"resumed: {reattached} jobs reattached, {removed} orphaned worktrees removed")

    def interrupt(self, error: str | None = None) -> None:
        """This process is going away: stop its jobs (a resume reruns their batches) and leave the
        run resumable."""
        for active in self.live:
            with contextlib.suppress(Exception):  # best effort on the way out
                self.live.fleet.cancel(active.ref)
        try:
            with transaction(self.ctx.db):
                run_records.update(self.ctx.db, self.ctx.run_id, {"status": "interrupted", "error": error})
                self.ctx.event(
                    "run_interrupted",
                    f"run {self.ctx.state.name} interrupted" + (f": {error}" if error else ""),
                    level="warning",
                )
        except Exception:  # noqa: BLE001
            pass
