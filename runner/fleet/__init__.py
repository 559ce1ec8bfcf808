"""Fleets run experiment batches: `local` (processes on this machine), `skypilot` (clusters), or
any backend registered in runner/fleet/registry.py (one module and one registration line).

`make_fleet` picks the backend by name from the registry; a backend's module is imported only
when asked for (the SkyPilot one's `sdk` module imports `sky`, on first use).
"""

from __future__ import annotations

import sqlite_utils

from kb.workspace import Workspace
from runner.fleet.base import TERMINAL, Fleet, JobRef, JobSpec, JobState, JobStatus, Worker
from runner.fleet.registry import BackendInfo, backend, backends, configured, names, register

__all__ = [
    "TERMINAL",
    "BackendInfo",
    "Fleet",
    "JobRef",
    "JobSpec",
    "JobState",
    "JobStatus",
    "Worker",
    "backend",
    "backends",
    "configured",
    "fleet_class",
    "make_fleet",
    "names",
    "preflight",
    "register",
]


def fleet_class(name: str) -> type[Fleet]:
    """The Fleet subclass of a backend, imported on demand."""
    return backend(name).fleet_class()


def preflight(name: str, ws: Workspace) -> None:
    """Check a backend's settings before a run is created (UserError naming what is wrong): the
    name first (an unknown one from the config is named as `fleet.backend`), then the backend's own."""
    if name not in names() and name == ws.settings.fleet.backend:
        configured(ws.settings)
    backend(name).preflight(ws)


def make_fleet(name: str, ws: Workspace, db: sqlite_utils.Database, run_id: int, size: int) -> Fleet:
    return fleet_class(name)(ws, db, run_id, size)
