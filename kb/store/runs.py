"""Runs, their workers and their live experiments, as the fleet pane and the steering commands
read them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kb.errors import UserError
from kb.jsoncol import decoded_dict
from kb.store.decisions import latest_decision_id
from kb.store.paging import one, rows, shaped
from kb.store.tables import WorkerRow
from kb.vocabulary import RUN_LIVE, STALE_HEARTBEAT, STOP_MEANINGS

if TYPE_CHECKING:
    import sqlite_utils


@dataclass(frozen=True)
class RunStatus:
    id: int
    name: str
    status: str
    backend: str
    pid: int | None
    host: str | None
    started_at: float
    ended_at: float | None
    heartbeat_at: float | None
    wave: int | None
    waves: int
    experiments: int
    kept: int
    cost_usd: float
    error: str | None
    pending_commands: int
    phase: str | None = None
    """What the run is doing now (kb.vocabulary.PHASES: researching, patching, measuring,
    reflecting); None when idle or ended."""
    stop_reason: str | None = None
    """Why a finished run stopped (kb.vocabulary.STOP_REASONS)."""
    autopilot: bool = False
    """Started with `--autopilot` (research phases between waves)."""
    model: str | None = None
    """The model the autopilot's research phases ask (`--model`), if one was given."""

    @property
    def stop_meaning(self) -> str | None:
        return STOP_MEANINGS.get(self.stop_reason) if self.stop_reason else None

    def heartbeat_age(self, now: float) -> float | None:
        return None if self.heartbeat_at is None else max(0.0, now - self.heartbeat_at)

    def runner_live(self, now: float) -> bool:
        """Is a runner process driving this run (a fresh heartbeat)?"""
        return run_live(self.status, self.heartbeat_at, now)


def heartbeat_fresh(heartbeat_at: float | None, now: float) -> bool:
    """The one liveness rule: a runner beats every couple of seconds, so a heartbeat older than
    STALE_HEARTBEAT means no process drives the run (the loop, the console, a SkyPilot worker's
    watchdog and `fleet down` all ask this)."""
    return heartbeat_at is not None and now - float(heartbeat_at) < STALE_HEARTBEAT


def run_live(status: str, heartbeat_at: float | None, now: float) -> bool:
    """A run someone drives: running or paused, with a fresh heartbeat."""
    return status in RUN_LIVE and heartbeat_fresh(heartbeat_at, now)


def llm_spent_usd(db: sqlite_utils.Database, run_id: int) -> float:
    """What this run's model calls cost so far (llm_calls.cost_usd)."""
    row = one(db, "SELECT coalesce(sum(cost_usd), 0) AS c FROM llm_calls WHERE run_id = ?", [run_id])
    return float(row["c"]) if row else 0.0


def dollars_spent(db: sqlite_utils.Database, run_id: int, machines_usd: float) -> float:
    """The one `budget.usd` rule: machines and model calls together (`llm.budget_usd` caps the
    model alone, in runner/llm.py)."""
    return machines_usd + llm_spent_usd(db, run_id)


@dataclass(frozen=True)
class FleetWorker:
    id: int
    name: str
    backend: str
    status: str
    noise: float | None
    cost_usd: float
    experiment_id: int | None
    experiment: str | None
    phase: str | None = None
    """What a cluster is doing (launching, qualifying, downing, ...): the SkyPilot fleet's meta."""


@dataclass(frozen=True)
class FleetExperiment:
    id: int
    title: str
    kind: str
    wave: int | None
    worker: str | None
    backend: str | None
    status: str
    phase: str | None
    reason: str | None
    started_at: float | None
    ended_at: float | None
    pairs: int
    log_path: str | None
    """The experiment's newest log file (the running batch's), if any."""

    def elapsed(self, now: float) -> float | None:
        if self.started_at is None:
            return None
        return (self.ended_at if self.ended_at is not None else now) - self.started_at


