"""Launches: new workers named `ar-r<run>-<random>` (recorded before anything is launched),
launched `stagger_seconds` apart with `sky.launch` of the rendered template on the qualification
tree, unless the run's budget is spent; the launch request is followed on later ticks."""

from __future__ import annotations

import contextlib
import secrets
from typing import Any

from kb.db import now
from kb.store import workers
from runner.fleet.base import Worker
from runner.fleet.skypilot import sdk
from runner.fleet.skypilot.common import FleetEvents, FleetScope
from runner.fleet.skypilot.costs import CostMeter
from runner.fleet.skypilot.qualify import Qualifier
from runner.fleet.skypilot.tasks import (
    DEFAULT_ORIGIN,
    for_cluster,
    resources_config,
    sky_task,
    write_manifest,
)
from runner.fleet.skypilot.teardown import Teardown


class Launcher:
    """Records new workers and takes each from `waiting` through `sky.launch` to qualifying."""

    def __init__(
        self,
        scope: FleetScope,
        events: FleetEvents,
        teardown: Teardown,
        costs: CostMeter,
        qualifier: Qualifier,
    ) -> None:
        self.scope = scope
        self.records = scope.records
        self.events = events
        self.teardown = teardown
        self.costs = costs
        self.qualifier = qualifier

    def new_worker(self, launch_at: float) -> Worker:
        """A worker recorded (before anything is launched) to be launched at `launch_at`."""
        name = f"ar-r{self.scope.run_id}-{secrets.token_hex(3)}"
        conf = self.scope.conf
        return self.records.add(
            name,
            status="provisioning",
            resources=resources_config(conf),
            meta={"cluster": name, "phase": "waiting", "launch_at": launch_at},
            price_per_hour=conf.price_per_hour,
        )

    def next_launch_at(self) -> float:
        """The earliest time the next launch may go (stagger after the last one; 0: any time)."""
        previous = workers.last_launched_at(self.scope.db, self.scope.run_id, self.records.backend)
        return 0.0 if previous is None else float(previous) + self.scope.conf.stagger_seconds

    def provision(self, worker: Worker) -> None:
        """One step of a provisioning worker: launch it when its turn comes, or read its launch."""
        meta = worker.meta
        request = meta.get("launch_request")
        if request is None:
            if self.costs.budget_spent():
                self.records.update(worker.id, status="down", phase="not launched", reason="budget spent")
                self.events.event("worker_skipped", f"{worker.name}: not launched, the run's budget is spent")
                return
            stamp = now()
            if stamp < float(meta.get("launch_at") or 0) or stamp < self.next_launch_at():
                return
            self._launch(worker)
            return
        if sdk.request_status(str(request)) not in sdk.REQUEST_DONE:
            return
        try:
            job, handle = sdk.result(request)
        except Exception as exc:  # noqa: BLE001
            capacity = type(exc).__name__ == "ResourcesUnavailableError"
            why = f"{'no capacity' if capacity else 'launch failed'}: {sdk.error_line(exc)}"
            self.teardown.fail(worker.id, why)
            return
        if job is None:
            self.teardown.fail(worker.id, "launch submitted no qualification job")
            return
        price = self.scope.conf.price_per_hour
        launched = getattr(handle, "launched_resources", None)
        if price is None and launched is not None:
            with contextlib.suppress(Exception):
                price = float(launched.get_cost(3600))
        deadline = now() + self.qualifier.seconds()
        self.records.update(
            worker.id,
            status="qualifying",
            phase="qualifying",
            qualify_job=int(job),
            qualify_deadline=deadline,
            launched=str(launched) if launched is not None else None,
            price=price,
        )
        if price is not None:
            workers.update(self.scope.db, worker.id, {"price_per_hour": price})
        self.events.event("worker_launched", f"{worker.name}: up ({launched}); A/A qualification running")

    def _launch(self, worker: Worker) -> None:
        from runner.harness.template import render

        tree = self.qualifier.tree()
        nonce = secrets.token_hex(8)
        rendered = render(
            self._template(),
            name=f"ar-qualify-{worker.name}",
            workdir=tree,
            envs=self.qualifier.envs(nonce),
            resources_override=resources_config(self.scope.conf),
        )
        rendered = for_cluster(rendered)
        write_manifest(tree)
        task = sky_task(rendered, self._origin())
        self.records.update(worker.id, phase="launching", launched_at=now(), qualify_nonce=nonce)
        try:
            request = sdk.launch(task, worker.name)
        except Exception as exc:  # noqa: BLE001
            self.teardown.fail(worker.id, f"launch failed: {sdk.error_line(exc)}")
            return
        self.records.update(worker.id, launch_request=request)
        infra = self.scope.conf.infra or "any infra"
        self.events.event("worker_launching", f"{worker.name}: launching on {infra}")

    def _template(self) -> dict[str, Any]:
        from runner.harness.prepare import template_path
        from runner.harness.template import load_template

        return load_template(template_path(self.scope.ws, self.scope.settings))

    def _origin(self) -> str:
        from runner.harness.prepare import template_path

        return str(template_path(self.scope.ws, self.scope.settings) or DEFAULT_ORIGIN)
