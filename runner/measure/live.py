"""The jobs this process is watching, and the fleet they run on."""

from __future__ import annotations

from collections.abc import Iterator

from runner.fleet import Fleet
from runner.measure.common import ActiveJob


class LiveJobs:
    """The fleet (once it is up) and the jobs submitted to it that have not ended, by job id."""

    def __init__(self) -> None:
        self.fleet_or_none: Fleet | None = None
        self.jobs: dict[int, ActiveJob] = {}

    @property
    def fleet(self) -> Fleet:
        assert self.fleet_or_none is not None, "the fleet is not up yet"
        return self.fleet_or_none

    def __iter__(self) -> Iterator[ActiveJob]:
        return iter(list(self.jobs.values()))

    def __len__(self) -> int:
        return len(self.jobs)

    def add(self, active: ActiveJob) -> None:
        self.jobs[active.ref.job_id] = active

    def drop(self, job_id: int) -> None:
        self.jobs.pop(job_id, None)

    def of(self, exp_id: int) -> list[ActiveJob]:
        return [a for a in self if a.experiment_id == exp_id]

    def has(self, exp_id: int) -> bool:
        return any(a.experiment_id == exp_id for a in self.jobs.values())

    def stop(self, active: ActiveJob, why: str) -> None:
        """Ask the fleet to end this job; `why` is what its end will be read as (cancel, timeout, ...)."""
        active.stopped = why
        self.fleet.cancel(active.ref)

    def cancel_all(self) -> None:
        """Every job cancelled at the fleet and forgotten here (the run's end)."""
        if self.fleet_or_none is not None:
            for active in self:
                self.fleet_or_none.cancel(active.ref)
        self.jobs.clear()

    def cost_usd(self) -> float:
        return self.fleet_or_none.cost_usd() if self.fleet_or_none is not None else 0.0