def run_status(db: sqlite_utils.Database, run_id: int) -> RunStatus | None:
    r = one(
        db,
        """SELECT r.*,
              (SELECT max(number) FROM waves w WHERE w.run_id = r.id) AS wave,
              (SELECT count(*) FROM waves w WHERE w.run_id = r.id) AS n_waves,
              (SELECT count(*) FROM experiments e WHERE e.run_id = r.id) AS n_exp,
              (SELECT count(*) FROM experiments e WHERE e.run_id = r.id AND e.status = 'kept') AS n_kept,
              (SELECT count(*) FROM commands c WHERE c.status = 'pending') AS n_cmd
           FROM runs r WHERE r.id = ?""",
        [run_id],
    )
    if r is None:
        return None
    options = decoded_dict(r.get("options"))
    return RunStatus(
        id=r["id"],
        name=r["name"],
        status=r["status"],
        backend=r["backend"],
        pid=r["pid"],
        host=r["host"],
        started_at=r["started_at"],
        ended_at=r["ended_at"],
        heartbeat_at=r["heartbeat_at"],
        wave=r["wave"],
        waves=r["n_waves"],
        experiments=r["n_exp"],
        kept=r["n_kept"],
        cost_usd=r["cost_usd"] or 0.0,
        error=r["error"],
        pending_commands=r["n_cmd"],
        phase=r.get("phase"),
        stop_reason=r.get("stop_reason"),
        autopilot=bool(options.get("autopilot")),
        model=str(options["model"]) if options.get("model") else None,
    )


def current_run_id(db: sqlite_utils.Database) -> int | None:
    """The run going on (running or paused), else the latest one."""
    r = one(db, "SELECT id FROM runs ORDER BY status IN ('running', 'paused') DESC, id DESC LIMIT 1")
    return None if r is None else int(r["id"])


def latest_run_id(db: sqlite_utils.Database) -> int | None:
    r = one(db, "SELECT id FROM runs ORDER BY id DESC LIMIT 1")
    return None if r is None else int(r["id"])


class WorkerAtWork(WorkerRow):
    """A worker with the experiment it is running (None when idle)."""

    exp_id: int | None
    exp_title: str | None


def _worker_phase(row: WorkerRow) -> str | None:
    try:
        meta = decoded_dict(row["meta"])
    except ValueError:
        return None
    if not isinstance(meta, dict):
        return None
    return "downing" if meta.get("teardown") == "pending" else meta.get("phase")


def run_workers(db: sqlite_utils.Database, run_id: int) -> list[FleetWorker]:
    """A run's workers, each with the experiment it is running."""
    return [
        FleetWorker(
            r["id"],
            r["name"],
            r["backend"],
            r["status"],
            r["noise"],
            r["cost_usd"] or 0.0,
            r["exp_id"],
            r["exp_title"],
            _worker_phase(r),
        )
        for r in shaped(
            db,
            WorkerAtWork,
            """SELECT k.*, x.id AS exp_id, x.title AS exp_title FROM workers k
               LEFT JOIN experiments x ON x.id = (
                   SELECT id FROM experiments WHERE worker_id = k.id AND status = 'running'
                   ORDER BY id DESC LIMIT 1)
               WHERE k.run_id = ? ORDER BY k.id""",
            [run_id],
        )
    ]


_FLEET_SELECT = f"""
    SELECT x.id, x.title, x.kind, x.status, x.phase, x.reason, x.started_at, x.ended_at, x.log_dir,
           w.number AS wave, k.name AS worker, k.backend AS backend,
           (SELECT j.log_path FROM jobs j WHERE j.experiment_id = x.id
            ORDER BY j.id DESC LIMIT 1) AS log_path,
           (SELECT d.pairs FROM decisions d WHERE d.id = {latest_decision_id("x.id")}) AS pairs
    FROM experiments x LEFT JOIN waves w ON w.id = x.wave_id LEFT JOIN workers k ON k.id = x.worker_id
"""


