"""The model calls the research phase logged (prompts, responses, tokens and cost), and the client's
own record of them (runner/llm.py: the budget, a replayed answer, a call and its error)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from kb.store.paging import one, rows, shaped_one

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


# --- the client's own record (runner/llm.py) ---------------------------------------------------


def spent_usd(db: sqlite_utils.Database) -> float:
    """What every LLM call so far cost (the budget's measure)."""
    found = one(db, "SELECT coalesce(sum(cost_usd), 0) AS spent FROM llm_calls")
    return float(found["spent"]) if found else 0.0


class StoredAnswer(TypedDict):
    """A logged call's id and its answer (never NULL: answer_for_step asks for one)."""

    id: int
    response: str


def answer_for_step(db: sqlite_utils.Database, step: str) -> StoredAnswer | None:
    """id and response of the newest call of this step that got an answer and no error."""
    return shaped_one(
        db,
        StoredAnswer,
        "SELECT id, response FROM llm_calls WHERE step = ? AND error IS NULL AND response IS NOT NULL "
        "ORDER BY id DESC LIMIT 1",
        [step],
    )


def create(db: sqlite_utils.Database, call: Mapping[str, Any]) -> int:
    """A call as the client records it: its row is built from the call's own columns (the prompt,
    the usage, the error), so it comes as a mapping."""
    from kb.db import insert

    return insert(db, "llm_calls", call)


def set_error(db: sqlite_utils.Database, call_id: int, error: str) -> None:
    from kb.db import update

    update(db, "llm_calls", call_id, {"error": error})
