"""The loop's wiring: the measuring loop (runner.measure) with the research stage
(runner.research) plugged in through the interface the loop defines (`runner.measure.common.Research`).

Research and measure never import each other; this module sits above both, and every face starts
runs through it (the CLI's `run`, the console's start dialog by way of the CLI, the demo).
"""

from __future__ import annotations

import sqlite_utils

from kb.workspace import Workspace
from runner.measure.run import Progress, Runner, RunOptions, resume_run, start_run
from runner.research_io import ResearchReport, ResearchRequest


class LiteratureResearch:
    """The research stage as the loop sees it: after each wave, its post-mortem (the model's when
    one is configured, else a plain summary) becomes a KB note the next research phase reads; when
    the autopilot needs candidates, a research phase (runner/research/phase.py)."""

    def __init__(
        self, *, model: str | None = None, api_base: str | None = None, queue_protected: bool = False
    ) -> None:
        self.model = model
        self.api_base = api_base
        self.queue_protected = queue_protected
        """The miners also queue fork commits that touch a protected path, for the runner to refuse
        on the record (the demo shows that refusal); the loop's own research skips them."""

    def after_wave(self, ws: Workspace, db: sqlite_utils.Database, wave_id: int) -> int | None:
        from runner.research.reflection import reflect_on_wave  # the model's client, on use

        return reflect_on_wave(ws, db, wave_id, model=self.model, api_base=self.api_base)

    def research(self, ws: Workspace, db: sqlite_utils.Database, request: ResearchRequest) -> ResearchReport:
        from runner.research.phase import research_phase

        return research_phase(ws, db, request, queue_protected=self.queue_protected)


def start(ws: Workspace, options: RunOptions, progress: Progress | None = None) -> Runner:
    """A new run of the whole loop."""
    return start_run(ws, options, progress, research=_research_for(options))


def resume(ws: Workspace, run_id: int | None = None, progress: Progress | None = None) -> Runner:
    """An interrupted or paused run taken over, wired the same way (with the run's own --model)."""
    return resume_run(ws, run_id, progress, research=_research_for)


def _research_for(options: RunOptions) -> LiteratureResearch:
    return LiteratureResearch(model=options.model, api_base=options.api_base)
