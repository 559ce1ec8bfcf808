"""What the bundled demo's summary reads (runner/demo/summary.py and script.py): the rows behind
its printed account of a run. Reads only; the demo writes through the loop like any run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from kb.store.paging import one, shaped, shaped_one

if TYPE_CHECKING:
    import sqlite_utils

_HYP_COLUMNS = "id, title, origin, status"


class ExperimentOrigin(TypedDict):
    """Where a candidate came from: its hypothesis, meta (JSON text), the hypothesis's origin and
    the patch's diff_sha (each None when missing)."""

    hypothesis_id: int | None
    meta: str | None
    origin: str | None
    diff_sha: str | None


class UntriedHypothesis(TypedDict):
    """A hypothesis that never reached an experiment, with how many patches it has."""

    id: int
    title: str
    origin: str
    status: str
    repeat_of: int | None
    patches: int


class ResearchEvent(TypedDict):
    """An event the demo reads the research phases from (data: JSON text)."""

    id: int
    kind: str
    run_id: int | None
    data: str | None


class HypothesisBrief(TypedDict):
    """A hypothesis as the demo lists what a research phase found."""

    id: int
    title: str
    origin: str
    status: str


class CallPatch(TypedDict):
    """A patch a model call wrote, with its hypothesis's title."""

    id: int
    hypothesis_id: int
    title: str
    repair_of: int | None
    from_experiment: int | None


class SideSample(TypedDict):
    """One sample of one side (A or B) of an experiment."""

    metric: str
    value: float


def stop_reason(db: sqlite_utils.Database, run_id: int) -> str | None:
    found = one(db, "SELECT stop_reason FROM runs WHERE id = ?", [run_id])
    return found["stop_reason"] if found else None


def run_name_taken(db: sqlite_utils.Database, name: str) -> bool:
    return one(db, "SELECT id FROM runs WHERE name = ?", [name]) is not None


def experiment_origin(
    db: sqlite_utils.Database, experiment_id: int, patch_id: int | None
) -> ExperimentOrigin:
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


def never_tried(db: sqlite_utils.Database) -> list[UntriedHypothesis]:
    """Hypotheses that never reached an experiment, with their number of patches."""
    return shaped(
        db,
        UntriedHypothesis,
        "SELECT h.id, h.title, h.origin, h.status, h.repeat_of, "
        "(SELECT count(*) FROM patches p WHERE p.hypothesis_id = h.id) AS patches "
        "FROM hypotheses h WHERE NOT EXISTS (SELECT 1 FROM experiments e WHERE e.hypothesis_id = h.id) "
        "ORDER BY h.priority DESC, h.id",
    )


def research_events(db: sqlite_utils.Database, run_id: int) -> list[ResearchEvent]:
    """The run's research phases and wave starts, and every miners' event, in order."""
    return shaped(
        db,
        ResearchEvent,
        "SELECT id, kind, run_id, data FROM events WHERE (run_id = ? AND kind IN "
        "('research_started', 'research_done', 'wave_started')) OR kind = 'hypotheses.mine' ORDER BY id",
        [run_id],
    )


def hypothesis_brief(db: sqlite_utils.Database, hypothesis_id: int) -> HypothesisBrief | None:
    return shaped_one(
        db, HypothesisBrief, f"SELECT {_HYP_COLUMNS} FROM hypotheses WHERE id = ?", [hypothesis_id]
    )


def hypotheses_of_calls(db: sqlite_utils.Database, call_ids: Sequence[int]) -> list[HypothesisBrief]:
    if not call_ids:
        return []
    marks = ", ".join("?" for _ in call_ids)
    return shaped(
        db,
        HypothesisBrief,
        f"SELECT {_HYP_COLUMNS} FROM hypotheses WHERE llm_call_id IN ({marks}) ORDER BY id",
        list(call_ids),
    )


def patches_of_calls(db: sqlite_utils.Database, call_ids: Sequence[int]) -> list[CallPatch]:
    if not call_ids:
        return []
    marks = ", ".join("?" for _ in call_ids)
    return shaped(
        db,
        CallPatch,
        "SELECT p.id, p.hypothesis_id, h.title, p.repair_of, p.from_experiment FROM patches p "
        f"JOIN hypotheses h ON h.id = p.hypothesis_id WHERE p.llm_call_id IN ({marks}) ORDER BY p.id",
        list(call_ids),
    )


def side_samples(db: sqlite_utils.Database, experiment_id: int, side: str) -> list[SideSample]:
    return shaped(
        db,
        SideSample,
        "SELECT metric, value FROM samples WHERE experiment_id = ? AND side = ?",
        [experiment_id, side],
    )
