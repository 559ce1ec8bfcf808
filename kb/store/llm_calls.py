"""The model calls the research phase logged (prompts, responses, tokens and cost)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kb.store.paging import one, rows

if TYPE_CHECKING:
    import sqlite_utils


@dataclass(frozen=True)
class LlmCall:
    """One row of llm_calls, its fields in the table's column order (`--json` prints them so)."""

    id: int
    purpose: str
    model: str
    api_base: str | None
    prompt: str
    response: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    duration_ms: int | None
    attempt: int
    error: str | None
    run_id: int | None
    hypothesis_id: int | None
    created_at: float
    step: str | None = None
    """The autopilot's step key (m010): a resumed research phase reuses the stored answer."""


@dataclass(frozen=True)
class LlmTotals:
    calls: int
    spent_usd: float


def latest(db: sqlite_utils.Database, limit: int, purpose: str | None = None) -> list[LlmCall]:
    """The newest calls first, of one purpose if given."""
    where = "WHERE purpose = ?" if purpose else ""
    found = rows(
        db,
        f"SELECT * FROM llm_calls {where} ORDER BY id DESC LIMIT ?",
        [*([purpose] if purpose else []), limit],
    )
    return [LlmCall(**r) for r in found]


def totals(db: sqlite_utils.Database) -> LlmTotals:
    r = one(db, "SELECT count(*) AS n, coalesce(sum(cost_usd), 0) AS spent FROM llm_calls") or {}
    # The sum as SQLite gives it (0 when no call has a cost), as `llm log --json` always printed it.
    return LlmTotals(int(r.get("n", 0)), r.get("spent", 0.0))


def cost_by_run(db: sqlite_utils.Database, run_ids: Sequence[int]) -> dict[int, float]:
    """The model spend of each run (runs without calls are left out)."""
    if not run_ids:
        return {}
    marks = ", ".join("?" for _ in run_ids)
    return {
        int(r["run_id"]): r["c"]  # as SQLite sums it, as `fleet status --json` printed it
        for r in rows(
            db,
            f"SELECT run_id, coalesce(sum(cost_usd), 0) AS c FROM llm_calls WHERE run_id IN ({marks}) "
            "GROUP BY run_id",
            list(run_ids),
        )
    }
