"""The autopilot's research phases as the console reads them: one row per phase of a run (its
`research_started` / `research_done` events, runner/measure/research_phase.py) and the steering
notes in force (runs.steering)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from kb.jsoncol import decoded
from kb.store.paging import one, shaped

if TYPE_CHECKING:
    import sqlite_utils


@dataclass(frozen=True)
class ResearchPhase:
    """One research phase: what it found and what its model calls cost."""

    number: int
    started_at: float
    ended_at: float | None
    """None while it runs (or when a kill cut it short: the resumed run does it again)."""
    mined: int = 0
    generated: int = 0
    patched: int = 0
    repaired: int = 0
    ported: int = 0
    repeats: int = 0
    failures: tuple[str, ...] = ()
    cost_usd: float = 0.0
    calls: int = 0

    @property
    def done(self) -> bool:
        return self.ended_at is not None


@dataclass(frozen=True)
class RunSteering:
    """runs.steering: the notes the next research phase reads, and the approval switch."""

    focus: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()
    approval: bool | None = None
    """None: the config's hypotheses.require_approval decides."""


class PhaseEvent(TypedDict):
    """A `research_started` or `research_done` event (data: its JSON text)."""

    ts: float
    kind: str
    data: str | None


def _int(data: dict[str, Any], key: str) -> int:
    """A count from a research event's decoded JSON (0 when missing or not a number)."""
    value = data.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def research_log(db: sqlite_utils.Database, run_id: int, *, limit: int = 50) -> list[ResearchPhase]:
    """A run's research phases, newest first: each `research_done` with its report, and a phase
    started but not (yet) done."""
    found = shaped(
        db,
        PhaseEvent,
        "SELECT ts, kind, data FROM events WHERE run_id = ? "
        "AND kind IN ('research_started', 'research_done') ORDER BY id",
        [run_id],
    )
    started: dict[int, float] = {}
    phases: dict[int, ResearchPhase] = {}
    for r in found:
        data = decoded(r["data"])
        if not isinstance(data, dict):
            continue
        number = _int(data, "phase")
        if r["kind"] == "research_started":
            started[number] = r["ts"]
            phases[number] = ResearchPhase(number, r["ts"], None)
            continue
        failures = data.get("failures")
        calls = data.get("call_ids")
        cost = data.get("cost_usd")
        phases[number] = ResearchPhase(
            number=number,
            started_at=started.get(number, r["ts"]),
            ended_at=r["ts"],
            mined=_int(data, "mined"),
            generated=_int(data, "generated"),
            patched=_int(data, "patched"),
            repaired=_int(data, "repaired"),
            ported=_int(data, "ported"),
            repeats=_int(data, "repeats"),
            failures=tuple(str(f) for f in failures) if isinstance(failures, list) else (),
            cost_usd=float(cost) if isinstance(cost, int | float) else 0.0,
            calls=len(calls) if isinstance(calls, list) else 0,
        )
    return sorted(phases.values(), key=lambda p: p.number, reverse=True)[:limit]


def run_steering(db: sqlite_utils.Database, run_id: int) -> RunSteering:
    """The focus and avoid notes and the approval switch a run holds now."""
    r = one(db, "SELECT steering FROM runs WHERE id = ?", [run_id])
    data = decoded(r["steering"]) if r else {}
    if not isinstance(data, dict):
        return RunSteering()

    def notes(key: str) -> tuple[str, ...]:
        value = data.get(key)
        return tuple(str(n) for n in value if str(n).strip()) if isinstance(value, list) else ()

    approval = data.get("approval")
    return RunSteering(notes("focus"), notes("avoid"), approval if isinstance(approval, bool) else None)
