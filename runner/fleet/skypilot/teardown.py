"""Teardown: workers that failed or were lost, `sky.down` requests sent and checked on later ticks,
clusters of runs nobody drives any more, and the clusters a restart no longer finds."""

from __future__ import annotations

import time
from typing import Any

from kb.db import log_event, now
from kb.store import workers
from kb.store.tables import WorkerRow
from kb.vocabulary import RUN_LIVE, STALE_HEARTBEAT
from runner.fleet.base import Worker, _meta
from runner.fleet.skypilot import sdk
from runner.fleet.skypilot.common import LIVE, TICK_SECONDS, FleetEvents, FleetScope

DOWN_WAIT_SECONDS = 900.0


class Teardown:
    """Takes a run's clusters down: marks the worker over, sends `sky.down`, follows the request."""

    def __init__(self, scope: FleetScope, events: FleetEvents) -> None:
        self.scope = scope
        self.records = scope.records
        self.events = events

    def verify(self, launched: list[Worker]) -> None:
        """After a restart: recorded clusters that SkyPilot no longer has are lost."""
        launched = [w for w in launched if w.status in ("qualifying", "ready", "busy")]
        if not launched:
            return
        records = sdk.clusters([w.name for w in launched], refresh=False)
        up = {r["name"] for r in records if sdk.status_value(r["status"]) in ("UP", "INIT")}
        for worker in launched:
            if worker.name not in up:
                self.lose(worker.id, "the cluster is gone (found missing on restart)")

    def fail(self, worker_id: int, reason: str) -> None:
        """The worker failed (no capacity, setup, qualification): downed, and counted as a failure."""
        if self._is_live(worker_id):
            self.down(worker_id, "failed", reason)
            self.events.event("worker_failed", f"{self._name(worker_id)}: {reason}; downed", level="warning")

    def lose(self, worker_id: int, reason: str) -> None:
        """The worker's cluster vanished (preempted, allocation gone)."""
        if self._is_live(worker_id):  # several jobs and checks may notice the same loss
            self.down(worker_id, "lost", reason)
            self.events.event("worker_lost", f"{self._name(worker_id)}: lost ({reason})", level="warning")

    def down(self, worker_id: int, status: str, reason: str) -> None:
        """Mark the worker over and send the down request (checked by later ticks)."""
        row = self.records.row(worker_id)
        if row is None:
            return
        meta = _meta(row["meta"])
        cluster = str(meta.get("cluster") or row["name"])
        changes: dict[str, Any] = {"reason": reason, "phase": status}
        if row["status"] in LIVE:
            changes["status"] = status
        if meta.get("launched_at") is None:  # never launched: nothing to tear down
            self.records.update(worker_id, **changes, teardown="done", torn_down_at=now())
            return
        launch = meta.get("launch_request")
        if launch and sdk.request_status(str(launch)) not in sdk.REQUEST_DONE:
            sdk.cancel_request(str(launch))
        try:
            request = sdk.down(cluster)
        except Exception as exc:  # noqa: BLE001 - retried by `autoresearch fleet down`
            self.records.update(worker_id, **changes, teardown=f"failed: {sdk.error_line(exc)}")
            return
        self.records.update(worker_id, **changes, teardown="pending", down_request=request)

    def pending(self) -> list[WorkerRow]:
        return workers.pending_teardowns(self.scope.db, self.records.backend)

    def check(self) -> None:
        """Record the outcome of every down request SkyPilot has finished."""
        for row in self.pending():
            meta = _meta(row["meta"])
            request = str(meta.get("down_request"))
            state = sdk.request_status(request)
            if state not in sdk.REQUEST_DONE and state != "MISSING":
                continue
            outcome = sdk.down_outcome(request)
            self.records.update(row["id"], teardown=outcome, torn_down_at=now(), phase=row["status"])
            ok = outcome == "done"
            log_event(
                self.scope.db,
                "worker_down" if ok else "worker_down_failed",
                f"{row['name']}: down ({meta.get('reason') or row['status']})"
                if ok
                else f"{row['name']}: down {outcome}",
                level="info" if ok else "error",
                run_id=row["run_id"],
            )

    def wait(self, timeout: float) -> None:
        """Block until SkyPilot confirms every pending down (or the time is up)."""
        deadline = time.monotonic() + timeout
        self.check()
        while self.pending() and time.monotonic() < deadline:
            time.sleep(TICK_SECONDS)
            self.check()

    def down_orphans(self) -> None:
        """Clusters recorded for runs that nobody drives any more are downed."""
        for row in workers.orphans(
            self.scope.db, self.records.backend, LIVE, self.scope.run_id, RUN_LIVE, now() - STALE_HEARTBEAT
        ):
            self.down(row["id"], "down", f"its run {row['run_id']} is not live")

    def _is_live(self, worker_id: int) -> bool:
        row = self.records.row(worker_id)
        return row is not None and row["status"] in LIVE

    def _name(self, worker_id: int) -> str:
        row = self.records.row(worker_id)
        return str(row["name"]) if row else f"worker {worker_id}"
