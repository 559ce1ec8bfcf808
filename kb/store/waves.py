"""Waves: a run's batches of experiments measured against one baseline, as the loop and the
importer write them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Required, TypedDict

if TYPE_CHECKING:
    import sqlite_utils


class NewWave(TypedDict, total=False):
    """A wave to insert; columns left out take the table's defaults (status `running`)."""

    run_id: Required[int]
    number: Required[int]
    baseline_commit: Required[str]
    status: str
    started_at: Required[float]
    ended_at: float | None


class WaveUpdate(TypedDict, total=False):
    """Columns of a wave that change after its insert; only those given are written."""

    status: str
    reflection_evidence_id: int | None
    ended_at: float | None


def create(db: sqlite_utils.Database, wave: NewWave) -> int:
    from kb.db import insert

    return insert(db, "waves", wave)


def update(db: sqlite_utils.Database, wave_id: int, values: WaveUpdate) -> None:
    from kb.db import update as update_row

    update_row(db, "waves", wave_id, values)
