"""Batch jobs: the next batch, submission, reading and storing the log, the job's end."""

from __future__ import annotations

import secrets
from dataclasses import asdict
from typing import Any

from kb.db import now, transaction
from kb.jsoncol import decoded_dict
from kb.store import events, experiments, jobs, samples
from kb.store.tables import ExperimentRow
from kb.textsafe import quoted
from runner.fleet import JobRef, JobSpec, JobStatus, Worker
from runner.harness.batch import Timeouts, batch_envs
from runner.harness.joblog import read_new, write_step_logs
from runner.harness.prepare import (
    remove_workdir,
)
from runner.harness.protocol import MAX_SAMPLES, Invocation, LogParser
from runner.harness.sandbox import weakest
from runner.harness.template import render
from runner.measure.common import (
    FINAL,
    JOB_MARGIN_SECONDS,
    MAX_LOST_JOBS,
    ActiveJob,
    RunFailed,
    job_walls,
)
from runner.measure.context import RunContext
from runner.measure.decide import Decider
from runner.measure.lifecycle import Lifecycle
from runner.measure.live import LiveJobs
from runner.measure.outcome import classify, no_metric, unsandboxed

MAX_JOB_WARNINGS = 50
"""Warning events of one kind a job's log may add (forged markers, rejected METRIC lines); then one more."""


