"""The runs table as the measuring loop and the importer write it: a run's row, its updates, the
runs a runner may take over, and free run names. The fleet pane's reads are kb.store.runs'."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Required, TypedDict

from kb.store.paging import one, rows, shaped, shaped_one
from kb.store.tables import RunRow, WinnerRow

if TYPE_CHECKING:
    import sqlite_utils


class NewRun(TypedDict, total=False):
    """A run to insert; columns left out take the table's defaults."""

    name: Required[str]
    status: Required[str]
    branch: str | None
    baseline_commit: str | None
    head_commit: str | None
    backend: str
    policy: dict[str, Any]
    budget: dict[str, Any]
    options: dict[str, Any]
    pid: int | None
    host: str | None
    cost_usd: float
    imported_from: str | None
    started_at: Required[float]
    ended_at: float | None
    heartbeat_at: float | None


class RunUpdate(TypedDict, total=False):
    """Columns of a run that change after its insert; only those given are written."""

    status: str
    head_commit: str | None
    branch: str | None
    pid: int | None
    host: str | None
    noise_floor: float | None
    self_test: dict[str, Any]
    summary: dict[str, Any] | str
    """A mapping is stored as JSON with sorted keys; text is stored as it is (JSON already)."""
    cost_usd: float
    error: str | None
    ended_at: float | None
    heartbeat_at: float | None
    budget: dict[str, Any]
    phase: str | None
    """researching, patching, measuring, reflecting (kb.vocabulary.PHASES); None when idle or over."""
    stop_reason: str | None
    steering: dict[str, Any]


def create(db: sqlite_utils.Database, run: NewRun) -> int:
    from kb.db import insert

    return insert(db, "runs", run)


def update(db: sqlite_utils.Database, run_id: int, values: RunUpdate) -> None:
    from kb.db import update as update_row

    update_row(db, "runs", run_id, values)


def row(db: sqlite_utils.Database, run_id: int) -> RunRow | None:
    """Every column of a run as stored: the loop's stages read its JSON columns (options, budget,
    self_test, summary) themselves."""
    return shaped_one(db, RunRow, "SELECT * FROM runs WHERE id = ?", [run_id])


@dataclass(frozen=True)
class RunProcess:
    """A run and the process that drives (or drove) it."""

    id: int
    name: str
    status: str
    pid: int | None
    host: str | None
    heartbeat_at: float | None


_PROCESS = "SELECT id, name, status, pid, host, heartbeat_at FROM runs"


def processes(
    db: sqlite_utils.Database, statuses: Sequence[str], *, measured_only: bool = False
) -> list[RunProcess]:
    """Runs in one of these statuses, in id order; `measured_only`: not imported from another
    loop's log (an imported run has no runner to resume)."""
    marks = ", ".join("?" for _ in statuses)
    imported = " AND imported_from IS NULL" if measured_only else ""
    found = rows(db, f"{_PROCESS} WHERE status IN ({marks}){imported} ORDER BY id", list(statuses))
    return [RunProcess(**r) for r in found]


def process(db: sqlite_utils.Database, run_id: int) -> RunProcess | None:
    found = one(db, f"{_PROCESS} WHERE id = ?", [run_id])
    return None if found is None else RunProcess(**found)


def count(db: sqlite_utils.Database) -> int:
    """How many runs the workspace holds (imported ones included)."""
    found = one(db, "SELECT count(*) AS n FROM runs")
    return int(found["n"]) if found else 0


def name_taken(db: sqlite_utils.Database, name: str) -> bool:
    return one(db, "SELECT id FROM runs WHERE name = ?", [name]) is not None


def free_name(db: sqlite_utils.Database, base: str) -> str:
    """`base`, else `base-2`, `base-3`, ...: the first no run has."""
    name, n = base, 1
    while name_taken(db, name):
        n += 1
        name = f"{base}-{n}"
    return name


def imported_names(db: sqlite_utils.Database, prefix: str) -> list[str]:
    """Names of the runs imported from a source starting with `prefix` (a LIKE pattern's start),
    in id order."""
    found = rows(db, "SELECT name FROM runs WHERE imported_from LIKE ? ORDER BY id", [prefix + "%"])
    return [r["name"] for r in found]


class StackedWinner(TypedDict):
    """A winner's place on its run's branch, as a run's summary carries it into its JSON."""

    experiment_id: int
    commit_sha: str
    patch_file: str | None
    position: int


def winner_rows(db: sqlite_utils.Database, run_id: int) -> list[StackedWinner]:
    """The run's winners in stacking order, as a run's summary carries them into its JSON."""
    return shaped(
        db,
        StackedWinner,
        "SELECT experiment_id, commit_sha, patch_file, position FROM winners "
        "WHERE run_id = ? ORDER BY position",
        [run_id],
    )


class WinnerPatch(WinnerRow):
    """A winner with its patch's diff and its experiment's title."""

    diff: str
    title: str


def winners_with_patches(db: sqlite_utils.Database, run_id: int) -> list[WinnerPatch]:
    """The run's winners in stacking order with their patch text and title (the final stage)."""
    return shaped(
        db,
        WinnerPatch,
        "SELECT w.*, p.diff, e.title FROM winners w JOIN experiments e ON e.id = w.experiment_id "
        "JOIN patches p ON p.id = e.patch_id WHERE w.run_id = ? ORDER BY w.position",
        [run_id],
    )


class CommittedExperiment(TypedDict):
    """The experiment a winner commit came from: its id and title."""

    experiment_id: int
    title: str


def winner_by_commit(db: sqlite_utils.Database, sha: str) -> CommittedExperiment | None:
    """The winner committed as `sha`, with its experiment's title."""
    return shaped_one(
        db,
        CommittedExperiment,
        "SELECT w.experiment_id, e.title FROM winners w JOIN experiments e ON e.id = w.experiment_id "
        "WHERE w.commit_sha = ?",
        [sha],
    )
