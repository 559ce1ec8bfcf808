"""Read-only, typed access to past and live runs: runs, waves, experiments, decisions, samples, events.

The CLI (`autoresearch history`, `report`, `redecide`) and the TUI's history pane read through here
rather than writing SQL of their own. Every function takes a connection opened by the caller's
thread and only reads. `history_json()` is the JSON the CLI prints with `--json`.

An experiment's *decision* is the runner's last word on it: its final decision, else its latest one
(a `continue` while it still runs). Re-analyses stored by `redecide --save` (origin `redecide`) never
count as that; they are listed with all decisions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlite_utils

from kb.db import one, rows
from kb.errors import UserError

# The typed rows live in runner/record/model.py (below this module, winners and sources);
# re-exported because every caller knows them from here.
from runner.record.model import FINISHED_STATUSES as FINISHED_STATUSES
from runner.record.model import DecisionInfo as DecisionInfo
from runner.record.model import Event as Event
from runner.record.model import ExperimentInfo as ExperimentInfo
from runner.record.model import RunInfo as RunInfo
from runner.record.model import Sample as Sample
from runner.record.model import WaveInfo as WaveInfo
from runner.record.model import effect_cell as effect_cell
from runner.record.model import finite
from runner.record.model import isolation_summary as isolation_summary
from runner.record.model import parse_json as parse_json
from runner.record.sources import source_refs

# --- runs and waves ----------------------------------------------------------------------------

_RUN_SQL = """
SELECT r.*,
    (SELECT count(*) FROM waves w WHERE w.run_id = r.id) AS n_waves,
    (SELECT count(*) FROM experiments e WHERE e.run_id = r.id) AS n_experiments,
    (SELECT count(*) FROM experiments e WHERE e.run_id = r.id AND e.status = 'kept') AS n_kept,
    (SELECT count(*) FROM winners x WHERE x.run_id = r.id) AS n_winners
FROM runs r
"""


def _run(row: dict[str, Any]) -> RunInfo:
    return RunInfo(
        id=row["id"],
        name=row["name"],
        status=row["status"],
        branch=row["branch"],
        baseline_commit=row["baseline_commit"],
        head_commit=row["head_commit"],
        backend=row["backend"],
        policy=parse_json(row["policy"]) or {},
        budget=parse_json(row["budget"]) or {},
        options=parse_json(row["options"]) or {},
        noise_floor=finite(row["noise_floor"]),
        self_test=parse_json(row["self_test"]),
        summary=parse_json(row["summary"]),
        cost_usd=row["cost_usd"] or 0.0,
        error=row["error"],
        imported_from=row["imported_from"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        heartbeat_at=row["heartbeat_at"],
        waves=row["n_waves"],
        experiments=row["n_experiments"],
        kept=row["n_kept"],
        winners=row["n_winners"],
        stop_reason=row.get("stop_reason"),
    )


def runs(db: sqlite_utils.Database) -> list[RunInfo]:
    """Every run, oldest first."""
    return [_run(r) for r in rows(db, _RUN_SQL + " ORDER BY r.id")]


def find_run(db: sqlite_utils.Database, ref: str | int) -> RunInfo:
    """A run by id or by name (a name that is all digits is tried as an id first)."""
    text = str(ref).strip()
    row = None
    if text.isascii() and text.isdigit() and int(text) < 2**63:  # beyond SQLite's INTEGER: a name
        row = one(db, _RUN_SQL + " WHERE r.id = ?", [int(text)])
    if row is None:
        row = one(db, _RUN_SQL + " WHERE r.name = ?", [text])
    if row is None:
        known = [r["name"] for r in rows(db, "SELECT name FROM runs ORDER BY id DESC LIMIT 5")]
        hint = f" (recent: {', '.join(known)})" if known else " (no runs yet)"
        raise UserError(f"run {text}: no such run id or name{hint}")
    return _run(row)


def waves(db: sqlite_utils.Database, run_id: int) -> list[WaveInfo]:
    return [
        WaveInfo(
            id=r["id"],
            run_id=r["run_id"],
            number=r["number"],
            baseline_commit=r["baseline_commit"],
            status=r["status"],
            started_at=r["started_at"],
            ended_at=r["ended_at"],
            experiments=r["n"],
            kept=r["k"],
        )
        for r in rows(
            db,
            """SELECT w.*, (SELECT count(*) FROM experiments e WHERE e.wave_id = w.id) AS n,
                      (SELECT count(*) FROM experiments e WHERE e.wave_id = w.id AND e.status = 'kept') AS k
               FROM waves w WHERE w.run_id = ? ORDER BY w.number""",
            [run_id],
        )
    ]


# --- experiments and decisions -----------------------------------------------------------------

_EXPERIMENT_SQL = """
SELECT e.*, w.number AS wave_number, k.name AS worker_name,
       COALESCE(e.hypothesis_id, p.hypothesis_id) AS hyp_id, h.title AS hyp_title,
       x.commit_sha AS winner_commit, x.patch_file AS winner_patch_file
