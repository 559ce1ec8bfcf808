"""What the bundled demo's summary reads (runner/demo/summary.py and script.py): the rows behind
its printed account of a run. Reads only; the demo writes through the loop like any run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kb.store.paging import one, rows

if TYPE_CHECKING:
    import sqlite_utils

_HYP_COLUMNS = "id, title, origin, status"


def stop_reason(db: sqlite_utils.Database, run_id: int) -> str | None:
    found = one(db, "SELECT stop_reason FROM runs WHERE id = ?", [run_id])
    return found["stop_reason"] if found else None


def run_name_taken(db: sqlite_utils.Database, name: str) -> bool:
    return one(db, "SELECT id FROM runs WHERE name = ?", [name]) is not None


def experiment_origin(db: sqlite_utils.Database, experiment_id: int, patch_id: int | None) -> dict[str, Any]:
    """An experiment's hypothesis id, meta, the hypothesis's origin and the patch's diff_sha."""
    row = one(db, "SELECT hypothesis_id, meta FROM experiments WHERE id = ?", [experiment_id])
    hid = row["hypothesis_id"] if row else None
    hyp = one(db, "SELECT origin FROM hypotheses WHERE id = ?", [hid]) if hid else None
    patch = one(db, "SELECT diff_sha FROM patches WHERE id = ?", [patch_id]) if patch_id else None
    return {
        "hypothesis_id": hid,
        "meta": row["meta"] if row else None,
        "origin": hyp["origin"] if hyp else None,
        "diff_sha": patch["diff_sha"] if patch else None,
    }


def never_tried(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """Hypotheses that never reached an experiment, with their number of patches."""
    return rows(
        db,
        "SELECT h.id, h.title, h.origin, h.status, h.repeat_of, "
        "(SELECT count(*) FROM patches p WHERE p.hypothesis_id = h.id) AS patches "
        "FROM hypotheses h WHERE NOT EXISTS (SELECT 1 FROM experiments e WHERE e.hypothesis_id = h.id) "
        "ORDER BY h.priority DESC, h.id",
    )


def research_events(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    """The run's research phases and wave starts, and every miners' event, in order."""
    return rows(
        db,
        "SELECT id, kind, run_id, data FROM events WHERE (run_id = ? AND kind IN "
        "('research_started', 'research_done', 'wave_started')) OR kind = 'hypotheses.mine' ORDER BY id",
        [run_id],
    )


def hypothesis_brief(db: sqlite_utils.Database, hypothesis_id: int) -> dict[str, Any] | None:
    return one(db, f"SELECT {_HYP_COLUMNS} FROM hypotheses WHERE id = ?", [hypothesis_id])


def hypotheses_of_calls(db: sqlite_utils.Database, call_ids: Sequence[int]) -> list[dict[str, Any]]:
    if not call_ids:
        return []
    marks = ", ".join("?" for _ in call_ids)
    return rows(
        db,
        f"SELECT {_HYP_COLUMNS} FROM hypotheses WHERE llm_call_id IN ({marks}) ORDER BY id",
        list(call_ids),
    )


def patches_of_calls(db: sqlite_utils.Database, call_ids: Sequence[int]) -> list[dict[str, Any]]:
    if not call_ids:
        return []
    marks = ", ".join("?" for _ in call_ids)
    return rows(
        db,
        "SELECT p.id, p.hypothesis_id, h.title, p.repair_of, p.from_experiment FROM patches p "
        f"JOIN hypotheses h ON h.id = p.hypothesis_id WHERE p.llm_call_id IN ({marks}) ORDER BY p.id",
        list(call_ids),
    )


def side_samples(db: sqlite_utils.Database, experiment_id: int, side: str) -> list[dict[str, Any]]:
    return rows(
        db, "SELECT metric, value FROM samples WHERE experiment_id = ? AND side = ?", [experiment_id, side]
    )
