"""The autopilot's side of the loop: when to ask the research stage for candidates, and the
plateau. The research itself (miners, the model, repairs, ports, novelty) is the research stage's,
reached through `Research` (runner/measure/common.py), which runner.autopilot implements.

A research phase is recorded as two events, `research_started` and `research_done` (with its
report and cost); one that a kill cut short has no `research_done`, and the resumed run does it
again under the same number, so the model calls whose answers were stored are not paid twice."""

from __future__ import annotations

from kb.store import events, waves
from kb.store.hypotheses import RunnablePatch
from runner.measure.common import Research, Stop
from runner.measure.context import RunContext
from runner.measure.steering import Steering
from runner.research_io import ResearchReport, ResearchRequest


class Cadence:
    """When the run asks the research stage for candidates, and when it has reached a plateau."""

    def __init__(self, ctx: RunContext, steering: Steering, research: Research | None) -> None:
        self.ctx = ctx
        self.steering = steering
        self.research = research
        """The research stage, as this loop sees it (runner.autopilot wires it); None: measure only."""

    def runnable(self, limit: int) -> list[RunnablePatch]:
        from runner.hypotheses import runnable

        return runnable(self.ctx.db, require_approval=self.steering.require_approval(), limit=limit)

    def _research_number(self) -> int:
        """This run's next research phase: one more than those that finished."""
        return events.count(self.ctx.db, self.ctx.run_id, "research_done") + 1

    def _wanted(self) -> int:
        """Candidates a research phase should find: before the first wave, and whenever fewer
        candidates are ready than workers, the workers left without one (the autopilot; a plain run
        with a model only repairs and ports its own candidates then); 0: no phase."""
        if self.research is None or not (self.ctx.state.autopilot or self.ctx.state.has_model):
            return 0
        return max(0, self.ctx.state.parallel - len(self.runnable(self.ctx.state.parallel)))

    def research_phase(self) -> ResearchReport | None:
        want = self._wanted()
        if not want:
            return None
        assert self.research is not None
        self.steering.housekeeping()  # a pause or stop sent meanwhile is read first
        number = self._research_number()
        steering = self.steering.notes()

        request = ResearchRequest(
            run_id=self.ctx.run_id,
            phase=number,
            want=want,
            waves_done=waves.count(self.ctx.db, self.ctx.run_id, finished_only=True),
            last_wave_id=waves.last_finished_id(self.ctx.db, self.ctx.run_id),
            repairs=self.ctx.settings.autopilot.repairs,
            model=self.ctx.state.options.model,
            api_base=self.ctx.state.options.api_base,
            require_approval=self.steering.require_approval(),
            focus=tuple(steering.get("focus") or ()),
            avoid=tuple(steering.get("avoid") or ()),
            explore=self.ctx.state.autopilot,
            progress=self.ctx.progress,
            on_phase=self.ctx.set_phase,
        )
        self.ctx.set_phase("researching")
        self.ctx.event("research_started", f"research phase {number}", data={"phase": number})
        self.ctx.say(f"research phase {number}: looking for {request.want} new candidate(s)")
        try:
            report = self.research.research(self.ctx.ws, self.ctx.db, request)
        except Exception as exc:  # the run matters more than one phase: go on with what is queued
            report = ResearchReport(failures=[f"{type(exc).__name__}: {exc}"])
        self.ctx.event(
            "research_done",
            f"research phase {number}: {report.line()}",
            level="warning" if report.failures else "info",
            data={"phase": number, **report.to_json()},
        )
        for failure in report.failures[:5]:
            self.ctx.say(f"  research: {failure}")
        self.ctx.say(f"research phase {number}: {report.line()}")
        self.ctx.set_phase("measuring")
        return report

    def plateau(self) -> Stop | None:
        """autopilot.patience finished waves in a row without a keep."""
        if not self.ctx.state.autopilot:
            return None
        patience = self.ctx.settings.autopilot.patience
        keeps = waves.recent_keeps(self.ctx.db, self.ctx.run_id, patience)
        if len(keeps) >= patience and not any(keeps):
            return Stop("plateau", f"plateau: {patience} waves in a row without a keep")
        return None
