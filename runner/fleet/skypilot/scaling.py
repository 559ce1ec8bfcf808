"""Scaling: launch workers while work waits and the run has fewer than it may have, down a
qualified cluster idle for `idle_minutes` while nothing of its run is queued, and stop the run
after `max_failures` clusters in a row failed to launch or qualify."""

from __future__ import annotations

from kb.db import now
from kb.errors import UserError
from kb.store import experiments, workers
from kb.vocabulary import EXPERIMENT_LIVE
from runner.fleet.base import _meta
from runner.fleet.skypilot.launch import LaunchMixin
from runner.fleet.skypilot.teardown import DOWN_WAIT_SECONDS


class ScalingMixin(LaunchMixin):
    def _idle_down(self) -> None:
        limit = self.conf.idle_minutes * 60
        if experiments.count_in(self.db, self.run_id, ("queued",)):
            return
        busy = self._assigned()
        for worker in self.workers():
            if worker.status != "ready" or worker.id in busy:
                continue
            idle_since = worker.meta.get("idle_since")
            if idle_since is not None and now() - float(idle_since) >= limit:
                self._teardown(worker.id, "down", f"idle for {self.conf.idle_minutes:g} minutes")

    def _assigned(self) -> set[int]:
        """Workers holding an experiment of the run (between its batches too)."""
        return experiments.busy_workers(self.db, self.run_id)

    def _replace(self) -> None:
        """Launch workers while work waits and the run has fewer than it may have."""
        live = self.workers()
        want = min(self.size, experiments.count_in(self.db, self.run_id, EXPERIMENT_LIVE))
        if len(live) >= want or self._failures_in_a_row()[0] >= self.conf.max_failures:
            return
        if self._budget_spent():
            return
        stagger = self.conf.stagger_seconds
        waiting = [
            float(w.meta.get("launch_at") or 0) + stagger for w in live if "launch_request" not in w.meta
        ]
        start = max([self._next_launch_at(), now(), *waiting])
        for n in range(want - len(live)):
            worker = self._new_worker(start + n * stagger)
            self._event("worker_added", f"{worker.name}: added, work is waiting for workers")

    def _failures_in_a_row(self) -> tuple[int, str]:
        """Workers that failed since the last one that qualified, and the last reason."""
        count, reason = 0, ""
        for row in workers.newest_first(self.db, self.run_id, self.backend):
            meta = _meta(row["meta"])
            if meta.get("qualified_at") is not None:
                break
            if row["status"] == "failed":
                count += 1
                reason = reason or str(meta.get("reason") or "")
        return count, reason

    def _give_up_when_failing(self) -> None:
        count, reason = self._failures_in_a_row()
        if count >= self.conf.max_failures and not self.workers():
            self._wait_teardowns(DOWN_WAIT_SECONDS)  # the run stops: leave nothing half torn down
            self._costs()
            raise UserError(
                f"fleet.skypilot: {count} clusters in a row failed to launch or qualify "
                f"(max_failures {self.conf.max_failures}); last: {reason}"
            )
