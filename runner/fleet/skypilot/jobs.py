"""Jobs: a batch is `sky.exec` on a qualified cluster (no setup again; the workdir, the
experiment's own prepared tree, is synced). The exec and job status requests are followed on later
polls, the job's `tasks/run.log` is appended to its log path (at the end, and every minute while it
runs), and a job on a cluster that vanished is `lost`, its worker too. `sky.json` in the job dir
keeps what a restarted runner needs to find the job again (`reattach`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kb.db import now
from kb.store import jobs
from runner.fleet.base import JobRef, JobSpec, JobStatus, Worker
from runner.fleet.skypilot import sdk
from runner.fleet.skypilot.common import CHECK_ERRORS, GONE, FleetEvents, FleetScope
from runner.fleet.skypilot.costs import CostMeter
from runner.fleet.skypilot.tasks import for_cluster, sky_task, write_manifest
from runner.fleet.skypilot.teardown import Teardown

POLL_SECONDS = 3.0
LOG_SECONDS = 60.0


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


class JobTracker:
    """The run's batches on its clusters: submitted, polled, cancelled, found again after a restart,
    their logs fetched; a job's time is charged to its experiment, a vanished cluster is lost."""

    def __init__(self, scope: FleetScope, events: FleetEvents, teardown: Teardown, costs: CostMeter) -> None:
        self.scope = scope
        self.records = scope.records
        self.events = events
        self.teardown = teardown
        self.costs = costs
        self._jobs: dict[int, _Job] = {}

    def submit(self, worker: Worker, spec: JobSpec) -> str:
        cluster = str(worker.meta["cluster"])
        rendered = for_cluster(spec.task)
        write_manifest(spec.task.workdir)
        task = sky_task(rendered, f"experiment {spec.experiment_id} batch {spec.batch}")
        spec.job_dir.mkdir(parents=True, exist_ok=True)
        (spec.job_dir / "task.yaml").write_text(rendered.to_yaml(), encoding="utf-8")
        job = _Job(spec.job_id, cluster, worker.id, spec.experiment_id, now(), spec.log_path, spec.job_dir)
        job.save()  # before the request: a restarted runner knows the job may exist
        try:
            job.request = sdk.execute(task, cluster)
        except Exception as exc:  # noqa: BLE001 - reported as the job's state by poll
            job.error = f"exec failed: {sdk.error_line(exc)}"
        job.save()
        self._jobs[spec.job_id] = job
        self.records.update(worker.id, status="busy", idle_since=None, experiment=spec.experiment_id)
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
        self.events.guarded(f"job {job.job_id}", lambda: result.append(self._poll(tracked, stamp)))
        return result[0] if result else tracked.state

    def _poll(self, tracked: _Job, stamp: float) -> JobStatus:
        if tracked.error:
            if sdk.cluster_gone(tracked.cluster):
                self.teardown.lose(tracked.worker_id, GONE)
            return self._end(tracked, JobStatus("lost", detail=tracked.error), fetch=False)
        if tracked.sky_job is None and not self._resolve(tracked):
            return tracked.state
        if tracked.final:
            return tracked.state
        assert tracked.sky_job is not None
        if tracked.check is None:
            tracked.check = sdk.job_status(tracked.cluster, [tracked.sky_job])
            return tracked.state
        if sdk.request_status(tracked.check) not in sdk.REQUEST_DONE:
            return tracked.state
        request, tracked.check = tracked.check, None
        try:
            statuses = sdk.result(request)
        except Exception as exc:  # noqa: BLE001 - a cluster that vanished, or a passing ssh failure
            return self._check_failed(tracked, exc)
        tracked.errors = 0
        status = statuses.get(tracked.sky_job) if isinstance(statuses, dict) else None
        if status is None:
            return self._end(
                tracked, JobStatus("lost", detail=f"job {tracked.sky_job} unknown on its cluster")
            )
        name = sdk.status_value(status)
        state = sdk.JOB_STATES.get(name, "running")
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
        if tracked.sky_job is None and tracked.request and not tracked.error:
            if sdk.request_status(tracked.request) not in sdk.REQUEST_DONE:
                sdk.cancel_request(tracked.request)
            if sdk.request_status(tracked.request) == "SUCCEEDED":
                self._resolve(tracked)
        if tracked.sky_job is not None and not tracked.final:
            sdk.cancel_jobs(tracked.cluster, [tracked.sky_job])
        if not tracked.final:
            self._end(
                tracked,
                JobStatus("cancelled", detail="cancelled by the runner"),
                fetch=tracked.sky_job is not None,
            )

    def reattach(self, jobs: Sequence[JobRef]) -> dict[int, JobStatus]:
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
        for worker in self.records.up():
            cluster = str(worker.meta.get("cluster"))
            if worker.status not in ("ready", "busy"):
                continue
            # Exec requests nobody tracks (a runner killed while sending one), then jobs.
            sdk.cancel_stray_execs(cluster, live_requests)
            try:
                queue = sdk.queue(cluster)
            except Exception:  # noqa: BLE001
                if sdk.cluster_gone(cluster):
                    self.teardown.lose(worker.id, f"{GONE}, found while the runner was away")
                continue
            known = tracked_ids.get(cluster, set())
            stray = [
                int(entry["job_id"])
                for entry in queue
                if not sdk.job_finished(entry.get("status")) and int(entry["job_id"]) not in known
            ]
            if stray:
                sdk.cancel_jobs(cluster, stray)
                self.events.event("worker_cleanup", f"{cluster}: cancelled jobs nobody tracks: {stray}")
            if worker.status == "busy" and not known:
                self.records.update(worker.id, status="ready", idle_since=now())
        return states

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
        if sdk.request_status(job.request) not in sdk.REQUEST_DONE:
            return False
        try:
            sky_job, _handle = sdk.result(job.request)
        except Exception as exc:  # noqa: BLE001
            detail = f"exec failed: {sdk.error_line(exc)}"
            if sdk.cluster_gone(job.cluster):
                self.teardown.lose(job.worker_id, GONE)
                detail = f"cluster {job.cluster} vanished"
            self._end(job, JobStatus("lost", detail=detail), fetch=False)
            return False
        if sky_job is None:
            self._end(job, JobStatus("lost", detail="exec submitted no job"), fetch=False)
            return False
        job.sky_job = int(sky_job)
        job.save()
        jobs.update(self.scope.db, job.job_id, {"backend_job_id": f"{job.cluster}:{job.sky_job}"})
        return True

    def _check_failed(self, job: _Job, exc: BaseException) -> JobStatus:
        job.errors += 1
        if sdk.cluster_gone(job.cluster):
            self.teardown.lose(job.worker_id, GONE)
            return self._end(job, JobStatus("lost", detail=f"cluster {job.cluster} vanished"), fetch=False)
        if job.errors >= CHECK_ERRORS:
            return self._end(job, JobStatus("lost", detail=f"job status unavailable: {sdk.error_line(exc)}"))
        return job.state

    def _end(self, job: _Job, status: JobStatus, *, fetch: bool = True) -> JobStatus:
        """The job is over: its whole log into log_path, its time charged, its worker free."""
        fetched = fetch and job.sky_job is not None and self._fetch_log(job)
        if fetch and job.sky_job is not None and not fetched and status.state == "succeeded":
            status = JobStatus("lost", detail="succeeded, but its log could not be fetched")
        job.final, job.state, job.check = True, status, None
        self.costs.charge(job.worker_id, job.experiment_id, max(0.0, now() - job.submitted_at))
        row = self.records.row(job.worker_id)
        if row and row["status"] == "busy":
            self.records.update(job.worker_id, status="ready", idle_since=now())
        return status

    def _fetch_log(self, job: _Job) -> bool:
        """Append what is new in the job's run.log to its log path; False when it cannot be had."""
        assert job.sky_job is not None
        data = sdk.run_log(job.cluster, job.sky_job)
        if data is None:
            return False
        job.log_path.parent.mkdir(parents=True, exist_ok=True)
        have = job.log_path.stat().st_size if job.log_path.exists() else 0
        if len(data) > have:
            with open(job.log_path, "ab") as fh:
                fh.write(data[have:])
        return True