class JobRunner:
    """Batch jobs of the run's experiments: the next batch, its submission, its log read and stored
    as it grows, and its end turned into the experiment's outcome or next look."""

    def __init__(self, ctx: RunContext, live: LiveJobs, lifecycle: Lifecycle, decider: Decider) -> None:
        self.ctx = ctx
        self.live = live
        self.lifecycle = lifecycle
        self.decider = decider

    def _next_batch(self, exp: ExperimentRow) -> tuple[int, int, int, bool]:
        """(batch number, first pair, pairs, run checks) for the experiment's next job."""
        done = jobs.of_experiment(self.ctx.db, exp["id"])
        batch = (done[-1].batch + 1) if done else 0
        pair_start = max((j.pair_start + j.pairs for j in done), default=0)
        checks_done = any(j.run_checks and j.status == "succeeded" for j in done)
        have = self.decider.complete_pairs(exp["id"])
        if exp["kind"] == "self_test":
            target = self.ctx.settings.policy.self_test_pairs
        else:
            # Batches end exactly on the policy's planned looks (the alpha spending assumes it).
            target = next(
                (n for n in self.ctx.state.policy.looks() if n > have), self.ctx.state.policy.max_pairs
            )
        # Checks run once per experiment, in its first batch (on the baseline for the self-test,
        # on the stacked winners at the end).
        return batch, pair_start, max(target - have, 1), not checks_done

    def submit(self, exp: ExperimentRow, worker: Worker) -> None:
        batch, pair_start, pairs, run_checks = self._next_batch(exp)
        timeouts = Timeouts.of(self.ctx.settings, asdict(self.ctx.state.options))
        nonce = secrets.token_hex(8)
        log_dir = self.ctx.log_dir(exp["id"])
        log_path = log_dir / f"batch-{batch}.log"
        job_dir = log_dir / "jobs" / f"batch-{batch}"
        # Workers taking turns on one machine wait for each other's pairs: the deadline allows it.
        deadline = (
            now() + timeouts.job_seconds(pairs, run_checks) * self.live.fleet.sharing() + JOB_MARGIN_SECONDS
        )
        with transaction(self.ctx.db):
            job_id = jobs.create(
                self.ctx.db,
                {
                    "run_id": self.ctx.run_id,
                    "experiment_id": exp["id"],
                    "worker_id": worker.id,
                    "batch": batch,
                    "pair_start": pair_start,
                    "pairs": pairs,
                    "run_checks": int(run_checks),
                    "nonce": nonce,
                    "backend": self.ctx.state.backend,
                    "status": "submitting",
                    "log_path": str(log_path),
                    "job_dir": str(job_dir),
                    "deadline": deadline,
                    "submitted_at": now(),
                },
            )
            experiments.update(self.ctx.db, exp["id"], {"batches": batch + 1, "phase": "setup"})
        task = render(
            self.ctx.template,
            name=f"ar-{self.ctx.state.name}-e{exp['id']}-b{batch}".replace("_", "-").lower()[:60],
            workdir=self.ctx.exp_dir(exp["id"]),
            envs=batch_envs(
                self.ctx.ws,
                self.ctx.settings,
                self.ctx.scripts,
                timeouts,
                experiment_id=exp["id"],
                title=exp["title"],
                batch=batch,
                pair_start=pair_start,
                pairs=pairs,
                run_checks=run_checks,
                nonce=nonce,
            ),
            resources_override=self._resources(),
        )
        spec = JobSpec(job_id, exp["id"], batch, task, log_path, job_dir)
        backend_id = self.live.fleet.submit(worker, spec)
        with transaction(self.ctx.db):
            jobs.update(self.ctx.db, job_id, {"backend_job_id": backend_id, "status": "running"})
        ref = JobRef(job_id, worker.id, backend_id, log_path, job_dir)
        parser = LogParser(nonce, range(pair_start, pair_start + pairs))
        self.live.add(ActiveJob(ref, exp["id"], batch, nonce, parser, 0, deadline))
        self.ctx.say(
            f"  exp {exp['id']} {quoted(exp['title'])}: batch {batch}, "
            f"pairs {pair_start}..{pair_start + pairs - 1} on {worker.name}"
        )

    def _resources(self) -> dict[str, Any]:
        sky = self.ctx.settings.fleet.skypilot
        return {"infra": sky.infra, "cpus": sky.cpus, "memory": sky.memory, "accelerators": sky.accelerators}

    def _read_log(self, active: ActiveJob) -> list[Invocation]:
        """What the log gained since the last read, parsed a chunk at a time (runner/harness/joblog.py)."""
        found, active.offset = read_new(active.parser, active.ref.log_path, active.offset)
        return found

    def poll(self, active: ActiveJob, family: int | None) -> bool:
        status = self.live.fleet.poll(active.ref)
        found = self._read_log(active)
        if status.terminal:
            found += active.parser.finish()
        self._store(active, found)
        exp = self.ctx.exp(active.experiment_id)
        phase = active.parser.state.phase
        if phase and exp["status"] == "running" and phase != exp["phase"]:
            experiments.set_phase(self.ctx.db, exp["id"], phase)
        if not status.terminal:
            why = self._why_stop(active, exp, found)
            if why is None:
                return bool(found)
            self.live.stop(active, why)
            status = self.live.fleet.poll(active.ref)
            self._store(active, self._read_log(active) + active.parser.finish())
        self._job_ended(active, status, family)
        return True

    def _why_stop(self, active: ActiveJob, exp: ExperimentRow, found: list[Invocation]) -> str | None:
        """Whether the runner must stop a job that is still going, and why."""
        if exp["status"] in FINAL:
            return "cancel"
        if active.deadline is not None and now() > active.deadline:
            self.ctx.event(
                "job_timeout",
                f"experiment {exp['id']}: batch {active.batch} ran past its deadline; its session was killed",
                level="warning",
                exp_id=exp["id"],
            )
            return "timeout"
        if no_metric(found, self.ctx.state.metric):
            return "no_metric"
        if active.parser.state.violation or active.parser.state.tampered:
            return "forged"
        return None

    def _store(self, active: ActiveJob, found: list[Invocation]) -> None:
        """Samples of finished invocations, and warnings for what could not be read, as parsed.

        Parsing a log again (after a restart) adds nothing twice: samples are UNIQUE, and a warning
        is written only if none exists for that job and log line."""
        state = active.parser.state
        if not found and not state.forged and state.lines <= active.parsed_lines:
            return
        exp_id = active.experiment_id
        with transaction(self.ctx.db):
            stamp = now()
            for inv in found:
                for s in inv.samples:
                    added = samples.insert_new(
                        self.ctx.db,
                        {
                            "experiment_id": exp_id,
                            "pair": s.pair,
                            "side": s.side,
                            "metric": s.metric,
                            "seq": s.seq,
                            "value": s.value,
                            "created_at": stamp,
                        },
                    )
                    if not added:  # parsed before (a restart): it must be the very same sample
                        kept = samples.stored_value(self.ctx.db, exp_id, s.pair, s.side, s.metric, s.seq)
                        if kept is not None and kept != s.value:
                            state.violation = state.violation or (
                                f"log line {s.line}: pair {s.pair} {s.side} {s.metric} #{s.seq} = "
                                f"{s.value:g} differs from the {kept:g} stored before"
                            )
                if inv.dropped:
                    self._warn_once(
                        "metric_dropped",
                        active,
                        inv.end_line,
                        f"experiment {exp_id} pair {inv.pair} {inv.side}: {inv.dropped} METRIC or PROFILE "
                        f"lines beyond the caps were not read ({MAX_SAMPLES} samples an invocation)",
                        {"pair": inv.pair, "side": inv.side, "dropped": inv.dropped},
                    )
                for line, rejected in inv.rejected:
                    self._warn_once(
                        "metric_rejected",
                        active,
                        line,
                        f"experiment {exp_id} pair {inv.pair} {inv.side}: {rejected.reason} "
                        f"(log line {line}: {rejected.text.strip()[:120]!r})",
                        {
                            "text": rejected.text[:500],
                            "pair": inv.pair,
                            "side": inv.side,
                            "reason": rejected.reason,
                        },
                    )
            for line in state.forged:
                self._warn_once(
                    "forged_marker",
                    active,
                    line,
                    f"experiment {exp_id}: log line {line} looks like a runner marker "
                    "without the job's nonce (ignored)",
                    {},
                )
            state.forged.clear()
            if state.lines > active.parsed_lines:
                active.parsed_lines = state.lines
                jobs.update(self.ctx.db, active.ref.job_id, {"parsed_lines": state.lines})

    def _warn_once(self, kind: str, active: ActiveJob, line: int, message: str, data: dict[str, Any]) -> None:
        """One warning event per job, kind and log line (a log parsed again adds none); past
        MAX_JOB_WARNINGS of a kind in one job, one last event says the rest go unlisted, so that a
        candidate printing a million bad lines costs the database a few rows, not a million."""
        seen = active.warned.get(kind, 0)
        if seen > MAX_JOB_WARNINGS:
            return
        active.warned[kind] = seen + 1
        if seen == MAX_JOB_WARNINGS:
            kind, message, data = (
                f"{kind}_more",
                f"experiment {active.experiment_id}: more {kind} warnings in job {active.ref.job_id} "
                f"from log line {line} on are not listed one by one",
                {"kind": kind},
            )
        if not events.job_line_logged(self.ctx.db, kind, active.experiment_id, active.ref.job_id, line):
            self.ctx.event(
                kind,
                message,
                level="warning",
                exp_id=active.experiment_id,
                data={"job": active.ref.job_id, "line": line, **data},
            )

    def _job_ended(self, active: ActiveJob, status: JobStatus, family: int | None) -> None:
        self.live.drop(active.ref.job_id)
        exp = self.ctx.exp(active.experiment_id)
        self._write_step_logs(active)
        seconds = self._step_seconds(active)
        job_status = status.state
        if active.stopped in ("cancel", "stop"):
            job_status = "cancelled"
        values: jobs.JobUpdate = {
            "status": job_status,
            "exit_code": status.exit_code,
            "detail": status.detail or active.stopped,
            "ended_at": now(),
        }
        if exp["status"] in FINAL:  # cancelled while the job ran
            with transaction(self.ctx.db):
                jobs.update(self.ctx.db, active.ref.job_id, values)
            return
        outcome = classify(
            active.parser.state,
            status,
            stopped=active.stopped,
            metric=self.ctx.state.metric,
            sandbox_mode=self.ctx.settings.sandbox.mode,
        )
        if outcome is None:  # the job vanished: run the batch again on the same worker
            lost = jobs.count(self.ctx.db, exp["id"], "lost")
            with transaction(self.ctx.db):
                jobs.update(self.ctx.db, active.ref.job_id, {**values, "status": "lost"})
                self.ctx.event(
                    "job_lost",
                    f"experiment {exp['id']}: batch {active.batch} vanished "
                    f"({status.detail}); its finished pairs are kept",
                    level="warning",
                    exp_id=exp["id"],
                )
            if lost + 1 >= MAX_LOST_JOBS:
                self.lifecycle.lose(exp, f"{MAX_LOST_JOBS} batches vanished")
            elif any(active.parser.state.builds.get(side) != 0 for side in ("A", "B")):
                # It died while building: a half-written build output must not be trusted, so
                # the next batch starts from fresh trees.
                remove_workdir(self.ctx.repo, self.ctx.exp_dir(exp["id"]))
            return
        # The job's end and what follows from it (a final status, or the decision after this
        # batch) are one transaction: a runner killed here either redoes both or neither.
        with transaction(self.ctx.db):
            jobs.update(self.ctx.db, active.ref.job_id, values)
            links = self._log_links(active)
            self.ctx.merge_meta(
                exp["id"],
                {
                    "seconds": seconds,
                    "logs": links,
                    "wall": job_walls(active),
                    **self._isolation(active, exp),
                },
            )
            if outcome.status is not None:
                if active.parser.state.violation:
                    # Forged markers: none of its samples can be trusted (the job log keeps them all).
                    samples.delete_of_experiment(self.ctx.db, exp["id"])
                self.lifecycle.finish(
                    exp["id"], outcome.status, outcome.reason, detail=outcome.detail, cleanup=False
                )
                final = True
            elif exp["kind"] == "self_test":
                final = self.decider.decide_self_test(exp["id"])
            else:
                final = self.decider.decide(exp["id"], family)
        if final:
            self.lifecycle.cleanup(exp["id"])
        if unsandboxed(active.parser.state, self.ctx.settings.sandbox.mode):
            state = active.parser.state
            why = state.isolation_detail or "the job ran no harness"
            raise RunFailed(
                f"sandbox.mode = required, but the worker allows no isolation ({why}); "
                f"see {active.ref.log_path}"
            )

    def _isolation(self, active: ActiveJob, exp: ExperimentRow) -> dict[str, Any]:
        """What the experiment ran under: the weakest isolation any of its jobs reported."""
        state = active.parser.state
        if state.isolation is None and state.phase is None:
            return {}  # it never got as far as its steps
        mode = state.isolation or "none"
        detail = state.isolation_detail if state.isolation else "the job ran no harness (no SANDBOX marker)"
        before = decoded_dict(exp["meta"]).get("isolation")
        if before is not None and weakest(before, mode) == before:
            return {}
        return {"isolation": mode, "isolation_detail": detail}

    def _step_seconds(self, active: ActiveJob) -> dict[str, float]:
        totals: dict[str, float] = {"build": 0.0, "bench": 0.0, "checks": 0.0}
        for step in active.parser.state.steps:
            kind = step.name.split("-")[0]
            if step.seconds is not None and kind in totals:
                totals[kind] += step.seconds
        exp = self.ctx.exp(active.experiment_id)
        before = decoded_dict(exp["meta"]).get("seconds") or {}
        if active.batch == 0 or not before:
            base = {k: 0.0 for k in totals}
        else:
            base = {k: float(before.get(k, 0.0)) for k in totals}
        return {k: round(base[k] + totals[k], 4) for k in totals}

    def _write_step_logs(self, active: ActiveJob) -> None:
        """Split a job log into one file per build and checks step (the batch log keeps it all)."""
        write_step_logs(active.ref.log_path, active.parser.state.steps)

    def _log_links(self, active: ActiveJob) -> dict[str, str]:
        folder = active.ref.log_path.parent
        links = {f"batch-{active.batch}": str(active.ref.log_path)}
        for step in active.parser.state.steps:
            if not step.name.startswith("bench") and (folder / f"{step.name}.log").exists():
                links[step.name] = str(folder / f"{step.name}.log")
        return links