def fleet_experiments(db: sqlite_utils.Database, run_id: int, *, finished: int = 30) -> list[FleetExperiment]:
    """Live experiments (running, queued) first, then the `finished` most recent others."""
    live = rows(
        db,
        _FLEET_SELECT + " WHERE x.run_id = ? AND x.status IN ('running', 'queued') "
        "ORDER BY x.status = 'running' DESC, x.id",
        [run_id],
    )
    done = rows(
        db,
        _FLEET_SELECT
        + " WHERE x.run_id = ? AND x.status NOT IN ('running', 'queued') ORDER BY x.id DESC LIMIT ?",
        [run_id, finished],
    )
    return [
        FleetExperiment(
            id=r["id"],
            title=r["title"],
            kind=r["kind"],
            wave=r["wave"],
            worker=r["worker"],
            backend=r["backend"],
            status=r["status"],
            phase=r["phase"],
            reason=r["reason"],
            started_at=r["started_at"],
            ended_at=r["ended_at"],
            pairs=r["pairs"] or 0,
            log_path=r["log_path"] or newest_log(r["log_dir"]),
        )
        for r in [*live, *done]
    ]


def newest_log(folder: str | None) -> str | None:
    """The newest .log file of an experiment's folder (a batch that has no job row yet)."""
    if not folder:
        return None
    try:
        logs = [e for e in os.scandir(folder) if e.is_file() and e.name.endswith(".log")]
    except OSError:
        return None
    if not logs:
        return None
    return max(logs, key=lambda e: (e.stat().st_mtime, e.name)).path


def experiment_log_dir(db: sqlite_utils.Database, experiment_id: int) -> str | None:
    r = one(db, "SELECT log_dir FROM experiments WHERE id = ?", [experiment_id])
    if r is None:
        raise UserError(f"experiment {experiment_id}: no such experiment")
    return str(r["log_dir"]) if r["log_dir"] else None


def experiment_status(db: sqlite_utils.Database, experiment_id: int) -> str:
    r = one(db, "SELECT status FROM experiments WHERE id = ?", [experiment_id])
    if r is None:
        raise UserError(f"experiment {experiment_id}: no such experiment")
    return str(r["status"])


@dataclass(frozen=True)
class RunRef:
    """What starting a run from another run's winners needs of it."""

    id: int
    name: str
    status: str
    branch: str | None
    head_commit: str | None
    baseline_commit: str | None


def run_by_ref(db: sqlite_utils.Database, ref: str) -> RunRef | None:
    """The run named `ref`, or whose id is `ref`."""
    r = one(db, "SELECT * FROM runs WHERE name = ? OR CAST(id AS TEXT) = ?", [ref, ref])
    if r is None:
        return None
    return RunRef(r["id"], r["name"], r["status"], r["branch"], r["head_commit"], r["baseline_commit"])


def run_of_pid(db: sqlite_utils.Database, pid: int) -> tuple[int, str] | None:
    """(id, name) of the newest run a runner process with this pid started."""
    r = one(db, "SELECT id, name FROM runs WHERE pid = ? ORDER BY id DESC LIMIT 1", [pid])
    return None if r is None else (int(r["id"]), str(r["name"]))


def winner_count(db: sqlite_utils.Database, run_id: int) -> int:
    r = one(db, "SELECT count(*) AS n FROM winners WHERE run_id = ?", [run_id])
    return int(r["n"]) if r else 0


def last_run_with_winners(db: sqlite_utils.Database) -> tuple[str, int] | None:
    """(name, winners) of the newest run that kept winners."""
    r = one(
        db,
        "SELECT r.name, count(w.id) AS n FROM runs r JOIN winners w ON w.run_id = r.id "
        "GROUP BY r.id ORDER BY r.id DESC LIMIT 1",
    )
    return None if r is None else (str(r["name"]), int(r["n"]))


@dataclass(frozen=True)
class CommandState:
    id: int
    kind: str
    status: str
    result: str | None


def command(db: sqlite_utils.Database, command_id: int) -> CommandState | None:
    """A steering command as the runner left it (pending, done or failed, with its result)."""
    r = one(db, "SELECT id, kind, status, result FROM commands WHERE id = ?", [command_id])
    return None if r is None else CommandState(int(r["id"]), r["kind"], r["status"], r["result"])


def live_run(db: sqlite_utils.Database, now: float) -> RunStatus | None:
    """The run a runner is driving now (running or paused, fresh heartbeat), if any."""
    run_id = current_run_id(db)
    status = run_status(db, run_id) if run_id is not None else None
    return status if status is not None and status.runner_live(now) else None