FROM experiments e
LEFT JOIN waves w ON w.id = e.wave_id
LEFT JOIN workers k ON k.id = e.worker_id
LEFT JOIN patches p ON p.id = e.patch_id
LEFT JOIN hypotheses h ON h.id = COALESCE(e.hypothesis_id, p.hypothesis_id)
LEFT JOIN winners x ON x.experiment_id = e.id
"""

# The runner's last word: final first, then the newest; re-analyses never count.
_LATEST_DECISIONS_SQL = """
SELECT d.* FROM decisions d
WHERE d.origin != 'redecide' AND d.id = (
    SELECT d2.id FROM decisions d2
    WHERE d2.experiment_id = d.experiment_id AND d2.origin != 'redecide'
    ORDER BY d2.is_final DESC, d2.id DESC LIMIT 1)
"""


def latest_decision_rows(
    db: sqlite_utils.Database, experiment_ids: Sequence[int]
) -> dict[int, dict[str, Any]]:
    """The runner's last word on each experiment (see the module doc), as raw `decisions` rows
    keyed by experiment id; experiments without one are left out."""
    out: dict[int, dict[str, Any]] = {}
    for start in range(0, len(experiment_ids), 500):  # SQLite caps bound parameters
        chunk = list(experiment_ids[start : start + 500])
        marks = ", ".join("?" for _ in chunk)
        for row in rows(db, _LATEST_DECISIONS_SQL + f" AND d.experiment_id IN ({marks})", chunk):
            out[row["experiment_id"]] = row
    return out


def _latest_decisions(db: sqlite_utils.Database, experiment_ids: Sequence[int]) -> dict[int, DecisionInfo]:
    return {eid: DecisionInfo.from_row(r) for eid, r in latest_decision_rows(db, experiment_ids).items()}


def _sources_by_hypothesis(db: sqlite_utils.Database, ids: set[int]) -> dict[int, tuple[str, ...]]:
    return {hid: tuple(source_refs(db, hid)) for hid in ids}


def _experiments(
    db: sqlite_utils.Database, where: str, params: Sequence[Any], *, with_sources: bool = True
) -> list[ExperimentInfo]:
    found = rows(db, _EXPERIMENT_SQL + f" WHERE {where} ORDER BY e.id", list(params))
    decisions = _latest_decisions(db, [r["id"] for r in found])
    hyp_ids = {r["hyp_id"] for r in found if r["hyp_id"] is not None}
    sources = _sources_by_hypothesis(db, hyp_ids) if with_sources else {}
    return [
        ExperimentInfo(
            id=r["id"],
            run_id=r["run_id"],
            wave_id=r["wave_id"],
            wave=r["wave_number"],
            kind=r["kind"],
            title=r["title"],
            status=r["status"],
            phase=r["phase"],
            reason=r["reason"],
            patch_id=r["patch_id"],
            hypothesis_id=r["hyp_id"],
            hypothesis_title=r["hyp_title"],
            worker=r["worker_name"],
            baseline_commit=r["baseline_commit"],
            candidate_commit=r["candidate_commit"],
            retry_of=r["retry_of"],
            log_dir=r["log_dir"],
            batches=r["batches"],
            cost_usd=r["cost_usd"] or 0.0,
            meta=parse_json(r["meta"]) or {},
            created_at=r["created_at"],
            started_at=r["started_at"],
            ended_at=r["ended_at"],
            decision=decisions.get(r["id"]),
            winner_commit=r["winner_commit"],
            winner_patch_file=r["winner_patch_file"],
            sources=sources.get(r["hyp_id"], ()) if r["hyp_id"] is not None else (),
        )
        for r in found
    ]


def experiments(
    db: sqlite_utils.Database,
    run_id: int | None = None,
    *,
    wave_id: int | None = None,
    kinds: Sequence[str] | None = None,
    statuses: Sequence[str] | None = None,
) -> list[ExperimentInfo]:
    """Experiments (all, of a run, or of a wave) with their decision, hypothesis, sources, winner."""
    clauses: list[str] = ["1"]
    params: list[Any] = []
    if run_id is not None:
        clauses.append("e.run_id = ?")
        params.append(run_id)
    if wave_id is not None:
        clauses.append("e.wave_id = ?")
        params.append(wave_id)
    for column, values in (("e.kind", kinds), ("e.status", statuses)):
        if values:
            clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
            params.extend(values)
    return _experiments(db, " AND ".join(clauses), params)


def experiment_count(db: sqlite_utils.Database, run_id: int) -> int:
    found = one(db, "SELECT count(*) AS n FROM experiments WHERE run_id = ?", [run_id])
    return int(found["n"]) if found else 0


def experiments_page(
    db: sqlite_utils.Database, run_id: int, offset: int, limit: int, *, with_sources: bool = False
) -> list[ExperimentInfo]:
    """A run's experiments `offset` to `offset + limit` in id order, for tables that page.

    `sources` stay empty unless asked for: they take queries per hypothesis."""
    return _experiments(
        db,
        "e.id IN (SELECT id FROM experiments WHERE run_id = ? ORDER BY id LIMIT ? OFFSET ?)",
        [run_id, limit, offset],
        with_sources=with_sources,
    )


def experiment(db: sqlite_utils.Database, experiment_id: int) -> ExperimentInfo:
    found = _experiments(db, "e.id = ?", [experiment_id])
    if not found:
        raise UserError(f"experiment {experiment_id}: no such experiment")
    return found[0]


def decisions(
    db: sqlite_utils.Database, experiment_id: int, *, include_redecide: bool = True
) -> list[DecisionInfo]:
    """Every decision recorded for an experiment, oldest first (the looks of a sequential test)."""
    sql = "SELECT * FROM decisions WHERE experiment_id = ?"
    if not include_redecide:
        sql += " AND origin != 'redecide'"
    return [DecisionInfo.from_row(r) for r in rows(db, sql + " ORDER BY id", [experiment_id])]


# --- samples -----------------------------------------------------------------------------------


def samples(db: sqlite_utils.Database, experiment_id: int, metric: str | None = None) -> list[Sample]:
    """Raw samples in measurement order (pair, then A before B, then seq)."""
    sql = "SELECT pair, side, metric, seq, value, created_at FROM samples WHERE experiment_id = ?"
    params: list[Any] = [experiment_id]
    if metric is not None:
        sql += " AND metric = ?"
        params.append(metric)
    return [Sample(**r) for r in rows(db, sql + " ORDER BY pair, side, metric, seq", params)]


def metrics(db: sqlite_utils.Database, experiment_id: int) -> list[str]:
    """Metric names recorded for an experiment."""
    found = rows(
        db, "SELECT DISTINCT metric FROM samples WHERE experiment_id = ? ORDER BY metric", [experiment_id]
    )
    return [r["metric"] for r in found]


def paired_values(found: Sequence[Sample], metric: str) -> tuple[list[float], list[float]]:
    """(baseline, candidate) values per complete pair of one metric, in pair order.

    Several samples of one invocation reduce to their median (DESIGN: Measurement words); a pair
    missing a side (interrupted mid-pair) is left out.
    """
    from runner.stats import side_value

    by_pair: dict[int, dict[str, list[float]]] = defaultdict(lambda: {"A": [], "B": []})
    for s in found:
        if s.metric == metric:
            by_pair[s.pair][s.side].append(s.value)
    base: list[float] = []
    cand: list[float] = []
    for pair in sorted(by_pair):
        sides = by_pair[pair]
        if sides["A"] and sides["B"]:
            base.append(side_value(sides["A"]))
            cand.append(side_value(sides["B"]))
    return base, cand


def pairs(db: sqlite_utils.Database, experiment_id: int, metric: str) -> tuple[list[float], list[float]]:
    """(baseline, candidate) values per complete pair, read from the stored samples."""
    return paired_values(samples(db, experiment_id, metric), metric)


# --- events ------------------------------------------------------------------------------------


def events(
    db: sqlite_utils.Database,
    *,
    run_id: int | None = None,
    experiment_id: int | None = None,
    after_id: int = 0,
    limit: int = 500,
) -> list[Event]:
    """Events in order; `after_id` lets a follower read only what is new."""
    sql = "SELECT * FROM events WHERE id > ?"
    params: list[Any] = [after_id]
    if run_id is not None:
        sql += " AND run_id = ?"
        params.append(run_id)
    if experiment_id is not None:
        sql += " AND experiment_id = ?"
        params.append(experiment_id)
    found = rows(db, sql + " ORDER BY id LIMIT ?", [*params, limit])
    return [
        Event(
            id=r["id"],
            ts=r["ts"],
            level=r["level"],
            kind=r["kind"],
            run_id=r["run_id"],
            experiment_id=r["experiment_id"],
            message=r["message"],
            data=parse_json(r["data"]),
        )
        for r in found
    ]


# --- the JSON the CLI prints -------------------------------------------------------------------


def winners(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    return rows(
        db,
        """SELECT x.id, x.experiment_id, x.commit_sha, x.patch_file, x.position, x.created_at,
                  e.title
           FROM winners x JOIN experiments e ON e.id = x.experiment_id
           WHERE x.run_id = ? ORDER BY x.position, x.id""",
        [run_id],
    )


def run_json(db: sqlite_utils.Database, run: RunInfo, *, with_samples: bool = True) -> dict[str, Any]:
    """One run with its waves, experiments (decisions, raw samples), winners and events count."""
    out = run.to_json()
    out["waves"] = [w.to_json() for w in waves(db, run.id)]
    exps = []
    for exp in experiments(db, run.id):
        data = exp.to_json()
        data["decisions"] = [d.to_json() for d in decisions(db, exp.id)]
        if with_samples:
            data["samples"] = [s.to_json() for s in samples(db, exp.id)]
        exps.append(data)
    out["experiments"] = exps
    out["winners"] = winners(db, run.id)
    return out


def history_json(
    db: sqlite_utils.Database, run_id: int | None = None, *, with_samples: bool = True
) -> dict[str, Any]:
    """`{"runs": [...]}`: every run (or one), each with waves, experiments, decisions, raw samples.

    Every experiment carries at least id, title, status, effect, ci, pairs, hypothesis, sources and
    log_dir (the folder of its logs).
    """
    chosen = [find_run(db, run_id)] if run_id is not None else runs(db)
    return {"runs": [run_json(db, run, with_samples=with_samples) for run in chosen]}
