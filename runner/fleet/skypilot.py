"""The SkyPilot fleet: experiment batches on SkyPilot clusters (clouds, Kubernetes, Slurm).

This is the only module that imports `sky`, lazily, after switching SkyPilot's telemetry off unless
the environment already decided (SKYPILOT_DISABLE_USAGE_COLLECTION, DO_NOT_TRACK,
SCARF_NO_ANALYTICS; the local API server inherits them when the first call starts it). SkyPilot
reads its own settings (SKY_RUNTIME_DIR, SKYPILOT_GLOBAL_CONFIG, the API server port) when it is
imported: they belong in the environment before the runner starts.

Workers are clusters, at most `fleet.skypilot.max_clusters` of a run at once, named
`ar-r<run>-<random>` and recorded in the `workers` table before anything is launched:

- A cluster is launched (`sky.launch`, launches `stagger_seconds` apart) with the rendered
  experiment template on a qualification tree (the baseline in both A and B), so it runs the
  template's `setup` once and its first job is an A/A calibration of `qualify_pairs` pairs. A
  cluster whose noise (the per-sample CV of a side, the larger one) exceeds `noise_limit` is downed
  and replaced, as are clusters that find no capacity (ResourcesUnavailableError), fail their setup
  or their calibration; `max_failures` of those in a row stop the run with the last reason.
- Batches go to qualified clusters with `sky.exec`: no setup again, the workdir (the experiment's
  own prepared tree) is synced. That sync only adds and updates files, so every job's `run` starts
  with a prelude that, when the cluster switches to another tree, deletes what the previous tree
  left behind: files missing from the manifest the fleet writes into the workdir, build stamps too.
- Slow SkyPilot calls are requests (launch, exec, job status, down): the fleet sends one, keeps its
  id (in the workers row, or `sky.json` in the job dir) and looks at it again on later polls and
  ticks, so the runner's loop never waits for a cluster. Only `cancel` (the job must be over when
  it returns), the log download at the end of a job (seconds) and `down()` at the end of a run wait.
- A job's log is the `tasks/run.log` that `download_logs` fetches (at the end of the job, and
  every minute while it runs), appended to the job's log path, which the runner parses exactly as a
  local job's. A job on a cluster that vanished (preempted, allocation gone) is `lost` and so is
  its worker; the runner then queues the experiment again.
- A qualified cluster idle for `idle_minutes` while nothing of its run is queued is downed; a new
  one is launched when work waits for workers again. `down()` downs them all.
- Cost: the price per hour (`price_per_hour`, else what SkyPilot reports for the launched
  resources) times the time since launch, kept in workers.cost_usd; an experiment is charged the
  time its jobs held their cluster (experiments.cost_usd). Once the run's `budget.usd` (VM and LLM
  cost together) is spent, nothing new is launched. `down()` takes `sky.cost_report`'s figure
  instead of the estimate wherever it reports one.
- After a restart (`run --resume`), `up()` checks the run's recorded clusters (vanished ones are
  `lost`) and downs clusters of runs that are no longer live; `reattach` finds the jobs again
  (those that finished meanwhile are collected by the next poll) and cancels what nobody tracks.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import sqlite_utils

from kb.config import Settings, SkyPilotSettings
from kb.db import log_event, now, one, rows, update
from kb.errors import UserError
from kb.workspace import Workspace
from runner.fleet.base import Fleet, JobRef, JobSpec, JobState, JobStatus, Worker, _meta
from runner.harness.template import RenderedTask

if TYPE_CHECKING:
    import git

TELEMETRY_OFF = {"SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "DO_NOT_TRACK": "1", "SCARF_NO_ANALYTICS": "1"}
LIVE = ("provisioning", "qualifying", "ready", "busy")
REQUEST_DONE = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "MISSING"})
"""Request states after which `sky.get` answers at once (MISSING: the server forgot it; get raises)."""
TICK_SECONDS = 2.0
POLL_SECONDS = 3.0
LOG_SECONDS = 60.0
CHECK_ERRORS = 4
"""Job status checks failing in a row (the cluster still says UP) before the job counts as lost."""
DOWN_WAIT_SECONDS = 900.0
RUN_STALE_SECONDS = 30.0
"""A `running` run whose heartbeat is older than this has no runner (runner/measure/loop.py's limit)."""
QUALIFY_MARGIN_SECONDS = 600
GONE = "the cluster is gone (not UP when SkyPilot asked the infra: preempted, or its allocation ended)"
MANIFEST = ".autoresearch-manifest"
DEFAULT_ORIGIN = "runner/harness/experiment.yaml"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_JOB_STATES: dict[str, JobState] = {
    "INIT": "pending",
    "PENDING": "pending",
    "SETTING_UP": "pending",
    "RUNNING": "running",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "FAILED_SETUP": "failed",
    "FAILED_DRIVER": "failed",
    "CANCELLED": "cancelled",
}

# The workdir sync (rsync) only adds and updates files. When this cluster switches to another tree,
# delete what the previous one left behind (build outputs, files a previous candidate added) and
# its build stamps, so each experiment starts from exactly its own synced tree.
SYNC_PRELUDE = """\
# autoresearch SkyPilot fleet: start from exactly the synced tree when it differs from the last one.
ar_tree={tree}
if [ "$(cat .autoresearch/tree 2>/dev/null)" != "$ar_tree" ]; then
  if [ -f {manifest} ]; then
    ar_present=$(mktemp)
    find . -mindepth 1 \\( -path ./{manifest} -o -path ./.autoresearch \\) -prune -o \\
      \\( -type f -o -type l \\) -printf '%P\\0' | LC_ALL=C sort -z > "$ar_present"
    LC_ALL=C sort -z {manifest} | LC_ALL=C comm -z -23 "$ar_present" - | xargs -0 -r rm -f --
    rm -f "$ar_present"
  fi
  rm -rf .autoresearch
  mkdir -p .autoresearch && printf '%s\\n' "$ar_tree" > .autoresearch/tree
fi
unset ar_tree ar_present
"""


# --- sky, quietly ----------------------------------------------------------------------------------


def sky_module() -> ModuleType:
    """`sky`, imported on first use with telemetry off unless the environment says otherwise."""
    for key, value in TELEMETRY_OFF.items():
        os.environ.setdefault(key, value)
    try:
        import sky
    except ImportError as exc:
        raise UserError(f"backend 'skypilot': SkyPilot cannot be imported ({exc})") from None
    return sky


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """SkyPilot prints progress on stdout, which belongs to the runner (its progress, --json)."""
    from sky import sky_logging

    with contextlib.redirect_stdout(io.StringIO()), sky_logging.silent():
        yield


def error_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message, without colours."""
    text = _ANSI.sub("", str(exc)).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _value(status: Any) -> str:
    """An enum member's value (SkyPilot's statuses), or the text itself."""
    return str(getattr(status, "value", status))


# --- tasks -------------------------------------------------------------------------------------------


def resources_config(conf: SkyPilotSettings) -> dict[str, Any]:
    """The `fleet.skypilot` resource keys that are set, as SkyPilot's `resources:` mapping."""
    wanted = {
        "infra": conf.infra,
        "cpus": conf.cpus,
        "memory": conf.memory,
        "accelerators": conf.accelerators,
    }
    return {key: value for key, value in wanted.items() if value}


