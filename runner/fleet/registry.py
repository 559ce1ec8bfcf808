"""The fleet backends, by name: each is registered once, here, and every face reads this.

A backend is one module holding a `Fleet` subclass (runner/fleet/base.py) plus one `register`
line below. Its module is imported only when the backend is used (the SkyPilot one imports `sky`
on its first SkyPilot call). What a backend decides for itself lives on its `Fleet` class:
`preflight` (its settings checked before a run is created), `resources_override` (the
`resources:` put into every task), and, for workers that outlive a runner (`leaves_workers`),
`outside_statuses` and `down_recorded` (`autoresearch fleet status --refresh` and `fleet down`).

The config's `fleet.backend` is a plain name (kb/ cannot import the runner): it is checked against
this registry where the runner reads it (`configured`: `run`, `validate`), so an unknown name is
one line naming the valid ones; `autoresearch run --backend` and the console's start dialog offer
the registered names.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kb.errors import UserError

if TYPE_CHECKING:
    from kb.config import Settings
    from kb.workspace import Workspace
    from runner.fleet.base import Fleet


@dataclass(frozen=True)
class BackendInfo:
    """One fleet backend: its name (config, CLI, `workers.backend`), what it is in one line, and
    where its `Fleet` subclass lives (imported on first use)."""

    name: str
    description: str
    module: str
    fleet: str
    """The `Fleet` subclass's name in `module`."""

    def fleet_class(self) -> type[Fleet]:
        """The backend's Fleet subclass, imported on demand."""
        from runner.fleet.base import Fleet

        try:
            module = importlib.import_module(self.module)
        except ModuleNotFoundError as exc:
            if exc.name == self.module:
                raise UserError(f"backend {self.name!r}: not available in this installation") from None
            raise
        found = getattr(module, self.fleet, None)
        if not (isinstance(found, type) and issubclass(found, Fleet)):
            raise UserError(f"backend {self.name!r}: {self.module}.{self.fleet} is not a Fleet")
        return found

    def preflight(self, ws: Workspace) -> None:
        """The backend's check of the workspace's settings (UserError naming what is wrong)."""
        self.fleet_class().preflight(ws)


_BACKENDS: dict[str, BackendInfo] = {}


def register(info: BackendInfo) -> BackendInfo:
    """Add a backend; its name must be new (registering the same one again changes nothing)."""
    known = _BACKENDS.get(info.name)
    if known is not None and known != info:
        raise ValueError(f"fleet backend {info.name!r} is already registered ({known.module})")
    _BACKENDS[info.name] = info
    return info


def backends() -> tuple[BackendInfo, ...]:
    """Every registered backend, in registration order."""
    return tuple(_BACKENDS.values())


def names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def backend(name: str, *, what: str = "backend") -> BackendInfo:
    """The named backend; an unknown name is one UserError naming `what` and the valid names."""
    found = _BACKENDS.get(name)
    if found is None:
        raise UserError(f"{what} {name!r}: must be one of {', '.join(_BACKENDS)}")
    return found


def configured(settings: Settings, override: str | None = None) -> BackendInfo:
    """The backend a run uses: `override` (`--backend`), else the config's `fleet.backend`."""
    if override:
        return backend(override, what="--backend")
    return backend(settings.fleet.backend, what="fleet.backend")


register(
    BackendInfo("local", "processes on this machine, one slot per worker", "runner.fleet.local", "LocalFleet")
)
register(
    BackendInfo(
        "skypilot",
        "SkyPilot clusters (clouds, Kubernetes, Slurm), qualified by an A/A run first",
        "runner.fleet.skypilot",
        "SkyPilotFleet",
    )
)
