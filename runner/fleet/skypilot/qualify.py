"""Qualification: a new cluster's first job is an A/A calibration of `qualify_pairs` pairs (the
baseline in both A and B, on the run's qualification tree); its noise (the per-sample CV of a side,
the larger one) must stay within `noise_limit`, or the cluster is downed and replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kb.db import now
from kb.errors import UserError
from kb.store import run_records, workers
from runner.fleet.base import Worker
from runner.fleet.skypilot import sdk
from runner.fleet.skypilot.state import CHECK_ERRORS, GONE
from runner.fleet.skypilot.teardown import TeardownMixin

QUALIFY_MARGIN_SECONDS = 600


def qualification_noise(log: bytes, nonce: str, metric: str) -> tuple[float | None, str]:
    """The A/A noise of a qualification job's log: (noise, "") or (None, why it has none)."""
    from runner import stats
    from runner.harness.protocol import LogParser

    parser = LogParser(nonce)
    parser.feed(log)
    parser.finish()
    state = parser.state
    if state.status != "done":
        how = f"ended {state.status}" if state.status else "ended without a status"
        return None, f"the A/A job {how}" + (f" ({state.reason})" if state.reason else "")
    sides: dict[str, list[float]] = {"A": [], "B": []}
    for inv in state.invocations:
        values = [s.value for s in inv.samples if s.metric == metric]
        if values:
            sides[inv.side].append(stats.side_value(values))
    noises = [n for n in (stats.noise(sides["A"]), stats.noise(sides["B"])) if n is not None]
    if not noises:
        return None, f"the A/A job printed too few METRIC {metric} samples"
    return max(noises), ""


class QualifyMixin(TeardownMixin):
    def _qualify(self, worker: Worker) -> None:
        meta = worker.meta
        job = int(meta["qualify_job"])
        request = self._checks.get(worker.id)
        if request is None:
            if now() > float(meta.get("qualify_deadline") or now() + 1):
                self._fail(worker.id, "the A/A qualification ran past its deadline")
                return
            self._checks[worker.id] = sdk.job_status(worker.name, [job])
            return
        if sdk.request_status(request) not in sdk.REQUEST_DONE:
            return
        del self._checks[worker.id]
        try:
            statuses = sdk.result(request)
        except Exception as exc:  # noqa: BLE001
            errors = self._check_errors.get(worker.id, 0) + 1
            self._check_errors[worker.id] = errors
            if sdk.cluster_gone(worker.name):
                self._lose_worker(worker.id, f"{GONE}, while qualifying")
            elif errors >= CHECK_ERRORS:
                self._lose_worker(worker.id, f"its qualification cannot be checked ({sdk.error_line(exc)})")
            return
        self._check_errors.pop(worker.id, None)
        status = statuses.get(job) if isinstance(statuses, dict) else None
        if status is None:
            self._fail(worker.id, "the A/A qualification job vanished")
            return
        name = sdk.status_value(status)
        if not sdk.job_finished(name):
            self._update_worker(worker.id, phase=f"qualifying ({name.lower()})")
            return
        log = sdk.run_log(worker.name, job)
        if log is not None:
            self.fleet_logs.mkdir(parents=True, exist_ok=True)
            (self.fleet_logs / f"{worker.name}-qualify.log").write_bytes(log)
        if name == "FAILED_SETUP":
            self._fail(worker.id, "setup failed (see the qualification log)")
            return
        if log is None:
            self._fail(worker.id, f"the A/A job ended {name.lower()} and its log could not be fetched")
            return
        noise, why = qualification_noise(log, str(meta.get("qualify_nonce")), self.settings.metric.primary)
        if noise is None:
            self._fail(worker.id, f"qualification failed: {why}")
            return
        workers.update(self.db, worker.id, {"noise": noise})
        limit = self.conf.noise_limit
        if noise > limit:
            self._fail(worker.id, f"too noisy: A/A noise {noise:.1%} > limit {limit:.1%}")
            return
        self._update_worker(worker.id, status="ready", phase="ready", qualified_at=now(), idle_since=now())
        self._event("worker_ready", f"{worker.name}: qualified, A/A noise {noise:.1%} (limit {limit:.1%})")

    def _qualify_seconds(self) -> float:
        s, opts = self.settings, self._run_options()
        build = opts.get("build_timeout") or s.timeouts.build
        bench = opts.get("bench_timeout") or s.timeouts.bench
        return 2 * (build + 5) + self.conf.qualify_pairs * 2 * (bench + 5) + QUALIFY_MARGIN_SECONDS

    def _qualify_tree(self) -> Path:
        from runner.harness.prepare import is_prepared, prepare_workdir, resolve_scripts

        tree = self.qualify_dir
        if is_prepared(tree):  # a runner killed while preparing it left no mark: prepare again
            return tree
        run = run_records.row(self.db, self.run_id)
        if run is None or not run["baseline_commit"]:
            raise UserError(f"run {self.run_id}: no baseline commit to qualify clusters on")
        baseline = str(run["baseline_commit"])
        from runner.harness.patchpaths import protected_paths

        scripts = resolve_scripts(self.ws, self.settings)
        prepare_workdir(
            self._repo(), tree, baseline, baseline, scripts, protected_paths(self.ws, self.settings)
        )
        return tree

    def _envs(self, nonce: str) -> dict[str, Any]:
        """The qualification job's envs: what a batch of the runner gets (runner/harness/batch.py),
        with the baseline in both trees."""
        from runner.harness.batch import Timeouts, batch_envs
        from runner.harness.prepare import resolve_scripts

        s = self.settings
        return batch_envs(
            self.ws,
            s,
            resolve_scripts(self.ws, s),
            Timeouts.of(s, self._run_options()),
            experiment_id=0,
            title="worker qualification: the baseline against itself",
            batch=0,
            pair_start=0,
            pairs=self.conf.qualify_pairs,
            run_checks=False,
            nonce=nonce,
        )