def check_resources(conf: SkyPilotSettings) -> None:
    """A malformed `fleet.skypilot` resource spec is a one-line UserError (nothing is launched)."""
    sky = sky_module()
    spec = resources_config(conf)
    try:
        with quiet():
            sky.Resources.from_yaml_config(copy.deepcopy(spec))
    except Exception as exc:  # noqa: BLE001 - SkyPilot raises ValueError and its own config errors
        shown = ", ".join(f"{k}={v!r}" for k, v in spec.items()) or "defaults"
        raise UserError(f"fleet.skypilot ({shown}): invalid resources ({error_line(exc)})") from None


def task_name(name: str) -> str:
    """A valid SkyPilot task name (letters, digits, `.`, `_`, `-`; no runs of three `-` or `_`)."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "-", name)
    clean = re.sub(r"([-_])\1{2,}", r"\1\1", clean).strip("._-")
    return clean or "autoresearch"


def sync_prelude(tree: str) -> str:
    return SYNC_PRELUDE.format(tree=tree, manifest=MANIFEST)


def tree_id(workdir: Path) -> str:
    """Names one prepared tree (an experiment's folder is never reused for another experiment)."""
    return hashlib.sha1(str(workdir).encode()).hexdigest()[:16]


def for_cluster(rendered: RenderedTask) -> RenderedTask:
    """The rendered task as the fleet sends it: a valid name and the sync prelude before `run`."""
    run = sync_prelude(tree_id(rendered.workdir)) + rendered.run
    name = task_name(rendered.name)
    return replace(rendered, name=name, run=run, config={**rendered.config, "name": name, "run": run})


def sky_task(rendered: RenderedTask, origin: str) -> Any:
    """A validated `sky.Task` from a rendered task; any invalid field is a one-line UserError."""
    sky = sky_module()
    try:
        with quiet():
            task = sky.Task.from_yaml_config(copy.deepcopy(rendered.config))
            task.validate()
    except Exception as exc:  # noqa: BLE001 - ValueError, InvalidSkyPilotConfigError, catalog errors
        raise UserError(f"{origin}: not a valid SkyPilot task ({error_line(exc)})") from None
    return task


def write_manifest(tree: Path) -> int:
    """List every file and symlink of the tree (NUL-separated, relative) for the sync prelude."""
    names: list[str] = []
    for folder, dirs, files in os.walk(tree):
        rel = os.path.relpath(folder, tree)
        if rel == ".":
            dirs[:] = [d for d in dirs if d != ".autoresearch"]
            files = [f for f in files if f != MANIFEST]
        for name in list(dirs):
            if os.path.islink(os.path.join(folder, name)):  # rsync copies the link, not its target
                dirs.remove(name)
                files.append(name)
        names.extend(name if rel == "." else os.path.join(rel, name) for name in files)
    (tree / MANIFEST).write_bytes(b"".join(os.fsencode(name) + b"\0" for name in names))
    return len(names)


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


# --- the fleet ---------------------------------------------------------------------------------------


@dataclass
class _Job:
    """A submitted batch as the fleet tracks it (persisted in `sky.json` in the job dir)."""

    job_id: int
    cluster: str
    worker_id: int
    experiment_id: int | None
    submitted_at: float
    log_path: Path
    job_dir: Path
    request: str | None = None
    sky_job: int | None = None
    error: str | None = None
    state: JobStatus = JobStatus("pending")
    final: bool = False
    check: str | None = None
    """An in-flight `job_status` request."""
    checked_at: float = 0.0
    logs_at: float = 0.0
    errors: int = 0

    def save(self) -> None:
        self.job_dir.mkdir(parents=True, exist_ok=True)
        data = {
            "cluster": self.cluster,
            "worker_id": self.worker_id,
            "experiment_id": self.experiment_id,
            "submitted_at": self.submitted_at,
            "request": self.request,
            "job": self.sky_job,
            "error": self.error,
        }
        tmp = self.job_dir / "sky.json.tmp"
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(self.job_dir / "sky.json")

    @classmethod
    def load(cls, ref: JobRef) -> _Job | None:
        try:
            data = json.loads((ref.job_dir / "sky.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return cls(
            job_id=ref.job_id,
            cluster=str(data["cluster"]),
            worker_id=int(data.get("worker_id") or ref.worker_id),
            experiment_id=data.get("experiment_id"),
            submitted_at=float(data.get("submitted_at") or now()),
            log_path=ref.log_path,
            job_dir=ref.job_dir,
            request=data.get("request"),
            sky_job=data.get("job"),
            error=data.get("error"),
        )


class SkyPilotFleet(Fleet):
    backend = "skypilot"

    def __init__(self, ws: Workspace, db: sqlite_utils.Database, run_id: int, size: int) -> None:
        super().__init__(ws, db, run_id, size)
        self.settings: Settings = ws.settings
        self.conf = self.settings.fleet.skypilot
        self.size = max(1, min(size, self.conf.max_clusters))
        self._jobs: dict[int, _Job] = {}
        self._checks: dict[int, str] = {}
        """Worker id -> in-flight `job_status` request for its qualification job."""
        self._check_errors: dict[int, int] = {}
        self._last_tick = 0.0
        self._last_error = ""
        self._closed = False
        self._repo_handle: git.Repo | None = None
        self.qualify_dir = ws.worktrees_dir / f"run{run_id}-qualify"
        self.fleet_logs = ws.logs_dir / f"run{run_id}" / "fleet"

    # -- configuration ---------------------------------------------------------------------------

    @classmethod
    def preflight(cls, ws: Workspace) -> None:
        """The resources and the template, rendered and validated by SkyPilot, before any launch."""
        from runner.harness.prepare import template_path
        from runner.harness.template import load_template, render

        settings = ws.settings
        check_resources(settings.fleet.skypilot)
        path = template_path(ws, settings)
        template = load_template(path)
        with tempfile.TemporaryDirectory(prefix="autoresearch-preflight-") as tmp:
            rendered = render(
                template,
                name="ar-preflight",
                workdir=Path(tmp),
                envs={},
                resources_override=resources_config(settings.fleet.skypilot),
            )
            sky_task(for_cluster(rendered), str(path or DEFAULT_ORIGIN))

    # -- workers -------------------------------------------------------------------------------

    def up(self) -> list[Worker]:
        self.preflight(self.ws)
        self._down_orphans()
        self._verify(self.workers())
        live = self.workers()
        start = max(now(), self._next_launch_at())
        for n in range(self.size - len(live)):
            self._new_worker(start + n * self.conf.stagger_seconds)
        self.tick(force=True)
        return self.workers()

    def down(self) -> None:
        """Down every cluster of the run and wait until SkyPilot confirms (or the wait runs out)."""
        for worker in self.workers():
            self._teardown(worker.id, "down", "the run ended")
        self._wait_teardowns(DOWN_WAIT_SECONDS)
        self._costs()
        self._reconcile_costs()
        if self.qualify_dir.exists():
            from runner.harness.prepare import remove_workdir

            remove_workdir(self._repo(), self.qualify_dir)
        self._closed = True

    def tick(self, force: bool = False) -> None:
        if self._closed:
            return
        stamp = now()
        if not force and stamp - self._last_tick < TICK_SECONDS:
            return
        self._last_tick = stamp
        self._guarded("teardowns", self._check_teardowns)
        for worker in self.workers():
            if worker.status == "provisioning":
                self._guarded(worker.name, functools.partial(self._provision, worker))
            elif worker.status == "qualifying":
                self._guarded(worker.name, functools.partial(self._qualify, worker))
        self._guarded("idle clusters", self._idle_down)
        self._guarded("replacements", self._replace)
        self._costs()
        self._give_up_when_failing()

    def _guarded(self, what: str, step: Callable[[], None]) -> None:
        """A SkyPilot hiccup (API server restarting, ssh failing) is reported and retried next tick."""
        try:
            step()
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001
            message = f"{what}: {error_line(exc)}"
            if message != self._last_error:
                self._last_error = message
                self._event("fleet_error", message, level="warning")

    # -- jobs ----------------------------------------------------------------------------------

    def submit(self, worker: Worker, spec: JobSpec) -> str:
        cluster = str(worker.meta["cluster"])
        rendered = for_cluster(spec.task)
        write_manifest(spec.task.workdir)
        task = sky_task(rendered, f"experiment {spec.experiment_id} batch {spec.batch}")
        spec.job_dir.mkdir(parents=True, exist_ok=True)
        (spec.job_dir / "task.yaml").write_text(rendered.to_yaml(), encoding="utf-8")
        job = _Job(spec.job_id, cluster, worker.id, spec.experiment_id, now(), spec.log_path, spec.job_dir)
        job.save()  # before the request: a restarted runner knows the job may exist
        sky = sky_module()
        try:
            with quiet():
                job.request = str(sky.exec(task, cluster_name=cluster))
        except Exception as exc:  # noqa: BLE001 - reported as the job's state by poll
            job.error = f"exec failed: {error_line(exc)}"
        job.save()
        self._jobs[spec.job_id] = job
        self._update_worker(worker.id, status="busy", idle_since=None, experiment=spec.experiment_id)
        return job.request or "exec-failed"

    def poll(self, job: JobRef) -> JobStatus:
        tracked = self._track(job)
        if tracked is None:
            return JobStatus("lost", detail="never started")
        if tracked.final:
            return tracked.state
        stamp = now()
        if stamp - tracked.checked_at < POLL_SECONDS:
            return tracked.state
        tracked.checked_at = stamp
        result: list[JobStatus] = []
        self._guarded(f"job {job.job_id}", lambda: result.append(self._poll(tracked, stamp)))
        return result[0] if result else tracked.state

    def _poll(self, tracked: _Job, stamp: float) -> JobStatus:
        if tracked.error:
            if self._cluster_gone(tracked.cluster):
                self._lose_worker(tracked.worker_id, GONE)
            return self._end(tracked, JobStatus("lost", detail=tracked.error), fetch=False)
        if tracked.sky_job is None and not self._resolve(tracked):
            return tracked.state
        if tracked.final:
            return tracked.state
        assert tracked.sky_job is not None
        sky = sky_module()
        if tracked.check is None:
            with quiet():
                tracked.check = str(sky.job_status(tracked.cluster, [tracked.sky_job]))
            return tracked.state
        if self._request_status(tracked.check) not in REQUEST_DONE:
            return tracked.state
        request, tracked.check = tracked.check, None
        try:
            with quiet():
                statuses = sky.get(request)
        except Exception as exc:  # noqa: BLE001 - a cluster that vanished, or a passing ssh failure
            return self._check_failed(tracked, exc)
        tracked.errors = 0
        status = statuses.get(tracked.sky_job) if isinstance(statuses, dict) else None
        if status is None:
            return self._end(
                tracked, JobStatus("lost", detail=f"job {tracked.sky_job} unknown on its cluster")
            )
        name = _value(status)
        state = _JOB_STATES.get(name, "running")
        if state in ("succeeded", "failed", "cancelled"):
            detail = {"FAILED_SETUP": "setup failed", "FAILED_DRIVER": "driver failed"}.get(name, "")
            return self._end(tracked, JobStatus(state, None, detail or name.lower()))
        tracked.state = JobStatus(state, detail=name.lower())
        if state == "running" and stamp - tracked.logs_at >= LOG_SECONDS:
            tracked.logs_at = stamp
            self._fetch_log(tracked)
        return tracked.state

    def cancel(self, job: JobRef) -> None:
        tracked = self._track(job)
        if tracked is None or tracked.final:
            return
        sky = sky_module()
        if tracked.sky_job is None and tracked.request and not tracked.error:
            if self._request_status(tracked.request) not in REQUEST_DONE:
                with contextlib.suppress(Exception), quiet():
                    sky.get(sky.api_cancel(tracked.request, silent=True))
            if self._request_status(tracked.request) == "SUCCEEDED":
                self._resolve(tracked)
        if tracked.sky_job is not None and not tracked.final:
            with contextlib.suppress(Exception), quiet():
                sky.get(sky.cancel(tracked.cluster, job_ids=[tracked.sky_job]))
        if not tracked.final:
            self._end(
                tracked,
                JobStatus("cancelled", detail="cancelled by the runner"),
                fetch=tracked.sky_job is not None,
            )

    def reattach(self, jobs: Sequence[JobRef]) -> dict[int, JobStatus]:
        sky = sky_module()
        states: dict[int, JobStatus] = {}
        tracked_ids: dict[str, set[int]] = {}
        for ref in jobs:
            tracked = self._track(ref)
            if tracked is None or (tracked.request is None and tracked.error is None):
                states[ref.job_id] = JobStatus("lost", detail="never started")
                continue
            if tracked.sky_job is None and tracked.request and not tracked.error:
                self._resolve(tracked)
            if tracked.sky_job is not None:
                tracked_ids.setdefault(tracked.cluster, set()).add(tracked.sky_job)
            states[ref.job_id] = tracked.state
        live_requests = {j.request for j in self._jobs.values() if j.request}
        for worker in self.workers():
            cluster = str(worker.meta.get("cluster"))
            if worker.status not in ("ready", "busy"):
                continue
            # Exec requests nobody tracks (a runner killed while sending one), then jobs.
            with contextlib.suppress(Exception), quiet():
                for request in sky.api_status(cluster_name=cluster):
                    if request.name == "sky.exec" and request.request_id not in live_requests:
                        sky.get(sky.api_cancel(request.request_id, silent=True))
            try:
                with quiet():
                    queue = sky.get(sky.queue(cluster))
            except Exception:  # noqa: BLE001
                if self._cluster_gone(cluster):
                    self._lose_worker(worker.id, f"{GONE}, found while the runner was away")
                continue
            known = tracked_ids.get(cluster, set())
            stray = [
                int(entry["job_id"])
                for entry in queue
                if not _terminal(entry.get("status")) and int(entry["job_id"]) not in known
            ]
            if stray:
                with contextlib.suppress(Exception), quiet():
                    sky.get(sky.cancel(cluster, job_ids=stray))
                self._event("worker_cleanup", f"{cluster}: cancelled jobs nobody tracks: {stray}")
            if worker.status == "busy" and not known:
                self._update_worker(worker.id, status="ready", idle_since=now())
        return states

    # -- provisioning ------------------------------------------------------------------------------

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
        last = one(
            self.db,
            "SELECT max(json_extract(meta, '$.launched_at')) AS t FROM workers "
            "WHERE run_id = ? AND backend = ?",
            [self.run_id, self.backend],
        )
        previous = last["t"] if last and last["t"] is not None else None
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
        if self._request_status(str(request)) not in REQUEST_DONE:
            return
        sky = sky_module()
        try:
            with quiet():
                job, handle = sky.get(request)
        except Exception as exc:  # noqa: BLE001
            capacity = type(exc).__name__ == "ResourcesUnavailableError"
            self._fail(worker.id, f"{'no capacity' if capacity else 'launch failed'}: {error_line(exc)}")
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
            update(self.db, "workers", worker.id, {"price_per_hour": price})
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
        sky = sky_module()
        try:
            with quiet():
                request = str(sky.launch(task, cluster_name=worker.name))
        except Exception as exc:  # noqa: BLE001
            self._fail(worker.id, f"launch failed: {error_line(exc)}")
            return
        self._update_worker(worker.id, launch_request=request)
        self._event("worker_launching", f"{worker.name}: launching on {self.conf.infra or 'any infra'}")

    def _qualify(self, worker: Worker) -> None:
        sky = sky_module()
        meta = worker.meta
        job = int(meta["qualify_job"])
        request = self._checks.get(worker.id)
        if request is None:
            if now() > float(meta.get("qualify_deadline") or now() + 1):
                self._fail(worker.id, "the A/A qualification ran past its deadline")
                return
            with quiet():
                self._checks[worker.id] = str(sky.job_status(worker.name, [job]))
            return
        if self._request_status(request) not in REQUEST_DONE:
            return
        del self._checks[worker.id]
        try:
            with quiet():
                statuses = sky.get(request)
        except Exception as exc:  # noqa: BLE001
            errors = self._check_errors.get(worker.id, 0) + 1
            self._check_errors[worker.id] = errors
            if self._cluster_gone(worker.name):
                self._lose_worker(worker.id, f"{GONE}, while qualifying")
            elif errors >= CHECK_ERRORS:
                self._lose_worker(worker.id, f"its qualification cannot be checked ({error_line(exc)})")
            return
        self._check_errors.pop(worker.id, None)
        status = statuses.get(job) if isinstance(statuses, dict) else None
        if status is None:
            self._fail(worker.id, "the A/A qualification job vanished")
            return
        name = _value(status)
        if not _terminal(name):
            self._update_worker(worker.id, phase=f"qualifying ({name.lower()})")
            return
        log = self._download(worker.name, job)
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
        update(self.db, "workers", worker.id, {"noise": noise})
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
        from runner.harness.prepare import A_DIR, B_DIR, prepare_workdir, resolve_scripts

        tree = self.qualify_dir
        if (tree / A_DIR).is_dir() and (tree / B_DIR).is_dir():
            return tree
        run = one(self.db, "SELECT baseline_commit FROM runs WHERE id = ?", [self.run_id])
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
        """The qualification job's envs: what runner/measure/loop.py gives a batch, the baseline twice."""
        from runner.harness.prepare import A_DIR, B_DIR, resolve_scripts
        from runner.harness.sandbox import sandbox_envs

        s, opts = self.settings, self._run_options()
        scripts = resolve_scripts(self.ws, s)
        return {
            **s.target.env,
            "EXPERIMENT_ID": "0",
            "EXPERIMENT_DESC": "worker qualification: the baseline against itself",
            "BUILD_CMD": s.target.build_cmd,
            "BUILD_TIMEOUT": opts.get("build_timeout") or s.timeouts.build,
            "BENCH_TIMEOUT": opts.get("bench_timeout") or s.timeouts.bench,
            "CHECK_TIMEOUT": opts.get("check_timeout") or s.timeouts.check,
            "BENCH_SCRIPT": scripts.bench.path,
            "CHECKS_SCRIPT": scripts.checks.path,
            "A_DIR": A_DIR,
            "B_DIR": B_DIR,
            "BATCH": 0,
            "PAIR_START": 0,
            "PAIRS": self.conf.qualify_pairs,
            "RUN_CHECKS": 0,
            "AUTORESEARCH_NONCE": nonce,
            **sandbox_envs(self.ws),
        }

    def _run_options(self) -> dict[str, Any]:
        run = one(self.db, "SELECT options FROM runs WHERE id = ?", [self.run_id])
        return _meta(run["options"] if run else None)

    def _template(self) -> dict[str, Any]:
        from runner.harness.prepare import template_path
        from runner.harness.template import load_template

        return load_template(template_path(self.ws, self.settings))

    def _origin(self) -> str:
        from runner.harness.prepare import template_path

        return str(template_path(self.ws, self.settings) or DEFAULT_ORIGIN)

    def _repo(self) -> git.Repo:
        from kb import gitrepo

        if self._repo_handle is None:
            self._repo_handle = gitrepo.open_repo(self.ws.mirror_path)
        return self._repo_handle

    # -- scaling, failures, budget -----------------------------------------------------------------

    def _idle_down(self) -> None:
        limit = self.conf.idle_minutes * 60
        queued = one(
            self.db,
            "SELECT count(*) AS n FROM experiments WHERE run_id = ? AND status = 'queued'",
            [self.run_id],
        )
        if queued and queued["n"]:
            return
        busy = self._assigned()
        for worker in self.workers():
            if worker.status != "ready" or worker.id in busy:
                continue
            idle_since = worker.meta.get("idle_since")
            if idle_since is not None and now() - float(idle_since) >= limit:
                self._teardown(worker.id, "down", f"idle for {self.conf.idle_minutes:g} minutes")

    def _assigned(self) -> set[int]:
        """Workers holding an experiment of the run (between its batches too)."""
        return {
            r["worker_id"]
            for r in rows(
                self.db,
                "SELECT worker_id FROM experiments WHERE run_id = ? AND status = 'running' "
                "AND worker_id IS NOT NULL",
                [self.run_id],
            )
        }

    def _replace(self) -> None:
        """Launch workers while work waits and the run has fewer than it may have."""
        live = self.workers()
        demand = one(
            self.db,
            "SELECT count(*) AS n FROM experiments WHERE run_id = ? AND status IN ('queued', 'running')",
            [self.run_id],
        )
        want = min(self.size, demand["n"] if demand else 0)
        if len(live) >= want or self._failures_in_a_row()[0] >= self.conf.max_failures:
            return
        if self._budget_spent():
            return
        stagger = self.conf.stagger_seconds
        waiting = [
            float(w.meta.get("launch_at") or 0) + stagger for w in live if "launch_request" not in w.meta
        ]
        start = max([self._next_launch_at(), now(), *waiting])
        for n in range(want - len(live)):
            worker = self._new_worker(start + n * stagger)
            self._event("worker_added", f"{worker.name}: added, work is waiting for workers")

    def _failures_in_a_row(self) -> tuple[int, str]:
        """Workers that failed since the last one that qualified, and the last reason."""
        count, reason = 0, ""
        for row in rows(
            self.db,
            "SELECT status, meta FROM workers WHERE run_id = ? AND backend = ? ORDER BY id DESC",
            [self.run_id, self.backend],
        ):
            meta = _meta(row["meta"])
            if meta.get("qualified_at") is not None:
                break
            if row["status"] == "failed":
                count += 1
                reason = reason or str(meta.get("reason") or "")
        return count, reason

    def _give_up_when_failing(self) -> None:
        count, reason = self._failures_in_a_row()
        if count >= self.conf.max_failures and not self.workers():
            self._wait_teardowns(DOWN_WAIT_SECONDS)  # the run stops: leave nothing half torn down
            self._costs()
            raise UserError(
                f"fleet.skypilot: {count} clusters in a row failed to launch or qualify "
                f"(max_failures {self.conf.max_failures}); last: {reason}"
            )

    def _budget_spent(self) -> bool:
        run = one(self.db, "SELECT budget FROM runs WHERE id = ?", [self.run_id])
        usd = _meta(run["budget"] if run else None).get("usd")
        if usd is None:
            return False
        llm = one(
            self.db, "SELECT coalesce(sum(cost_usd), 0) AS c FROM llm_calls WHERE run_id = ?", [self.run_id]
        )
        return self.cost_usd() + (float(llm["c"]) if llm else 0.0) >= float(usd)

    # -- costs -------------------------------------------------------------------------------------

    def _costs(self) -> None:
        """workers.cost_usd = price per hour x hours since launch (until torn down)."""
        for row in rows(
            self.db,
            "SELECT id, status, meta, price_per_hour, cost_usd, ended_at FROM workers WHERE run_id = ? "
            "AND backend = ?",
            [self.run_id, self.backend],
        ):
            meta = _meta(row["meta"])
            cost = _worker_cost(row, meta)
            if cost is not None and abs(cost - float(row["cost_usd"] or 0)) > 1e-9:
                update(self.db, "workers", row["id"], {"cost_usd": cost})

    def _reconcile_costs(self) -> None:
        """Where SkyPilot's cost report knows a cluster's cost, it replaces the estimate."""
        names = {
            r["name"]: r["id"]
            for r in rows(
                self.db,
                "SELECT id, name FROM workers WHERE run_id = ? AND backend = ? "
                "AND json_extract(meta, '$.launched_at') IS NOT NULL",
                [self.run_id, self.backend],
            )
        }
        if not names or self.conf.price_per_hour is not None:
            return
        sky = sky_module()
        try:
            with quiet():
                report = sky.get(sky.cost_report(days=30))
        except Exception:  # noqa: BLE001 - the estimate stays
            return
        for entry in report or []:
            total = entry.get("total_cost")
            if entry.get("name") in names and isinstance(total, int | float) and total > 0:
                update(self.db, "workers", names[entry["name"]], {"cost_usd": float(total)})

    def _charge(self, job: _Job, seconds: float) -> None:
        row = one(self.db, "SELECT price_per_hour FROM workers WHERE id = ?", [job.worker_id])
        price = row["price_per_hour"] if row else None
        if price and job.experiment_id is not None:
            self.db.execute(
                "UPDATE experiments SET cost_usd = cost_usd + ? WHERE id = ?",
                [float(price) * seconds / 3600, job.experiment_id],
            )

    # -- jobs, internals ---------------------------------------------------------------------------

    def _track(self, ref: JobRef) -> _Job | None:
        tracked = self._jobs.get(ref.job_id)
        if tracked is None:
            tracked = _Job.load(ref)
            if tracked is not None:
                self._jobs[ref.job_id] = tracked
        return tracked

    def _resolve(self, job: _Job) -> bool:
        """Has the exec request given its cluster job id? (Ends the job when the request failed.)"""
        assert job.request is not None
        if self._request_status(job.request) not in REQUEST_DONE:
            return False
        sky = sky_module()
        try:
            with quiet():
                sky_job, _handle = sky.get(job.request)
        except Exception as exc:  # noqa: BLE001
            detail = f"exec failed: {error_line(exc)}"
            if self._cluster_gone(job.cluster):
                self._lose_worker(job.worker_id, GONE)
                detail = f"cluster {job.cluster} vanished"
            self._end(job, JobStatus("lost", detail=detail), fetch=False)
            return False
        if sky_job is None:
            self._end(job, JobStatus("lost", detail="exec submitted no job"), fetch=False)
            return False
        job.sky_job = int(sky_job)
        job.save()
        update(self.db, "jobs", job.job_id, {"backend_job_id": f"{job.cluster}:{job.sky_job}"})
        return True

    def _check_failed(self, job: _Job, exc: BaseException) -> JobStatus:
        job.errors += 1
        if self._cluster_gone(job.cluster):
            self._lose_worker(job.worker_id, GONE)
            return self._end(job, JobStatus("lost", detail=f"cluster {job.cluster} vanished"), fetch=False)
        if job.errors >= CHECK_ERRORS:
            return self._end(job, JobStatus("lost", detail=f"job status unavailable: {error_line(exc)}"))
        return job.state

    def _end(self, job: _Job, status: JobStatus, *, fetch: bool = True) -> JobStatus:
        """The job is over: its whole log into log_path, its time charged, its worker free."""
        fetched = fetch and job.sky_job is not None and self._fetch_log(job)
        if fetch and job.sky_job is not None and not fetched and status.state == "succeeded":
            status = JobStatus("lost", detail="succeeded, but its log could not be fetched")
        job.final, job.state, job.check = True, status, None
        self._charge(job, max(0.0, now() - job.submitted_at))
        row = one(self.db, "SELECT status FROM workers WHERE id = ?", [job.worker_id])
        if row and row["status"] == "busy":
            self._update_worker(job.worker_id, status="ready", idle_since=now())
        return status

    def _fetch_log(self, job: _Job) -> bool:
        """Append what is new in the job's run.log to its log path; False when it cannot be had."""
        assert job.sky_job is not None
        data = self._download(job.cluster, job.sky_job)
        if data is None:
            return False
        job.log_path.parent.mkdir(parents=True, exist_ok=True)
        have = job.log_path.stat().st_size if job.log_path.exists() else 0
        if len(data) > have:
            with open(job.log_path, "ab") as fh:
                fh.write(data[have:])
        return True

    def _download(self, cluster: str, sky_job: int) -> bytes | None:
        """A job's clean run output (`tasks/run.log`); the downloaded copy is removed after."""
        sky = sky_module()
        try:
            with quiet():
                paths = sky.download_logs(cluster, [str(sky_job)])
            # The path comes with a literal '~': the API server's home, which is this user's.
            folder = Path(os.path.expanduser(paths[str(sky_job)]))
            data = (folder / "tasks" / "run.log").read_bytes()
        except Exception:  # noqa: BLE001 - the caller decides what a missing log means
            return None
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()
        return data

    # -- cluster state -------------------------------------------------------------------------------

    def _request_status(self, request: str) -> str:
        """PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED; MISSING when the server forgot it."""
        sky = sky_module()
        with quiet():
            found = sky.api_status([request], fields=["request_id", "status"])
        return _value(found[0].status) if found else "MISSING"

    def _cluster_gone(self, cluster: str) -> bool:
        """Ask the infra (refreshing SkyPilot's record): is the cluster missing or not UP?"""
        sky = sky_module()
        try:
            with quiet():
                records = sky.get(sky.status([cluster], refresh=sky.StatusRefreshMode.FORCE))
        except Exception:  # noqa: BLE001 - unknown: not proof that it is gone
            return False
        return not records or _value(records[0]["status"]) != "UP"

    def _verify(self, workers: list[Worker]) -> None:
        """After a restart: recorded clusters that SkyPilot no longer has are lost."""
        launched = [w for w in workers if w.status in ("qualifying", "ready", "busy")]
        if not launched:
            return
        sky = sky_module()
        with quiet():
            records = sky.get(sky.status([w.name for w in launched]))
        up = {r["name"] for r in records if _value(r["status"]) in ("UP", "INIT")}
        for worker in launched:
            if worker.name not in up:
                self._lose_worker(worker.id, "the cluster is gone (found missing on restart)")

    def _fail(self, worker_id: int, reason: str) -> None:
        if self._is_live(worker_id):
            self._teardown(worker_id, "failed", reason)
            self._event("worker_failed", f"{self._name(worker_id)}: {reason}; downed", level="warning")

    def _lose_worker(self, worker_id: int, reason: str) -> None:
        if self._is_live(worker_id):  # several jobs and checks may notice the same loss
            self._teardown(worker_id, "lost", reason)
            self._event("worker_lost", f"{self._name(worker_id)}: lost ({reason})", level="warning")

    def _is_live(self, worker_id: int) -> bool:
        row = one(self.db, "SELECT status FROM workers WHERE id = ?", [worker_id])
        return row is not None and row["status"] in LIVE

    def _teardown(self, worker_id: int, status: str, reason: str) -> None:
        """Mark the worker over and send the down request (checked by later ticks)."""
        row = one(self.db, "SELECT * FROM workers WHERE id = ?", [worker_id])
        if row is None:
            return
        meta = _meta(row["meta"])
        cluster = str(meta.get("cluster") or row["name"])
        changes: dict[str, Any] = {"reason": reason, "phase": status}
        if row["status"] in LIVE:
            changes["status"] = status
        if meta.get("launched_at") is None:  # never launched: nothing to tear down
            self._update_worker(worker_id, **changes, teardown="done", torn_down_at=now())
            return
        sky = sky_module()
        launch = meta.get("launch_request")
        if launch and self._request_status(str(launch)) not in REQUEST_DONE:
            with contextlib.suppress(Exception), quiet():
                sky.get(sky.api_cancel(str(launch), silent=True))
        try:
            with quiet():
                request = str(sky.down(cluster))
        except Exception as exc:  # noqa: BLE001 - retried by `autoresearch fleet down`
            self._update_worker(worker_id, **changes, teardown=f"failed: {error_line(exc)}")
            return
        self._update_worker(worker_id, **changes, teardown="pending", down_request=request)

    def _pending_teardowns(self) -> list[dict[str, Any]]:
        return rows(
            self.db,
            "SELECT * FROM workers WHERE backend = ? AND json_extract(meta, '$.teardown') = 'pending' "
            "ORDER BY id",
            [self.backend],
        )

    def _check_teardowns(self) -> None:
        sky = sky_module()
        for row in self._pending_teardowns():
            meta = _meta(row["meta"])
            request = str(meta.get("down_request"))
            state = self._request_status(request)
            if state not in REQUEST_DONE and state != "MISSING":
                continue
            outcome = _down_outcome(sky, request)
            self._update_worker(row["id"], teardown=outcome, torn_down_at=now(), phase=row["status"])
            ok = outcome == "done"
            log_event(
                self.db,
                "worker_down" if ok else "worker_down_failed",
                f"{row['name']}: down ({meta.get('reason') or row['status']})"
                if ok
                else f"{row['name']}: down {outcome}",
                level="info" if ok else "error",
                run_id=row["run_id"],
            )

    def _wait_teardowns(self, timeout: float) -> None:
        """Block until SkyPilot confirms every pending down (or the time is up)."""
        deadline = time.monotonic() + timeout
        self._check_teardowns()
        while self._pending_teardowns() and time.monotonic() < deadline:
            time.sleep(TICK_SECONDS)
            self._check_teardowns()

    def _down_orphans(self) -> None:
        """Clusters recorded for runs that nobody drives any more are downed."""
        for row in rows(
            self.db,
            "SELECT w.id, w.run_id FROM workers w LEFT JOIN runs r ON r.id = w.run_id "
            f"WHERE w.backend = ? AND w.status IN ({','.join('?' for _ in LIVE)}) "
            "AND (w.run_id IS NULL OR w.run_id != ?) AND (r.id IS NULL "
            "OR r.status NOT IN ('running', 'paused') OR r.heartbeat_at IS NULL OR r.heartbeat_at < ?)",
            [self.backend, *LIVE, self.run_id, now() - RUN_STALE_SECONDS],
        ):
            self._teardown(row["id"], "down", f"its run {row['run_id']} is not live")

    # -- small helpers ---------------------------------------------------------------------------------

    def _update_worker(self, worker_id: int, *, status: str | None = None, **meta_changes: Any) -> None:
        meta = self._worker_meta(worker_id)
        meta.update(meta_changes)
        values: dict[str, Any] = {"meta": meta}
        if status is not None:
            values["status"] = status
        self._set_worker(worker_id, **values)

    def _name(self, worker_id: int) -> str:
        row = one(self.db, "SELECT name FROM workers WHERE id = ?", [worker_id])
        return str(row["name"]) if row else f"worker {worker_id}"

    def _event(self, kind: str, message: str, *, level: str = "info") -> None:
        log_event(self.db, kind, message, level=level, run_id=self.run_id)


def _terminal(status: Any) -> bool:
    return _value(status) in ("SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED")


def _worker_cost(row: dict[str, Any], meta: dict[str, Any]) -> float | None:
    price, start = row["price_per_hour"], meta.get("launched_at")
    if price is None or start is None:
        return None
    end = meta.get("torn_down_at") or (
        None if row["status"] in LIVE or meta.get("teardown") == "pending" else row["ended_at"]
    )
    seconds = max(0.0, float(end or now()) - float(start))
    return float(price) * seconds / 3600


# --- `autoresearch fleet` -------------------------------------------------------------------------------


def run_is_live(run: dict[str, Any] | None) -> bool:
    """A run someone drives: running or paused, with a fresh heartbeat."""
    if run is None or run["status"] not in ("running", "paused"):
        return False
    return run["heartbeat_at"] is not None and now() - float(run["heartbeat_at"]) < RUN_STALE_SECONDS


def down_workers(
    db: sqlite_utils.Database, worker_ids: Sequence[int], *, wait: float = DOWN_WAIT_SECONDS
) -> list[dict[str, Any]]:
    """Down these recorded clusters (and retry failed teardowns), waiting for SkyPilot; the rows after."""
    sky = sky_module()
    requests: dict[int, str] = {}
    for worker_id in worker_ids:
        row = one(db, "SELECT * FROM workers WHERE id = ?", [worker_id])
        if row is None or row["backend"] != "skypilot":
            continue
        meta = _meta(row["meta"])
        cluster = str(meta.get("cluster") or row["name"])
        if meta.get("teardown") == "pending" and meta.get("down_request"):
            requests[worker_id] = str(meta["down_request"])
            continue
        try:
            with quiet():
                requests[worker_id] = str(sky.down(cluster))
        except Exception as exc:  # noqa: BLE001
            _set_meta(db, worker_id, teardown=f"failed: {error_line(exc)}")
            continue
        _set_meta(
            db,
            worker_id,
            teardown="pending",
            down_request=requests[worker_id],
            reason=meta.get("reason") or "downed by `autoresearch fleet down`",
        )
        if row["status"] in LIVE:
            update(db, "workers", worker_id, {"status": "down", "ended_at": now()})
    deadline = time.monotonic() + wait
    while requests and time.monotonic() < deadline:
        for worker_id, request in list(requests.items()):
            with quiet():
                found = sky.api_status([request], fields=["request_id", "status"])
            state = _value(found[0].status) if found else "MISSING"
            if state not in REQUEST_DONE and state != "MISSING":
                continue
            outcome = _down_outcome(sky, request)
            _set_meta(db, worker_id, teardown=outcome, torn_down_at=now())
            del requests[worker_id]
        if requests:
            time.sleep(1.0)
    return (
        rows(
            db,
            f"SELECT * FROM workers WHERE id IN ({','.join('?' for _ in worker_ids)}) ORDER BY id",
            list(worker_ids),
        )
        if worker_ids
        else []
    )


def cluster_statuses(names: Sequence[str]) -> dict[str, str]:
    """SkyPilot's own status of these clusters (refreshed from the infra); missing ones are absent."""
    if not names:
        return {}
    sky = sky_module()
    with quiet():
        records = sky.get(sky.status(list(names), refresh=sky.StatusRefreshMode.FORCE))
    return {str(r["name"]): _value(r["status"]) for r in records}


def _set_meta(db: sqlite_utils.Database, worker_id: int, **changes: Any) -> None:
    row = one(db, "SELECT meta FROM workers WHERE id = ?", [worker_id])
    meta = _meta(row["meta"] if row else None)
    meta.update(changes)
    update(db, "workers", worker_id, {"meta": meta})


def _down_outcome(sky: Any, request: str) -> str:
    """`done`, or `failed: <reason>`, for a finished `sky.down` request (an already gone cluster is done)."""
    try:
        with quiet():
            sky.get(request)
    except Exception as exc:  # noqa: BLE001
        if type(exc).__name__ != "ClusterDoesNotExist":
            return f"failed: {error_line(exc)}"
    return "done"
