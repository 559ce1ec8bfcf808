"""Decisions: the looks the measuring loop records, the verdicts the importer records, and the one
rule for an experiment's decision (`latest`, `latest_of`, `LATEST_DECISION_ID`).

An experiment's decision is the runner's last word on it: its final decision, else its latest one
(a `continue` while it still runs). Re-analyses stored by `redecide --save` (origin `redecide`)
never count. The runner's own decisions (origin `runner`) come before any other origin; an
experiment's non-redecide decisions all share one origin (the loop decides the experiments it runs,
the importer those it imports), so this is runner.record.history's rule to the letter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Required, TypedDict

from kb.store.paging import one, rows

if TYPE_CHECKING:
    import sqlite_utils


def latest_decision_id(experiment: str) -> str:
    """A scalar subquery: the id of the decision of the experiment whose id is the SQL expression
    `experiment` (a column such as `x.id`, or `?`). Queries that join an experiment to its decision
    embed this, so the rule is written once."""
    return (
        "(SELECT ld.id FROM decisions ld WHERE ld.experiment_id = "
        + experiment
        + " AND ld.origin != 'redecide' ORDER BY ld.origin = 'runner' DESC, ld.is_final DESC, ld.id DESC"
        " LIMIT 1)"
    )


@dataclass(frozen=True)
class Decision:
    """One row of decisions, as stored (policy and metrics are JSON text)."""

    id: int
    experiment_id: int
    verdict: str
    metric: str
    effect: float | None
    ci_low: float | None
    ci_high: float | None
    pairs: int
    p_value: float | None
    q_value: float | None
    noise: float | None
    reason: str | None
    policy: str | None
    metrics: str | None
    is_final: int
    origin: str
    created_at: float
    family: str | None
    """JSON {experiment id: pairs}: the family a look of the loop judged this one in (None before m011)."""


_COLUMNS = ", ".join(f"d.{name}" for name in Decision.__dataclass_fields__)


class NewDecision(TypedDict, total=False):
    """A decision to record; columns left out take the table's defaults."""

    experiment_id: Required[int]
    verdict: Required[str]
    metric: Required[str]
    effect: float | None
    ci_low: float | None
    ci_high: float | None
    pairs: Required[int]
    p_value: float | None
    q_value: float | None
    noise: float | None
    reason: str | None
    policy: dict[str, Any]
    metrics: dict[str, Any]
    is_final: int
    origin: str
    created_at: Required[float]
    family: dict[str, int]


def record(db: sqlite_utils.Database, decision: NewDecision) -> int:
    """Insert one decision (within the caller's transaction); its id."""
    from kb.db import insert

    return insert(db, "decisions", decision)


def has_runner_look(db: sqlite_utils.Database, experiment_id: int, pairs: int, is_final: bool) -> bool:
    """The loop recorded this look already (the same pairs, as final or not): a runner that
    restarted between a look and its experiment's end must not record it twice."""
    found = one(
        db,
        "SELECT id FROM decisions WHERE experiment_id = ? AND pairs = ? AND origin = 'runner' "
        "AND is_final = ?",
        [experiment_id, pairs, int(is_final)],
    )
    return found is not None


def latest(db: sqlite_utils.Database, experiment_id: int) -> Decision | None:
    """The experiment's decision (see the module doc), if it has one."""
    found = one(
        db, f"SELECT {_COLUMNS} FROM decisions d WHERE d.id = {latest_decision_id('?')}", [experiment_id]
    )
    return None if found is None else Decision(**found)


def latest_of(db: sqlite_utils.Database, experiment_ids: Sequence[int]) -> dict[int, Decision]:
    """The decision of each experiment, by experiment id; experiments without one are left out."""
    out: dict[int, Decision] = {}
    ids = list(experiment_ids)
    for start in range(0, len(ids), 500):  # under SQLite's bound-parameter limit
        chunk = ids[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        for r in rows(
            db,
            f"SELECT {_COLUMNS} FROM experiments x JOIN decisions d ON d.id = {latest_decision_id('x.id')} "
            f"WHERE x.id IN ({marks})",
            chunk,
        ):
            out[int(r["experiment_id"])] = Decision(**r)
    return out
