"""The autopilot's side of the loop: when to ask the research stage for candidates, and the
plateau. The research itself (miners, the model, repairs, ports, novelty) is the research stage's,
reached through `Research` (runner/measure/common.py), which runner.autopilot implements.

A research phase is recorded as two events, `research_started` and `research_done` (with its
report and cost); one that a kill cut short has no `research_done`, and the resumed run does it
again under the same number, so the model calls whose answers were stored are not paid twice."""

from __future__ import annotations

from kb.store import events, run_records, waves
from kb.store.hypotheses import RunnablePatch
from runner.measure.common import Stop
from runner.measure.scheduler import Scheduler
from runner.research_io import ResearchReport, ResearchRequest


class Researching(Scheduler):
    """The research phase and the plateau, between waves."""

    def _runnable(self, limit: int) -> list[RunnablePatch]:
        from runner.hypotheses import runnable

        return runnable(self.db, require_approval=self._require_approval(), limit=limit)

    @property
    def autopilot(self) -> bool:
        chosen = self.options.autopilot
        return bool(chosen) if chosen is not None else self.settings.autopilot.enabled

    def _set_phase(self, phase: str | None) -> None:
        run_records.update(self.db, self.run_id, {"phase": phase})

    def _research_number(self) -> int:
        """This run's next research phase: one more than those that finished."""
        return events.count(self.db, self.run_id, "research_done") + 1

    @property
    def has_model(self) -> bool:
        return bool(self.options.model or self.settings.llm.model)

    def _wanted(self) -> int:
        """Candidates a research phase should find: before the first wave, and whenever fewer
        candidates are ready than workers, the workers left without one (the autopilot; a plain run
        with a model only repairs and ports its own candidates then); 0: no phase."""
        if self.research is None or not (self.autopilot or self.has_model):
            return 0
        return max(0, self.parallel - len(self._runnable(self.parallel)))

    def _research_phase(self) -> ResearchReport | None:
        want = self._wanted()
        if not want:
            return None
        assert self.research is not None
        self._housekeeping()  # a pause or stop sent meanwhile is read first
        number = self._research_number()
        steering = self._steering()

        request = ResearchRequest(
            run_id=self.run_id,
            phase=number,
            want=want,
            waves_done=waves.count(self.db, self.run_id, finished_only=True),
            last_wave_id=waves.last_finished_id(self.db, self.run_id),
            repairs=self.settings.autopilot.repairs,
            model=self.options.model,
            api_base=self.options.api_base,
            require_approval=self._require_approval(),
            focus=tuple(steering.get("focus") or ()),
            avoid=tuple(steering.get("avoid") or ()),
            explore=self.autopilot,
            progress=self.progress,
            on_phase=self._set_phase,
        )
        self._set_phase("researching")
        self._event("research_started", f"research phase {number}", data={"phase": number})
        self._say(f"research phase {number}: looking for {request.want} new candidate(s)")
        try:
            report = self.research.research(self.ws, self.db, request)
        except Exception as exc:  # the run matters more than one phase: go on with what is queued
            report = ResearchReport(failures=[f"{type(exc).__name__}: {exc}"])
        self._event(
            "research_done",
            f"research phase {number}: {report.line()}",
            level="warning" if report.failures else "info",
            data={"phase": number, **report.to_json()},
        )
        for failure in report.failures[:5]:
            self._say(f"  research: {failure}")
        self._say(f"research phase {number}: {report.line()}")
        self._set_phase("measuring")
        return report

    def _plateau(self) -> Stop | None:
        """autopilot.patience finished waves in a row without a keep."""
        if not self.autopilot:
            return None
        patience = self.settings.autopilot.patience
        keeps = waves.recent_keeps(self.db, self.run_id, patience)
        if len(keeps) >= patience and not any(keeps):
            return Stop("plateau", f"plateau: {patience} waves in a row without a keep")
        return None
