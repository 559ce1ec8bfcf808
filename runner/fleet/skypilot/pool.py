"""The worker pool: the run's first clusters, workers added while work waits and the run has fewer
than it may have, a qualified cluster idle for `idle_minutes` while nothing of its run is queued
downed, and the run stopped after `max_failures` clusters in a row failed to launch or qualify."""

from __future__ import annotations

from kb.db import now
from kb.errors import UserError
from kb.store import experiments, workers
from kb.vocabulary import EXPERIMENT_LIVE
from runner.fleet.base import _meta
from runner.fleet.skypilot.common import FleetEvents, FleetScope
from runner.fleet.skypilot.costs import CostMeter
from runner.fleet.skypilot.launch import Launcher
from runner.fleet.skypilot.teardown import DOWN_WAIT_SECONDS, Teardown


class WorkerPool:
    """How many clusters the run has: launched through the `Launcher`, downed through `Teardown`."""

    def __init__(
        self,
        scope: FleetScope,
        size: int,
        events: FleetEvents,
        launcher: Launcher,
        teardown: Teardown,
        costs: CostMeter,
    ) -> None:
        self.scope = scope
        self.records = scope.records
        self.size = size
        self.events = events
        self.launcher = launcher
        self.teardown = teardown
        self.costs = costs

    def fill(self) -> None:
        """Workers recorded for what the run lacks of its size, their launches staggered."""
        live = self.records.up()
        start = max(now(), self.launcher.next_launch_at())
        for n in range(self.size - len(live)):
            self.launcher.new_worker(start + n * self.scope.conf.stagger_seconds)

    def idle_down(self) -> None:
        conf = self.scope.conf
        limit = conf.idle_minutes * 60
        if experiments.count_in(self.scope.db, self.scope.run_id, ("queued",)):
            return
        busy = self.assigned()
        for worker in self.records.up():
            if worker.status != "ready" or worker.id in busy:
                continue
            idle_since = worker.meta.get("idle_since")
            if idle_since is not None and now() - float(idle_since) >= limit:
                self.teardown.down(worker.id, "down", f"idle for {conf.idle_minutes:g} minutes")

    def assigned(self) -> set[int]:
        """Workers holding an experiment of the run (between its batches too)."""
        return experiments.busy_workers(self.scope.db, self.scope.run_id)

    def replace(self) -> None:
        """Launch workers while work waits and the run has fewer than it may have."""
        live = self.records.up()
        want = min(self.size, experiments.count_in(self.scope.db, self.scope.run_id, EXPERIMENT_LIVE))
        if len(live) >= want or self.failures_in_a_row()[0] >= self.scope.conf.max_failures:
            return
        if self.costs.budget_spent():
            return
        stagger = self.scope.conf.stagger_seconds
        waiting = [
            float(w.meta.get("launch_at") or 0) + stagger for w in live if "launch_request" not in w.meta
        ]
        start = max([self.launcher.next_launch_at(), now(), *waiting])
        for n in range(want - len(live)):
            worker = self.launcher.new_worker(start + n * stagger)
            self.events.event("worker_added", f"{worker.name}: added, work is waiting for workers")

    def failures_in_a_row(self) -> tuple[int, str]:
        """Workers that failed since the last one that qualified, and the last reason."""
        count, reason = 0, ""
        for row in workers.newest_first(self.scope.db, self.scope.run_id, self.records.backend):
            meta = _meta(row["meta"])
            if meta.get("qualified_at") is not None:
                break
            if row["status"] == "failed":
                count += 1
                reason = reason or str(meta.get("reason") or "")
        return count, reason

    def give_up_when_failing(self) -> None:
        """`max_failures` in a row and no worker left: the run stops with the last reason."""
        count, reason = self.failures_in_a_row()
        max_failures = self.scope.conf.max_failures
        if count >= max_failures and not self.records.up():
            self.teardown.wait(DOWN_WAIT_SECONDS)  # the run stops: leave nothing half torn down
            self.costs.update()
            raise UserError(
                f"fleet.skypilot: {count} clusters in a row failed to launch or qualify "
                f"(max_failures {max_failures}); last: {reason}"
            )
