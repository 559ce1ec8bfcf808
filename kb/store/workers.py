"""The workers table (local slots and SkyPilot clusters), as `autoresearch fleet` reads it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Required, TypedDict

from kb.store.paging import one, rows

if TYPE_CHECKING:
    import sqlite_utils


@dataclass(frozen=True)
class Worker:
    """A workers row with its run's name, status and heartbeat."""

    id: int
    run_id: int | None
    name: str
    backend: str
    status: str
    resources: str | None
    noise: float | None
    price_per_hour: float | None
    cost_usd: float
    meta: str | None
    started_at: float
    ended_at: float | None
    run_name: str | None
    run_status: str | None
    run_heartbeat: float | None


@dataclass(frozen=True)
class RunCost:
    run_id: int
    run: str
    status: str
    vm_usd: float
    experiments_usd: float


_SELECT = (
    "SELECT w.*, r.name AS run_name, r.status AS run_status, r.heartbeat_at AS run_heartbeat "
    "FROM workers w LEFT JOIN runs r ON r.id = w.run_id"
)


def _workers(db: sqlite_utils.Database, where: list[str], params: list[Any]) -> list[Worker]:
    return [Worker(**r) for r in rows(db, f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY w.id", params)]


def listed(
    db: sqlite_utils.Database, live: Sequence[str], *, show_all: bool, run_id: int | None
) -> list[Worker]:
    """Workers (of one run if given): live ones and those whose teardown is not confirmed, or all."""
    where = ["1 = 1"]
    params: list[Any] = []
    if run_id is not None:
        where.append("w.run_id = ?")
        params.append(run_id)
    if not show_all:
        # Live workers, and clusters whose teardown is not confirmed yet.
        where.append(
            f"(w.status IN ({','.join('?' for _ in live)}) "
            "OR coalesce(json_extract(w.meta, '$.teardown'), 'done') != 'done')"
        )
        params.extend(live)
    return _workers(db, where, params)


def teardown_candidates(db: sqlite_utils.Database, live: Sequence[str], run_id: int | None) -> list[Worker]:
    """SkyPilot clusters that are live or whose teardown is not confirmed (of one run if given)."""
    where = [
        f"w.backend = 'skypilot' AND (w.status IN ({','.join('?' for _ in live)}) "
        "OR coalesce(json_extract(w.meta, '$.teardown'), '') != 'done')"
    ]
    params: list[Any] = list(live)
    if run_id is not None:
        where.append("w.run_id = ?")
        params.append(run_id)
    return _workers(db, where, params)


def run_costs(db: sqlite_utils.Database, run_ids: Sequence[int]) -> list[RunCost]:
    """Each run's VM spend and the part its experiments account for, by run id."""
    if not run_ids:
        return []
    marks = ",".join("?" for _ in run_ids)
    out = []
    for run in rows(
        db, f"SELECT id, name, status FROM runs WHERE id IN ({marks}) ORDER BY id", list(run_ids)
    ):
        vm = one(db, "SELECT coalesce(sum(cost_usd), 0) AS c FROM workers WHERE run_id = ?", [run["id"]])
        exp = one(db, "SELECT coalesce(sum(cost_usd), 0) AS c FROM experiments WHERE run_id = ?", [run["id"]])
        assert vm is not None and exp is not None  # an aggregate always has a row
        out.append(RunCost(run["id"], run["name"], run["status"], vm["c"], exp["c"]))
    return out


class NewWorker(TypedDict, total=False):
    """A worker to insert; columns left out take the table's defaults (status `provisioning`)."""

    run_id: int | None
    name: Required[str]
    backend: Required[str]
    status: str
    resources: dict[str, Any] | None
    noise: float | None
    price_per_hour: float | None
    meta: dict[str, Any]
    started_at: Required[float]
    ended_at: float | None


def create(db: sqlite_utils.Database, worker: NewWorker) -> int:
    from kb.db import insert

    return insert(db, "workers", worker)
