"""Fleets run experiment batches: `local` (processes on this machine) or `skypilot` (clusters).

`make_fleet` picks the backend by name; the SkyPilot backend lives in runner/fleet/skypilot/
and is imported only when asked for (its `sdk` module imports `sky`, on first use).
"""

from __future__ import annotations

import importlib

import sqlite_utils

from kb.errors import UserError
from kb.workspace import Workspace
from runner.fleet.base import TERMINAL, Fleet, JobRef, JobSpec, JobState, JobStatus, Worker

__all__ = [
    "TERMINAL",
    "Fleet",
    "JobRef",
    "JobSpec",
    "JobState",
    "JobStatus",
    "Worker",
    "fleet_class",
    "make_fleet",
    "preflight",
]

BACKENDS = {
    "local": ("runner.fleet.local", "LocalFleet"),
    "skypilot": ("runner.fleet.skypilot", "SkyPilotFleet"),
}


def fleet_class(backend: str) -> type[Fleet]:
    """The Fleet subclass of a backend, imported on demand."""
    if backend not in BACKENDS:
        raise UserError(f"backend {backend!r}: must be one of {', '.join(BACKENDS)}")
    module_name, class_name = BACKENDS[backend]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise UserError(f"backend {backend!r}: not available in this installation") from None
        raise
    found = getattr(module, class_name)
    assert isinstance(found, type) and issubclass(found, Fleet)
    return found


def preflight(backend: str, ws: Workspace) -> None:
    """Check a backend's settings before a run is created (UserError naming what is wrong)."""
    fleet_class(backend).preflight(ws)


def make_fleet(backend: str, ws: Workspace, db: sqlite_utils.Database, run_id: int, size: int) -> Fleet:
    return fleet_class(backend)(ws, db, run_id, size)
