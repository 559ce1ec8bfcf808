"""What the measuring loop and the research stage hand each other (runner/measure asks,
runner/research answers, runner/autopilot wires them): below both, so neither imports the other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ResearchRequest:
    """What the loop tells the research stage when it needs candidates."""

    run_id: int
    phase: int
    """This research phase's number in the run (1: before the first wave); a phase cut short by a
    kill is done again under the same number, so its model calls' step keys match the stored ones."""
    want: int
    """Candidates wanted: the workers left without one."""
    waves_done: int
    last_wave_id: int | None
    """The wave whose post-mortem this phase reads (hypotheses record it as theirs)."""
    repairs: int
    """autopilot.repairs: attempts a failed patch may have."""
    model: str | None
    api_base: str | None
    require_approval: bool
    """Generated hypotheses wait for a person (`steer approval on`)."""
    explore: bool = True
    """The autopilot's phase: miners, new hypotheses and their patches. False (a plain run with a
    model): only repairs and ports of this run's own candidates."""
    focus: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()
    discover: bool | None = None
    """Read new literature (`run --discover/--no-discover`); None: kb.discovery.enabled decides."""
    progress: Callable[[str], None] | None = None
    on_phase: Callable[[str], None] | None = None
    """Told `researching` or `patching` as the phase moves on (the loop records it on the run)."""


@dataclass
class ResearchReport:
    """What one research phase did (stored in its `research_done` event)."""

    mined: int = 0
    generated: int = 0
    patched: int = 0
    repaired: int = 0
    ported: int = 0
    repeats: int = 0
    failures: list[str] = field(default_factory=list)
    cost_usd: float = 0.0
    call_ids: list[int] = field(default_factory=list)
    discovery: str = ""
    """Whether this phase read new literature, and why not when it did not."""
    discovered: list[dict[str, Any]] = field(default_factory=list)
    """Papers discovery ingested: {query, source, status, paper, title, message} each."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.mined, "mined"),
                (self.generated, "generated"),
                (self.patched, "patched"),
                (self.repaired, "repaired"),
                (self.ported, "ported"),
                (self.repeats, "repeats skipped"),
                (sum(d.get("status") == "added" for d in self.discovered), "papers read"),
            )
            if n
        ]
        cost = f", ${self.cost_usd:.4f}" if self.call_ids else ""
        failed = f", {len(self.failures)} failures" if self.failures else ""
        return (", ".join(parts) or "nothing new") + cost + failed
