"""Costs: a worker's price per hour times the time since its launch (workers.cost_usd), what an
experiment's jobs held their cluster for (experiments.cost_usd), SkyPilot's cost report where it
knows better, and the run's `budget.usd` (VM and LLM cost together) that stops new launches."""

from __future__ import annotations

from typing import Any

from kb.db import now
from kb.store import experiments, run_records
from kb.store import workers as store
from kb.store.workers import WorkerCost
from runner.fleet.base import _meta
from runner.fleet.skypilot import sdk
from runner.fleet.skypilot.common import LIVE, FleetScope


def worker_cost(row: WorkerCost, meta: dict[str, Any]) -> float | None:
    """The price per hour times the hours from launch to teardown (or now); None when unknown."""
    price, start = row["price_per_hour"], meta.get("launched_at")
    if price is None or start is None:
        return None
    end = meta.get("torn_down_at") or (
        None if row["status"] in LIVE or meta.get("teardown") == "pending" else row["ended_at"]
    )
    seconds = max(0.0, float(end or now()) - float(start))
    return float(price) * seconds / 3600


class CostMeter:
    """Keeps the run's worker and experiment costs current and says when its budget is spent."""

    def __init__(self, scope: FleetScope) -> None:
        self.scope = scope
        self.db = scope.db
        self.run_id = scope.run_id
        self.backend = scope.records.backend

    def update(self) -> None:
        """workers.cost_usd = price per hour x hours since launch (until torn down)."""
        for row in store.cost_rows(self.db, self.run_id, self.backend):
            meta = _meta(row["meta"])
            cost = worker_cost(row, meta)
            if cost is not None and abs(cost - float(row["cost_usd"] or 0)) > 1e-9:
                store.update(self.db, row["id"], {"cost_usd": cost})

    def reconcile(self) -> None:
        """Where SkyPilot's cost report knows a cluster's cost, it replaces the estimate."""
        names = store.launched(self.db, self.run_id, self.backend)
        if not names or self.scope.conf.price_per_hour is not None:
            return
        sdk.sky_module()  # SkyPilot missing is a UserError, not a missing report
        try:
            report = sdk.cost_report(days=30)
        except Exception:  # noqa: BLE001 - the estimate stays
            return
        for entry in report:
            total = entry.get("total_cost")
            if entry.get("name") in names and isinstance(total, int | float) and total > 0:
                store.update(self.db, names[entry["name"]], {"cost_usd": float(total)})

    def charge(self, worker_id: int, experiment_id: int | None, seconds: float) -> None:
        """The experiment pays for the seconds its job held the worker."""
        row = store.row(self.db, worker_id)
        price = row["price_per_hour"] if row else None
        if price and experiment_id is not None:
            experiments.add_cost(self.db, experiment_id, float(price) * seconds / 3600)

    def total(self) -> float:
        """What the run's workers cost so far."""
        return store.cost_of_run(self.db, self.run_id)

    def budget_spent(self) -> bool:
        """The run's `budget.usd` is reached (its machines and its model calls together)."""
        run = run_records.row(self.db, self.run_id)
        usd = _meta(run["budget"] if run else None).get("usd")
        if usd is None:
            return False
        from kb.store.runs import dollars_spent

        return dollars_spent(self.db, self.run_id, self.total()) >= float(usd)
