"""What every part of the SkyPilot fleet shares: the fleet's state (settings, tracked jobs, checks in
flight) and small helpers on its `workers` rows and events. The concerns (teardown, costs,
qualification, launches, scaling, jobs) are mixins on top of `SkyPilotState`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlite_utils

from kb.config import Settings
from kb.db import log_event
from kb.errors import UserError
from kb.store import run_records, workers
from kb.workspace import Workspace
from runner.fleet.base import Fleet, _meta
from runner.fleet.skypilot import sdk

if TYPE_CHECKING:
    import git

    from runner.fleet.skypilot.jobs import _Job

LIVE = ("provisioning", "qualifying", "ready", "busy")
"""A worker's statuses while its cluster may exist (or is about to)."""
TICK_SECONDS = 2.0
CHECK_ERRORS = 4
"""Job status checks failing in a row (the cluster still says UP) before the job counts as lost."""
GONE = "the cluster is gone (not UP when SkyPilot asked the infra: preempted, or its allocation ended)"


class SkyPilotState(Fleet):
    backend = "skypilot"

    def __init__(self, ws: Workspace, db: sqlite_utils.Database, run_id: int, size: int) -> None:
        super().__init__(ws, db, run_id, size)
        self.settings: Settings = ws.settings
        self.conf = self.settings.fleet.skypilot
        self.size = max(1, min(size, self.conf.max_clusters))
        self._jobs: dict[int, _Job] = {}
        self._checks: dict[int, str] = {}
        """Worker id -> in-flight `job_status` request for its qualification job."""
        self._check_errors: dict[int, int] = {}
        self._last_tick = 0.0
        self._last_error = ""
        self._closed = False
        self._repo_handle: git.Repo | None = None
        self.qualify_dir = ws.worktrees_dir / f"run{run_id}-qualify"
        self.fleet_logs = ws.logs_dir / f"run{run_id}" / "fleet"

    def _guarded(self, what: str, step: Callable[[], None]) -> None:
        """A SkyPilot hiccup (API server restarting, ssh failing) is reported and retried next tick."""
        try:
            step()
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001
            message = f"{what}: {sdk.error_line(exc)}"
            if message != self._last_error:
                self._last_error = message
                self._event("fleet_error", message, level="warning")

    def _update_worker(self, worker_id: int, *, status: str | None = None, **meta_changes: Any) -> None:
        meta = self._worker_meta(worker_id)
        meta.update(meta_changes)
        values: dict[str, Any] = {"meta": meta}
        if status is not None:
            values["status"] = status
        self._set_worker(worker_id, **values)

    def _is_live(self, worker_id: int) -> bool:
        row = workers.row(self.db, worker_id)
        return row is not None and row["status"] in LIVE

    def _name(self, worker_id: int) -> str:
        row = workers.row(self.db, worker_id)
        return str(row["name"]) if row else f"worker {worker_id}"

    def _event(self, kind: str, message: str, *, level: str = "info") -> None:
        log_event(self.db, kind, message, level=level, run_id=self.run_id)

    def _run_options(self) -> dict[str, Any]:
        run = run_records.row(self.db, self.run_id)
        return _meta(run["options"] if run else None)

    def _repo(self) -> git.Repo:
        from kb import gitrepo

        if self._repo_handle is None:
            self._repo_handle = gitrepo.open_repo(self.ws.mirror_path)
        return self._repo_handle
