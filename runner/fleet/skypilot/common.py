"""What every part of one run's SkyPilot fleet shares: the run it serves (`FleetScope`: the
workspace, its settings, the database, the run, the run's `workers` rows) and how it reports
(`FleetEvents`: events, and SkyPilot hiccups reported once and retried next tick)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from kb.config import Settings, SkyPilotSettings
from kb.db import log_event
from kb.errors import UserError
from kb.store import run_records
from kb.vocabulary import WORKER_LIVE
from kb.workspace import Workspace
from runner.fleet.base import WorkerRecords, _meta
from runner.fleet.skypilot import sdk

LIVE = WORKER_LIVE
"""A worker's statuses while its cluster may exist (or is about to)."""
TICK_SECONDS = 2.0
CHECK_ERRORS = 4
"""Job status checks failing in a row (the cluster still says UP) before the job counts as lost."""
GONE = "the cluster is gone (not UP when SkyPilot asked the infra: preempted, or its allocation ended)"


@dataclass(frozen=True)
class FleetScope:
    """The run one SkyPilot fleet serves, as its parts read it."""

    ws: Workspace
    db: sqlite_utils.Database
    run_id: int
    records: WorkerRecords

    @property
    def settings(self) -> Settings:
        return self.ws.settings

    @property
    def conf(self) -> SkyPilotSettings:
        return self.ws.settings.fleet.skypilot

    def run_options(self) -> dict[str, Any]:
        """The run's own options (its timeouts given to `autoresearch run`)."""
        run = run_records.row(self.db, self.run_id)
        return _meta(run["options"] if run else None)


@dataclass
class FleetEvents:
    """The run's events as the fleet writes them."""

    db: sqlite_utils.Database
    run_id: int
    last_error: str = field(default="")

    def event(self, kind: str, message: str, *, level: str = "info") -> None:
        log_event(self.db, kind, message, level=level, run_id=self.run_id)

    def guarded(self, what: str, step: Callable[[], None]) -> None:
        """A SkyPilot hiccup (API server restarting, ssh failing) is reported once and retried next tick."""
        try:
            step()
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001
            message = f"{what}: {sdk.error_line(exc)}"
            if message != self.last_error:
                self.last_error = message
                self.event("fleet_error", message, level="warning")
