"""The scheduler: moves the experiments of a wave (or the final stage) on, one step at a time."""

from __future__ import annotations

import contextlib
import errno
import shutil
import sqlite3
import time

from kb import gitrepo
from kb.db import now, transaction
from kb.dbtx import abandon
from kb.errors import UserError
from kb.store import experiments, hypotheses, jobs, run_records
from kb.store.tables import ExperimentRow, PatchRow
from runner.fleet import Worker
from runner.harness import patchpaths
from runner.harness.prepare import (
    DoesNotApply,
    commit_candidate,
    is_prepared,
    prepare_workdir,
)
from runner.measure.common import (
    FINAL,
    RunFailed,
)
from runner.measure.context import RunContext
from runner.measure.decide import Decider
from runner.measure.jobs import JobRunner
from runner.measure.lifecycle import Lifecycle
from runner.measure.live import LiveJobs
from runner.measure.steering import Steering


class Scheduler:
    """Moves the experiments of a wave (or of the final stage) on, one step at a time: a worker
    for each queued one, its candidate commit (rebased by a three-way merge when a winner moved
    the baseline) and trees, its batches, and a look of the judge after each."""

    def __init__(
        self,
        ctx: RunContext,
        live: LiveJobs,
        lifecycle: Lifecycle,
        decider: Decider,
        jobs: JobRunner,
        steering: Steering,
    ) -> None:
        self.ctx = ctx
        self.live = live
        self.lifecycle = lifecycle
        self.decider = decider
        self.jobs = jobs
        self.steering = steering

    def drive(self, exp_ids: list[int], family: int | None = None) -> None:
        """Run these experiments to a final status. `family` (a wave id) shares the FDR control."""
        ids = set(exp_ids)
        while True:
            try:
                done, progressed = self._drive_once(ids, family)
            except (sqlite3.OperationalError, OSError) as exc:
                if not disk_full(exc) or not self._disk_full(ids):
                    raise
                continue
            if done:
                return
            if not progressed:
                time.sleep(self.ctx.poll_interval if len(self.live) else 4 * self.ctx.poll_interval)

    def _drive_once(self, ids: set[int], family: int | None) -> tuple[bool, bool]:
        """One round of `_drive` (`ids` grows by the retries): (all done, something happened)."""
        self.steering.housekeeping()
        progressed = False
        for active in self.live:
            if active.ref.job_id not in self.live.jobs:
                continue  # ended while another job was polled
            if active.experiment_id in ids or self.ctx.exp(active.experiment_id)["status"] in FINAL:
                progressed |= self.jobs.poll(active, family)
        # Requeued retries join the family they were created for.
        if family is not None:
            ids.update(experiments.ids_in_wave(self.ctx.db, family))
        live = experiments.live_among(self.ctx.db, sorted(ids))
        if not live and not any(a.experiment_id in ids for a in self.live):
            return True, progressed
        for exp in live:
            if self.live.has(exp["id"]):
                continue
            progressed |= self._advance(exp, family)
        return False, progressed

    def _disk_full(self, ids: set[int]) -> bool:
        """The disk filled up while these experiments ran: a step may write its tree full, and the
        trees share the workspace's file system with the database and the logs. The space comes
        back first, with no write of the runner's: every job stops and the trees of every live
        experiment go. Then each of them ends `crashed` (a benign one beside the culprit too: never
        a win). False when there was nothing to free: the disk is full for another reason."""
        abandon(self.ctx.db)
        live = [e["id"] for e in experiments.live_among(self.ctx.db, sorted(ids))]
        suspects = sorted(
            {a.experiment_id for a in self.live} | {e for e in live if self.ctx.exp_dir(e).exists()}
        )
        if not suspects:
            return False
        for active in self.live:
            # It kills the job, then marks the worker ready: that write may fail yet (done again below).
            with contextlib.suppress(sqlite3.OperationalError, OSError):
                self.live.fleet.cancel(active.ref)
        for exp_id in suspects:
            shutil.rmtree(self.ctx.exp_dir(exp_id), ignore_errors=True)
        with contextlib.suppress(UserError):
            gitrepo.run(self.ctx.repo, "worktree", "prune")  # the mirror's records of those trees
        for exp_id in suspects:
            phase = self.ctx.exp(exp_id)["phase"]
            self.lifecycle.finish(
                exp_id,
                "crashed",
                "build" if phase in ("setup", "build") else "benchmark",
                detail="the disk filled up while it ran (its trees share the workspace's file system); "
                "its job was stopped and its trees removed",
            )
        self.ctx.say(f"the disk filled up: {len(suspects)} experiments stopped, their trees removed")
        return True

    def _idle_worker(self) -> Worker | None:
        busy = experiments.busy_workers(self.ctx.db, self.ctx.run_id)
        for worker in self.live.fleet.workers():
            if worker.id not in busy and worker.status in ("ready", "busy"):
                return worker
        return None

    def _advance(self, exp: ExperimentRow, family: int | None) -> bool:
        """Move an experiment with no live job one step on; True when something happened."""
        if exp["status"] == "queued":
            if self.ctx.state.stopping:
                self.lifecycle.finish(exp["id"], "cancelled", "stopped")
                return True
            if self.ctx.state.spent:
                self.lifecycle.finish(exp["id"], "cancelled", "budget", detail=self.ctx.state.spent.words)
                return True
            if self.ctx.state.paused:
                return False
            worker = self._idle_worker()
            if worker is None:
                return False
            if not self._prepare(exp, worker):
                return True
            self.jobs.submit(self.ctx.exp(exp["id"]), worker)
            return True
        # running, between batches (or just recovered)
        worker = self._worker_of(exp)
        batches = jobs.of_experiment(self.ctx.db, exp["id"])
        last = batches[-1] if batches else None
        if self.ctx.state.stopping:
            self.lifecycle.finish(exp["id"], "cancelled", "stopped")
            return True
        if self.ctx.state.spent and last is not None:
            if exp["kind"] == "self_test":
                self.lifecycle.finish(exp["id"], "cancelled", "budget", detail=self.ctx.state.spent.words)
                return True
            with transaction(self.ctx.db):
                final = self.decider.decide(exp["id"], family, force_final=True)
            if final:
                self.lifecycle.cleanup(exp["id"])
            return True
        if self.ctx.state.paused:
            return False
        if worker is None:
            self.lifecycle.lose(exp, "its worker is gone")
            return True
        trees = self.ctx.exp_dir(exp["id"])
        if not is_prepared(trees):
            if last is not None and last.status != "lost":
                # Built trees held between batches are gone: the pairs so far cannot go on.
                self.lifecycle.lose(exp, "its trees are gone")
                return True
            if not self._prepare(exp, worker):
                return True
        self.jobs.submit(self.ctx.exp(exp["id"]), worker)
        return True

    def _worker_of(self, exp: ExperimentRow) -> Worker | None:
        for worker in self.live.fleet.workers():
            if worker.id == exp["worker_id"]:
                return worker
        return None

    def _rebase(self, exp: ExperimentRow, patch: PatchRow, baseline: str, error: str) -> str | None:
        """A patch that does not apply onto this baseline. When it applies onto the tree it was
        written for (its base_commit, else the run's original baseline) and a winner moved the
        baseline since, a three-way merge rebases it (the candidate, measured as usual); a real
        conflict ends the experiment `conflict`, naming the winner, and its hypothesis waits as
        `needs_port` (the autopilot's patch writer ports it). Otherwise the patch itself is broken:
        `crashed (does_not_apply)`. None when the experiment ended here."""
        from kb import gitrepo
        from runner.hypotheses import mark_conflict

        exp_id = exp["id"]
        written_for = patch["base_commit"] or self.ctx.state.baseline
        try:
            own = commit_candidate(self.ctx.repo, written_for, patch["diff"], exp["title"])
        except DoesNotApply:
            own = None
        if own is None or written_for == baseline:
            self.lifecycle.finish(exp_id, "crashed", "does_not_apply", detail=error)
            return None
        merged = gitrepo.three_way(self.ctx.repo, baseline, patch["diff"], commit=own)
        if merged.diff is not None:
            try:
                candidate = commit_candidate(self.ctx.repo, baseline, merged.diff, exp["title"])
            except DoesNotApply:
                candidate = None
            if candidate is not None:
                self.ctx.merge_meta(exp_id, {"rebased_from": written_for})
                self.ctx.event(
                    "experiment_rebased",
                    f"experiment {exp_id}: rebased onto {baseline[:12]} by a three-way merge "
                    f"(written for {written_for[:12]})",
                    exp_id=exp_id,
                )
                return candidate
        winner = self._winner_in_the_way(written_for, baseline, merged.conflicts)
        reason = f"conflicts with {winner}" if winner else "conflicts with the winners since its baseline"
        where = f" in {', '.join(merged.conflicts[:5])}" if merged.conflicts else ""
        said = (merged.error or error).strip().splitlines()
        detail = f"a three-way merge{where or ''} failed" + (f": {said[-1][:300]}" if said else "")
        with transaction(self.ctx.db):
            mark_conflict(self.ctx.db, patch["id"], f"{reason}{where}\n{merged.error or error}")
            self.lifecycle.finish(exp_id, "conflict", reason[:200], detail=detail, cleanup=False)
        self.lifecycle.cleanup(exp_id)
        return None

    def _winner_in_the_way(self, base: str, head: str, paths: list[str]) -> str | None:
        """The latest winner between `base` and `head` that touched these paths (else the latest)."""
        from kb import gitrepo

        shas = gitrepo.run(self.ctx.repo, "log", "--format=%H", f"{base}..{head}", "--", *paths).split()
        shas = shas or gitrepo.run(self.ctx.repo, "log", "--format=%H", f"{base}..{head}").split()
        for sha in shas:
            found = run_records.winner_by_commit(self.ctx.db, sha)
            if found is not None:
                return f"winner exp {found['experiment_id']} ({sha[:12]}: {found['title'][:60]})"
        return f"commit {shas[0][:12]}" if shas else None

    def _prepare(self, exp: ExperimentRow, worker: Worker) -> bool:
        """Refusal, candidate commit and trees; False when the experiment ended right here."""
        exp_id = exp["id"]
        baseline = exp["baseline_commit"]
        assert baseline is not None  # the runner creates every experiment with its baseline
        candidate = exp["candidate_commit"]
        patch = hypotheses.patch_row(self.ctx.db, exp["patch_id"]) if exp["patch_id"] else None
        if patch is not None:
            # What git would apply onto this baseline, not what the patch's headers say.
            try:
                why = patchpaths.check(patch["diff"], self.ctx.protected, self.ctx.repo, baseline)
            except patchpaths.PatchUnreadable as exc:
                self.lifecycle.finish(exp_id, "crashed", "does_not_apply", detail=str(exc))
                return False
            if why:
                self.lifecycle.finish(exp_id, "refused", why)
                return False
            if candidate is None:
                try:
                    candidate = commit_candidate(self.ctx.repo, baseline, patch["diff"], exp["title"])
                except DoesNotApply as exc:
                    candidate = self._rebase(exp, patch, baseline, str(exc))
                    if candidate is None:
                        return False
        assert candidate is not None
        with transaction(self.ctx.db):
            experiments.update(
                self.ctx.db,
                exp_id,
                {
                    "status": "running",
                    "phase": "setup",
                    "worker_id": worker.id,
                    "candidate_commit": candidate,
                    "started_at": exp["started_at"] or now(),
                },
            )
        started = time.monotonic()
        try:
            workdir = self.ctx.exp_dir(exp_id)
            prepare_workdir(self.ctx.repo, workdir, baseline, candidate, self.ctx.scripts, self.ctx.protected)
        except UserError as exc:
            self.lifecycle.finish(exp_id, "crashed", "setup", detail=str(exc))
            if exp["kind"] == "self_test":
                raise RunFailed(f"cannot prepare the self-test: {exc}") from None
            return False
        self.ctx.merge_meta(exp_id, {"prepare_seconds": round(time.monotonic() - started, 3)})
        return True


def disk_full(exc: BaseException) -> bool:
    """An error that says the disk is full: SQLite's SQLITE_FULL, or ENOSPC."""
    if isinstance(exc, sqlite3.OperationalError):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC
