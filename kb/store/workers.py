"""The workers table (local slots and SkyPilot clusters), as `autoresearch fleet` reads it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Required, TypedDict

from kb.store.paging import one, rows, shaped, shaped_one
from kb.store.tables import WorkerRow

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


def teardown_candidates(
    db: sqlite_utils.Database, live: Sequence[str], run_id: int | None, backends: Sequence[str]
) -> list[Worker]:
    """Workers of these backends (those whose workers outlive a runner: SkyPilot clusters) that are
    live or whose teardown is not confirmed (of one run if given)."""
    if not backends:
        return []
    where = [
        f"w.backend IN ({_marks(backends)}) AND (w.status IN ({_marks(live)}) "
        "OR coalesce(json_extract(w.meta, '$.teardown'), '') != 'done')"
    ]
    params: list[Any] = [*backends, *live]
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


# --- the fleet backends' own bookkeeping (runner/fleet) ----------------------------------------
# Whole rows are WorkerRow: runner.fleet turns each into its Worker and reads the JSON meta itself.


class WorkerStatus(TypedDict):
    """A worker's status and its meta (JSON text)."""

    status: str
    meta: str | None


class WorkerCost(TypedDict):
    """What a worker's cost is reckoned from."""

    id: int
    status: str
    meta: str | None
    price_per_hour: float | None
    cost_usd: float
    ended_at: float | None


class Orphan(TypedDict):
    """A worker no live run drives, and the run it belongs to if any."""

    id: int
    run_id: int | None


def _marks(values: Sequence[Any]) -> str:
    return ",".join("?" for _ in values)


def update(db: sqlite_utils.Database, worker_id: int, values: Mapping[str, Any]) -> None:
    """Columns of a worker (a fleet backend's status, meta, cost, noise, price); dicts as JSON."""
    from kb.db import update as update_row

    update_row(db, "workers", worker_id, values)


def row(db: sqlite_utils.Database, worker_id: int) -> WorkerRow | None:
    """Every column of a worker as stored."""
    return shaped_one(db, WorkerRow, "SELECT * FROM workers WHERE id = ?", [worker_id])


def rows_of(db: sqlite_utils.Database, worker_ids: Sequence[int]) -> list[WorkerRow]:
    """Every column of these workers, by id."""
    if not worker_ids:
        return []
    return shaped(
        db,
        WorkerRow,
        f"SELECT * FROM workers WHERE id IN ({_marks(worker_ids)}) ORDER BY id",
        list(worker_ids),
    )


def up_of_run(db: sqlite_utils.Database, run_id: int, backend: str) -> list[WorkerRow]:
    """The run's workers of this backend that are not down, lost or failed, by id."""
    return shaped(
        db,
        WorkerRow,
        "SELECT * FROM workers WHERE run_id = ? AND backend = ? "
        "AND status NOT IN ('down', 'lost', 'failed') ORDER BY id",
        [run_id, backend],
    )


def newest_first(db: sqlite_utils.Database, run_id: int, backend: str) -> list[WorkerStatus]:
    """status and meta of the run's workers of this backend, newest first."""
    return shaped(
        db,
        WorkerStatus,
        "SELECT status, meta FROM workers WHERE run_id = ? AND backend = ? ORDER BY id DESC",
        [run_id, backend],
    )


def cost_of_run(db: sqlite_utils.Database, run_id: int) -> float:
    """What the run's workers cost so far (workers.cost_usd summed)."""
    found = one(db, "SELECT coalesce(sum(cost_usd), 0) AS c FROM workers WHERE run_id = ?", [run_id])
    return float(found["c"]) if found else 0.0


def cost_rows(db: sqlite_utils.Database, run_id: int, backend: str) -> list[WorkerCost]:
    """id, status, meta, price_per_hour, cost_usd and ended_at of the run's workers of this backend."""
    return shaped(
        db,
        WorkerCost,
        "SELECT id, status, meta, price_per_hour, cost_usd, ended_at FROM workers WHERE run_id = ? "
        "AND backend = ?",
        [run_id, backend],
    )


def launched(db: sqlite_utils.Database, run_id: int, backend: str) -> dict[str, int]:
    """{name: id} of the run's workers of this backend that were launched (meta.launched_at)."""
    found = rows(
        db,
        "SELECT id, name FROM workers WHERE run_id = ? AND backend = ? "
        "AND json_extract(meta, '$.launched_at') IS NOT NULL",
        [run_id, backend],
    )
    return {r["name"]: r["id"] for r in found}


def last_launched_at(db: sqlite_utils.Database, run_id: int, backend: str) -> Any:
    """The newest meta.launched_at of the run's workers of this backend (None: none launched)."""
    found = one(
        db,
        "SELECT max(json_extract(meta, '$.launched_at')) AS t FROM workers WHERE run_id = ? AND backend = ?",
        [run_id, backend],
    )
    return found["t"] if found else None


def pending_teardowns(db: sqlite_utils.Database, backend: str) -> list[WorkerRow]:
    """Every worker of this backend whose teardown was asked for and not yet confirmed, by id."""
    return shaped(
        db,
        WorkerRow,
        "SELECT * FROM workers WHERE backend = ? AND json_extract(meta, '$.teardown') = 'pending' "
        "ORDER BY id",
        [backend],
    )


def orphans(
    db: sqlite_utils.Database,
    backend: str,
    live: Sequence[str],
    run_id: int,
    run_live: Sequence[str],
    stale_before: float,
) -> list[Orphan]:
    """id and run_id of the workers of this backend in a `live` status that belong to no run, or to
    another run than `run_id` that is not in a `run_live` status or whose heartbeat is older than
    `stale_before` (nobody drives it)."""
    return shaped(
        db,
        Orphan,
        "SELECT w.id, w.run_id FROM workers w LEFT JOIN runs r ON r.id = w.run_id "
        f"WHERE w.backend = ? AND w.status IN ({_marks(live)}) "
        "AND (w.run_id IS NULL OR w.run_id != ?) AND (r.id IS NULL "
        f"OR r.status NOT IN ({_marks(run_live)}) OR r.heartbeat_at IS NULL OR r.heartbeat_at < ?)",
        [backend, *live, run_id, *run_live, stale_before],
    )
