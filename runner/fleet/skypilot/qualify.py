"""Qualification: a new cluster's first job is an A/A calibration of `qualify_pairs` pairs (the
baseline in both A and B, on the run's qualification tree); its noise (the per-sample CV of a side,
the larger one) must stay within `noise_limit`, or the cluster is downed and replaced."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb.db import now
from kb.errors import UserError
from kb.store import run_records, workers
from runner.fleet.base import Worker
from runner.fleet.skypilot import sdk
from runner.fleet.skypilot.common import CHECK_ERRORS, GONE, FleetEvents, FleetScope
from runner.fleet.skypilot.teardown import Teardown

if TYPE_CHECKING:
    import git

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


class Qualifier:
    """Follows each new cluster's A/A qualification job to `ready` (or fails the cluster), and
    keeps the run's qualification tree (the baseline in both A and B)."""

    def __init__(self, scope: FleetScope, events: FleetEvents, teardown: Teardown) -> None:
        self.scope = scope
        self.records = scope.records
        self.events = events
        self.teardown = teardown
        ws, run_id = scope.ws, scope.run_id
        self.tree_dir = ws.worktrees_dir / f"run{run_id}-qualify"
        self.logs_dir = ws.logs_dir / f"run{run_id}" / "fleet"
        self._checks: dict[int, str] = {}
        """Worker id -> in-flight `job_status` request for its qualification job."""
        self._check_errors: dict[int, int] = {}
        self._repo_handle: git.Repo | None = None

    def check(self, worker: Worker) -> None:
        """One step of a qualifying worker: ask for its job's status, read the answer, judge the log."""
        meta = worker.meta
        job = int(meta["qualify_job"])
        request = self._checks.get(worker.id)
        if request is None:
            if now() > float(meta.get("qualify_deadline") or now() + 1):
                self.teardown.fail(worker.id, "the A/A qualification ran past its deadline")
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
                self.teardown.lose(worker.id, f"{GONE}, while qualifying")
            elif errors >= CHECK_ERRORS:
                self.teardown.lose(worker.id, f"its qualification cannot be checked ({sdk.error_line(exc)})")
            return
        self._check_errors.pop(worker.id, None)
        status = statuses.get(job) if isinstance(statuses, dict) else None
        if status is None:
            self.teardown.fail(worker.id, "the A/A qualification job vanished")
            return
        name = sdk.status_value(status)
        if not sdk.job_finished(name):
            self.records.update(worker.id, phase=f"qualifying ({name.lower()})")
            return
        log = sdk.run_log(worker.name, job)
        if log is not None:
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            (self.logs_dir / f"{worker.name}-qualify.log").write_bytes(log)
        if name == "FAILED_SETUP":
            self.teardown.fail(worker.id, "setup failed (see the qualification log)")
            return
        if log is None:
            self.teardown.fail(
                worker.id, f"the A/A job ended {name.lower()} and its log could not be fetched"
            )
            return
        primary = self.scope.settings.metric.primary
        noise, why = qualification_noise(log, str(meta.get("qualify_nonce")), primary)
        if noise is None:
            self.teardown.fail(worker.id, f"qualification failed: {why}")
            return
        workers.update(self.scope.db, worker.id, {"noise": noise})
        limit = self.scope.conf.noise_limit
        if noise > limit:
            self.teardown.fail(worker.id, f"too noisy: A/A noise {noise:.1%} > limit {limit:.1%}")
            return
        self.records.update(worker.id, status="ready", phase="ready", qualified_at=now(), idle_since=now())
        self.events.event(
            "worker_ready", f"{worker.name}: qualified, A/A noise {noise:.1%} (limit {limit:.1%})"
        )

    def seconds(self) -> float:
        """How long a qualification may take: two builds and the A/A pairs, with a margin."""
        s, opts = self.scope.settings, self.scope.run_options()
        build = opts.get("build_timeout") or s.timeouts.build
        bench = opts.get("bench_timeout") or s.timeouts.bench
        return 2 * (build + 5) + self.scope.conf.qualify_pairs * 2 * (bench + 5) + QUALIFY_MARGIN_SECONDS

    def tree(self) -> Path:
        """The run's qualification tree, prepared once (the baseline in both A and B)."""
        from runner.harness.prepare import is_prepared, prepare_workdir, resolve_scripts

        tree = self.tree_dir
        if is_prepared(tree):  # a runner killed while preparing it left no mark: prepare again
            return tree
        ws, settings = self.scope.ws, self.scope.settings
        run = run_records.row(self.scope.db, self.scope.run_id)
        if run is None or not run["baseline_commit"]:
            raise UserError(f"run {self.scope.run_id}: no baseline commit to qualify clusters on")
        baseline = str(run["baseline_commit"])
        from runner.harness.patchpaths import protected_paths

        scripts = resolve_scripts(ws, settings)
        prepare_workdir(self._repo(), tree, baseline, baseline, scripts, protected_paths(ws, settings))
        return tree

    def remove_tree(self) -> None:
        """The qualification tree is removed at the end of the run."""
        if self.tree_dir.exists():
            from runner.harness.prepare import remove_workdir

            remove_workdir(self._repo(), self.tree_dir)

    def envs(self, nonce: str) -> dict[str, Any]:
        """The qualification job's envs: what a batch of the runner gets (runner/harness/batch.py),
        with the baseline in both trees."""
        from runner.harness.batch import Timeouts, batch_envs
        from runner.harness.prepare import resolve_scripts

        ws, s = self.scope.ws, self.scope.settings
        return batch_envs(
            ws,
            s,
            resolve_scripts(ws, s),
            Timeouts.of(s, self.scope.run_options()),
            experiment_id=0,
            title="worker qualification: the baseline against itself",
            batch=0,
            pair_start=0,
            pairs=self.scope.conf.qualify_pairs,
            run_checks=False,
            nonce=nonce,
        )

    def _repo(self) -> git.Repo:
        from kb import gitrepo

        if self._repo_handle is None:
            self._repo_handle = gitrepo.open_repo(self.scope.ws.mirror_path)
        return self._repo_handle
