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
from runner.fleet.skypilot.costs import CostsMixin
from runner.fleet.skypilot.qualify import QualifyMixin
from runner.fleet.skypilot.tasks import (
    DEFAULT_ORIGIN,
    for_cluster,
    resources_config,
    sky_task,
    write_manifest,
)


class LaunchMixin(QualifyMixin, CostsMixin):
    def _new_worker(self, launch_at: float) -> Worker:
        name = f"ar-r{self.run_id}-{secrets.token_hex(3)}"
        return self._add_worker(
            name,
            status="provisioning",
            resources=resources_config(self.conf),
            meta={"cluster": name, "phase": "waiting", "launch_at": launch_at},
            price_per_hour=self.conf.price_per_hour,
        )

    def _next_launch_at(self) -> float:
        """The earliest time the next launch may go (stagger after the last one; 0: any time)."""
        previous = workers.last_launched_at(self.db, self.run_id, self.backend)
        return 0.0 if previous is None else float(previous) + self.conf.stagger_seconds

    def _provision(self, worker: Worker) -> None:
        meta = worker.meta
        request = meta.get("launch_request")
        if request is None:
            if self._budget_spent():
                self._update_worker(worker.id, status="down", phase="not launched", reason="budget spent")
                self._event("worker_skipped", f"{worker.name}: not launched, the run's budget is spent")
                return
            stamp = now()
            if stamp < float(meta.get("launch_at") or 0) or stamp < self._next_launch_at():
                return
            self._launch(worker)
            return
        if sdk.request_status(str(request)) not in sdk.REQUEST_DONE:
            return
        try:
            job, handle = sdk.result(request)
        except Exception as exc:  # noqa: BLE001
            capacity = type(exc).__name__ == "ResourcesUnavailableError"
            self._fail(worker.id, f"{'no capacity' if capacity else 'launch failed'}: {sdk.error_line(exc)}")
            return
        if job is None:
            self._fail(worker.id, "launch submitted no qualification job")
            return
        price = self.conf.price_per_hour
        launched = getattr(handle, "launched_resources", None)
        if price is None and launched is not None:
            with contextlib.suppress(Exception):
                price = float(launched.get_cost(3600))
        deadline = now() + self._qualify_seconds()
        self._update_worker(
            worker.id,
            status="qualifying",
            phase="qualifying",
            qualify_job=int(job),
            qualify_deadline=deadline,
            launched=str(launched) if launched is not None else None,
            price=price,
        )
        if price is not None:
            workers.update(self.db, worker.id, {"price_per_hour": price})
        self._event("worker_launched", f"{worker.name}: up ({launched}); A/A qualification running")

    def _launch(self, worker: Worker) -> None:
        from runner.harness.template import render

        tree = self._qualify_tree()
        nonce = secrets.token_hex(8)
        rendered = render(
            self._template(),
            name=f"ar-qualify-{worker.name}",
            workdir=tree,
            envs=self._envs(nonce),
            resources_override=resources_config(self.conf),
        )
        rendered = for_cluster(rendered)
        write_manifest(tree)
        task = sky_task(rendered, self._origin())
        self._update_worker(worker.id, phase="launching", launched_at=now(), qualify_nonce=nonce)
        try:
            request = sdk.launch(task, worker.name)
        except Exception as exc:  # noqa: BLE001
            self._fail(worker.id, f"launch failed: {sdk.error_line(exc)}")
            return
        self._update_worker(worker.id, launch_request=request)
        self._event("worker_launching", f"{worker.name}: launching on {self.conf.infra or 'any infra'}")

    def _template(self) -> dict[str, Any]:
        from runner.harness.prepare import template_path
        from runner.harness.template import load_template

        return load_template(template_path(self.ws, self.settings))

    def _origin(self) -> str:
        from runner.harness.prepare import template_path

        return str(template_path(self.ws, self.settings) or DEFAULT_ORIGIN)
