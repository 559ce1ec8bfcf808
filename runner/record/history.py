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

from kb.errors import UserError
from kb.jsoncol import decoded, decoded_dict
from kb.store import history as store
from kb.store import samples as sample_store
from kb.store.history import LinkedExperiment, RunWithCounts, TitledWinner
from kb.store.tables import DecisionRow

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
from runner.record.sources import source_refs

# --- runs and waves ----------------------------------------------------------------------------


def _run(row: RunWithCounts) -> RunInfo:
    return RunInfo(
        id=row["id"],
        name=row["name"],
        status=row["status"],
        branch=row["branch"],
        baseline_commit=row["baseline_commit"],
        head_commit=row["head_commit"],
        backend=row["backend"],
        policy=decoded_dict(row["policy"]),
        budget=decoded_dict(row["budget"]),
        options=decoded_dict(row["options"]),
        noise_floor=finite(row["noise_floor"]),
        self_test=decoded(row["self_test"]),
        summary=decoded(row["summary"]),
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
        stop_reason=row["stop_reason"],
    )


def runs(db: sqlite_utils.Database) -> list[RunInfo]:
    """Every run, oldest first."""
    return [_run(r) for r in store.run_rows(db)]


def find_run(db: sqlite_utils.Database, ref: str | int) -> RunInfo:
    """A run by id or by name (a name that is all digits is tried as an id first)."""
    text = str(ref).strip()
    row = None
    if text.isascii() and text.isdigit() and int(text) < 2**63:  # beyond SQLite's INTEGER: a name
        row = store.run_by_id(db, int(text))
    if row is None:
        row = store.run_by_name(db, text)
    if row is None:
        known = store.recent_run_names(db, 5)
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
        for r in store.wave_rows(db, run_id)
    ]


# --- experiments and decisions -----------------------------------------------------------------


def latest_decision_rows(db: sqlite_utils.Database, experiment_ids: Sequence[int]) -> dict[int, DecisionRow]:
    """The runner's last word on each experiment (see the module doc), as whole `decisions` rows
    keyed by experiment id; experiments without one are left out."""
    return store.latest_decision_rows(db, experiment_ids)


def _latest_decisions(db: sqlite_utils.Database, experiment_ids: Sequence[int]) -> dict[int, DecisionInfo]:
    return {eid: DecisionInfo.from_row(r) for eid, r in latest_decision_rows(db, experiment_ids).items()}


def _sources_by_hypothesis(db: sqlite_utils.Database, ids: set[int]) -> dict[int, tuple[str, ...]]:
    return {hid: tuple(source_refs(db, hid)) for hid in ids}


def _experiments(
    db: sqlite_utils.Database, found: list[LinkedExperiment], *, with_sources: bool = True
) -> list[ExperimentInfo]:
    """Typed experiments from `kb.store.history.experiment_rows`' rows, with their decisions."""
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
            meta=decoded_dict(r["meta"]),
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
    found = store.experiment_rows(db, run_id=run_id, wave_id=wave_id, kinds=kinds, statuses=statuses)
    return _experiments(db, found)


def experiment_count(db: sqlite_utils.Database, run_id: int) -> int:
    return store.experiment_count(db, run_id)


def experiments_page(
    db: sqlite_utils.Database, run_id: int, offset: int, limit: int, *, with_sources: bool = False
) -> list[ExperimentInfo]:
    """A run's experiments `offset` to `offset + limit` in id order, for tables that page.

    `sources` stay empty unless asked for: they take queries per hypothesis."""
    return _experiments(db, store.experiment_page_rows(db, run_id, offset, limit), with_sources=with_sources)


def experiment(db: sqlite_utils.Database, experiment_id: int) -> ExperimentInfo:
    found = _experiments(db, store.experiment_rows(db, experiment_id=experiment_id))
    if not found:
        raise UserError(f"experiment {experiment_id}: no such experiment")
    return found[0]


def decisions(
    db: sqlite_utils.Database, experiment_id: int, *, include_redecide: bool = True
) -> list[DecisionInfo]:
    """Every decision recorded for an experiment, oldest first (the looks of a sequential test)."""
    found = store.decision_rows(db, experiment_id, include_redecide=include_redecide)
    return [DecisionInfo.from_row(r) for r in found]


# --- samples -----------------------------------------------------------------------------------


def samples(db: sqlite_utils.Database, experiment_id: int, metric: str | None = None) -> list[Sample]:
    """Raw samples in measurement order (pair, then A before B, then seq)."""
    return [Sample(**r) for r in store.sample_rows(db, experiment_id, metric)]


def metrics(db: sqlite_utils.Database, experiment_id: int) -> list[str]:
    """Metric names recorded for an experiment."""
    return sample_store.metrics(db, experiment_id)


def paired_values(found: Sequence[Sample], metric: str) -> tuple[list[float], list[float]]:
    """(baseline, candidate) values per complete pair of one metric, in pair order
    (runner.stats.pair_values: the median of each side's samples, complete pairs only)."""
    from runner.stats import pair_values

    by_pair: dict[int, dict[str, list[float]]] = defaultdict(lambda: {"A": [], "B": []})
    for s in found:
        if s.metric == metric:
            by_pair[s.pair][s.side].append(s.value)
    return pair_values(by_pair)


def pairs(db: sqlite_utils.Database, experiment_id: int, metric: str) -> tuple[list[float], list[float]]:
    """(baseline, candidate) values per complete pair, read from the stored samples."""
    from runner.stats import pair_values

    return pair_values(sample_store.by_pair(db, experiment_id, metric))


def wall_values(meta: dict[str, Any]) -> tuple[list[float], list[float]]:
    """(baseline, candidate) seconds of the harness's own clock per complete pair, from an
    experiment's meta `wall` ({pair: {side: seconds}}, written by the loop after each batch)."""
    wall = meta.get("wall")
    if not isinstance(wall, dict):
        return [], []
    found = sorted((int(pair), sides) for pair, sides in wall.items() if "A" in sides and "B" in sides)
    return [float(sides["A"]) for _, sides in found], [float(sides["B"]) for _, sides in found]


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
    found = store.event_rows(db, run_id=run_id, experiment_id=experiment_id, after_id=after_id, limit=limit)
    return [
        Event(
            id=r["id"],
            ts=r["ts"],
            level=r["level"],
            kind=r["kind"],
            run_id=r["run_id"],
            experiment_id=r["experiment_id"],
            message=r["message"],
            data=decoded(r["data"]),
        )
        for r in found
    ]


# --- the JSON the CLI prints -------------------------------------------------------------------


def winners(db: sqlite_utils.Database, run_id: int) -> list[TitledWinner]:
    return store.winner_rows(db, run_id)


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
