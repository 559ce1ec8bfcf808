"""The experiment lifecycle every stage uses: create, queue again, finish, clean up, lose."""

from __future__ import annotations

from typing import Any

import sqlite_utils

from kb.db import now, transaction
from kb.errors import UserError
from kb.jsoncol import decoded, decoded_dict
from kb.store import decisions, experiments, hypotheses, jobs, run_records
from kb.store.tables import ExperimentRow, PatchRow
from kb.textsafe import quoted
from kb.vocabulary import EXPERIMENT_FINAL
from runner.harness.prepare import remove_workdir
from runner.measure.common import MAX_RETRIES, RunSummary
from runner.measure.context import RunContext
from runner.measure.live import LiveJobs


class Lifecycle:
    """Experiments of one run from their row to their end, and the trees and jobs they leave."""

    def __init__(self, ctx: RunContext, live: LiveJobs) -> None:
        self.ctx = ctx
        self.live = live

    def create(
        self,
        *,
        kind: str,
        title: str,
        baseline: str,
        candidate: str | None = None,
        patch: PatchRow | None = None,
        wave_id: int | None = None,
        retry_of: int | None = None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        db = self.ctx.db
        with transaction(db):
            exp_id = experiments.create(
                db,
                {
                    "run_id": self.ctx.run_id,
                    "wave_id": wave_id,
                    "patch_id": patch["id"] if patch else None,
                    "hypothesis_id": patch["hypothesis_id"] if patch else None,
                    "kind": kind,
                    "title": title,
                    "status": "queued",
                    "baseline_commit": baseline,
                    "candidate_commit": candidate,
                    "retry_of": retry_of,
                    "meta": meta or {},
                    "created_at": now(),
                },
            )
            experiments.update(db, exp_id, {"log_dir": str(self.ctx.log_dir(exp_id))})
        return exp_id

    def requeue(self, exp: ExperimentRow, *, wave_id: int | None) -> int | None:
        """The same experiment again (a lost one, a winner that no longer applies); None once it
        was queued again MAX_RETRIES times."""
        db = self.ctx.db
        depth, cursor = 0, exp
        while retry_of := cursor["retry_of"]:
            depth += 1
            prev = experiments.row(db, retry_of)
            if prev is None:
                break
            cursor = prev
        if depth >= MAX_RETRIES:
            return None
        patch = hypotheses.patch_row(db, exp["patch_id"]) if exp["patch_id"] else None
        baseline = exp["baseline_commit"] if wave_id is not None else self.ctx.head()
        assert baseline is not None  # the runner creates every experiment with its baseline
        return self.create(
            kind=exp["kind"],
            title=exp["title"],
            baseline=baseline,
            candidate=exp["candidate_commit"] if exp["kind"] != "candidate" else None,
            patch=patch,
            wave_id=wave_id,
            retry_of=exp["id"],
            meta={k: v for k, v in decoded_dict(exp["meta"]).items() if k in ("role", "left_out")},
        )

    def finish(
        self, exp_id: int, status: str, reason: str | None, *, detail: str = "", cleanup: bool = True
    ) -> None:
        ctx = self.ctx
        if cleanup:
            self.stop_jobs(exp_id)  # first, so a final status never hides a job still running
        with transaction(ctx.db):
            exp = ctx.exp(exp_id)
            if exp["status"] in EXPERIMENT_FINAL:
                return
            experiments.finish(ctx.db, exp_id, status, reason, now())
            if detail:
                ctx.merge_meta(exp_id, {"detail": detail})
            level = "info" if status in ("kept", "discarded", "inconclusive", "passed") else "warning"
            ctx.event(
                "experiment_" + status,
                f"experiment {exp_id} {quoted(exp['title'])}: {status}"
                + (f" ({reason})" if reason else "")
                + (f": {detail}" if detail else ""),
                level=level,
                exp_id=exp_id,
                data={"status": status, "reason": reason},
            )
        if status not in ("kept", "discarded", "inconclusive") or exp["kind"] == "self_test":
            ctx.say(
                f"  exp {exp_id} {quoted(exp['title'])}: {status}"
                + (f" ({reason})" if reason else "")
                + (f": {detail}" if detail and status not in ("inconclusive", "passed") else "")
            )
        if cleanup:
            self.cleanup(exp_id)

    def cleanup(self, exp_id: int) -> None:
        """Its jobs stopped and its trees removed."""
        self.stop_jobs(exp_id)
        workdir = self.ctx.exp_dir(exp_id)
        if workdir.exists():
            remove_workdir(self.ctx.repo, workdir)

    def stop_jobs(self, exp_id: int) -> None:
        for active in self.live.of(exp_id):
            self.live.stop(active, "cancel")
            with transaction(self.ctx.db):
                jobs.update(self.ctx.db, active.ref.job_id, {"status": "cancelled", "ended_at": now()})
            self.live.drop(active.ref.job_id)

    def lose(self, exp: ExperimentRow, why: str) -> None:
        """Its worker or its trees are gone: `lost`, and queued again for the same patch."""
        self.finish(exp["id"], "lost", None, detail=why)
        retry = self.requeue(self.ctx.exp(exp["id"]), wave_id=exp["wave_id"])
        if retry is not None:
            self.ctx.say(f"  exp {exp['id']} lost ({why}); queued again as exp {retry}")


def run_summary(db: sqlite_utils.Database, run_id: int) -> RunSummary:
    run = run_records.row(db, run_id)
    if run is None:
        raise UserError(f"run {run_id}: no such run")
    found = experiments.of_run(db, run_id)
    decided = decisions.latest_of(db, [exp["id"] for exp in found])
    summaries = []
    for exp in found:
        d = decided.get(exp["id"])
        summaries.append(
            {
                "id": exp["id"],
                "kind": exp["kind"],
                "title": exp["title"],
                "status": exp["status"],
                "reason": exp["reason"],
                "wave_id": exp["wave_id"],
                "patch_id": exp["patch_id"],
                "effect": d.effect if d else None,
                "ci": [d.ci_low, d.ci_high] if d else None,
                "pairs": d.pairs if d else 0,
                "log_dir": exp["log_dir"],
            }
        )
    return RunSummary(
        run_id=run_id,
        name=run["name"],
        status=run["status"],
        branch=run["branch"],
        baseline_commit=run["baseline_commit"],
        head_commit=run["head_commit"],
        self_test=decoded(run["self_test"]),
        experiments=summaries,
        winners=run_records.winner_rows(db, run_id),
        summary=decoded(run["summary"]),
        error=run["error"],
        stop_reason=run["stop_reason"],
    )
