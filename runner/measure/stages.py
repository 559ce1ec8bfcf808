"""The stages of a run: the A/A self-test, the waves (with their post-mortems), the final stack."""

from __future__ import annotations

import os
from typing import Any

from kb import gitrepo
from kb.db import now, transaction
from kb.errors import UserError
from kb.jsoncol import decoded_dict
from kb.store import decisions, experiments, run_records, waves
from kb.store.run_records import WinnerPatch
from kb.store.tables import ExperimentRow, WaveRow
from kb.vocabulary import SELF_TEST_STATUSES
from runner.harness import patchpaths
from runner.measure.common import (
    FINAL,
    LIVE,
    SELF_TEST_ATTEMPTS,
    RunFailed,
    RunStopped,
    Stop,
)
from runner.measure.context import RunContext
from runner.measure.lifecycle import Lifecycle
from runner.measure.research_phase import Cadence
from runner.measure.scheduler import Scheduler
from runner.measure.steering import Budget

FINAL_KINDS = ("stack", "ablation")
"""The final stage's experiments: the winners stacked, and each one left out."""


class Stages:
    """The stages of a run: the A/A self-test, the waves (each with its research phase before it
    and its post-mortem after it), the final stack and its ablations."""

    def __init__(
        self, ctx: RunContext, lifecycle: Lifecycle, scheduler: Scheduler, cadence: Cadence, budget: Budget
    ) -> None:
        self.ctx = ctx
        self.lifecycle = lifecycle
        self.scheduler = scheduler
        self.cadence = cadence
        self.budget = budget

    def run(self) -> Stop:
        """The self-test, the waves, the final stage; returns why the waves stopped."""
        try:
            stop = self._waves()
            if self.ctx.state.options.final:
                spent = self.ctx.state.spent
                if spent is not None and spent.reason == "max_experiments":
                    # --max-experiments counts the candidates a user budgets; the final stack and
                    # its ablations measure what they won, and are measured (time and money stay).
                    self.ctx.state.spent = None
                self.ctx.set_phase("measuring")
                self._final_stage()
            return stop
        except RunStopped:
            self.cancel_live("stopped")
            return Stop("user", "stopped")

    def _nothing_left(self) -> Stop:
        if self.ctx.state.autopilot:
            hint = (
                ""
                if self.ctx.state.has_model
                else " (no model: only the miners ran; add forks with `autoresearch kb add-fork`, "
                "backends with `kb inventory`, or give --model)"
            )
            return Stop("no_hypotheses", f"no new hypotheses: the research phase found nothing to try{hint}")
        return Stop("queue_empty", "queue empty")

    def _waves(self) -> Stop:
        if not self._self_test_done():
            if not self._pending_work():
                self.cadence.research_phase()  # the autopilot reads before the first wave
                if not self._pending_work():
                    return self._nothing_left()
            self.budget.refresh()
            if stop := self.budget.stop():
                return stop
            self._self_test()
            if stop := self.budget.stop():
                return stop
        done = waves.count(self.ctx.db, self.ctx.run_id)  # --waves counts across a resume
        while True:
            wave = waves.running(self.ctx.db, self.ctx.run_id)
            if wave is None:
                if self.ctx.state.options.waves is not None and done >= self.ctx.state.options.waves:
                    return Stop("waves", f"waves: {done}")
                self.budget.refresh()
                if stop := self.budget.stop():
                    return stop
                if stop := self.cadence.plateau():
                    return stop
                self.cadence.research_phase()
                if stop := self.budget.stop():  # the research phase's model calls count too
                    return stop
                wave = self._new_wave()
                if wave is None:
                    return self.budget.stop() or self._nothing_left()
            self.ctx.set_phase("measuring")
            self._wave(wave)
            done += 1
            if stop := self.budget.stop():
                return stop

    def cancel_live(self, reason: str) -> None:
        for exp_id in experiments.ids_of_run(self.ctx.db, self.ctx.run_id, LIVE):
            self.lifecycle.finish(exp_id, "cancelled", reason)
        with transaction(self.ctx.db):
            waves.cancel_running(self.ctx.db, self.ctx.run_id, now())

    def _self_test_done(self) -> bool:
        if not self.ctx.state.options.self_test:
            return True
        run = self.ctx.run()
        return bool(decoded_dict(run["self_test"]).get("passed"))

    def _pending_work(self) -> bool:
        if waves.any_of(self.ctx.db, self.ctx.run_id):
            return True
        return bool(self.cadence.runnable(1))

    def _self_test(self) -> None:
        """A/A before the first wave. A statistical difference is measured once more (two chance
        failures in a row have probability alpha**2); a crash or failing checks end the run."""
        while True:
            attempts = experiments.of_run_kinds(self.ctx.db, self.ctx.run_id, ["self_test"])
            done = [e for e in attempts if e["status"] in FINAL]
            results = [self._self_test_result(e) for e in done]
            if results and results[-1].get("passed"):
                return
            if done and done[-1]["status"] not in SELF_TEST_STATUSES:
                last = done[-1]
                detail = decoded_dict(last["meta"]).get("detail", "")
                raise RunFailed(
                    f"self-test {last['status']}"
                    + (f" ({last['reason']})" if last["reason"] else "")
                    + (f": {detail}" if detail else "")
                    + f"; see {last['log_dir']}"
                )
            if len(results) >= SELF_TEST_ATTEMPTS:
                raise RunFailed(f"self-test failed: {results[-1].get('reason')}")
            if results:
                self.ctx.say(f"self-test: {results[-1].get('reason')}; measuring again")
            live = [e for e in attempts if e["status"] in LIVE]
            exp_id = (
                live[0]["id"]
                if live
                else self.lifecycle.create(
                    kind="self_test",
                    title="A/A self-test",
                    baseline=self.ctx.state.baseline,
                    candidate=self.ctx.state.baseline,
                )
            )
            self.ctx.say(
                f"self-test: the baseline against itself, {self.ctx.settings.policy.self_test_pairs} pairs"
            )
            self.scheduler.drive([exp_id])
            if self.ctx.state.spent:
                return  # spent while it ran: the run ends, it did not fail

    def _self_test_result(self, exp: ExperimentRow) -> dict[str, Any]:
        meta = decoded_dict(exp["meta"])
        result = meta.get("self_test")
        if isinstance(result, dict):
            return result
        return {"passed": False, "reason": f"{exp['status']}: {exp['reason'] or 'no result'}"}

    def _new_wave(self) -> WaveRow | None:
        size = self.ctx.state.wave_size
        cap = self.ctx.state.budget.get("max_experiments")
        if cap is not None:
            size = min(size, cap - experiments.measured_count(self.ctx.db, self.ctx.run_id))
            if size <= 0:
                self.budget.spend(Stop("max_experiments", f"max experiments ({cap})"))
                return None
        carried = experiments.carried(self.ctx.db, self.ctx.run_id)
        patches = self.cadence.runnable(max(0, size - len(carried)))
        if not carried and not patches:
            return None
        head = self.ctx.head()
        with transaction(self.ctx.db):
            number = waves.next_number(self.ctx.db, self.ctx.run_id)
            wave_id = waves.create(
                self.ctx.db,
                {"run_id": self.ctx.run_id, "number": number, "baseline_commit": head, "started_at": now()},
            )
            for exp in carried:
                experiments.update(self.ctx.db, exp["id"], {"wave_id": wave_id, "baseline_commit": head})
            for patch in patches:
                self.lifecycle.create(
                    kind="candidate",
                    title=patch["hypothesis_title"],
                    baseline=head,
                    patch=patch,
                    wave_id=wave_id,
                )
            self.ctx.event(
                "wave_started",
                f"wave {number}: {len(carried) + len(patches)} experiments against {head[:12]}",
                data={"wave": wave_id},
            )
        wave = waves.get(self.ctx.db, wave_id)
        assert wave is not None
        self.ctx.say(f"wave {number}: {len(carried) + len(patches)} experiments against {head[:12]}")
        return wave

    def _wave(self, wave: WaveRow) -> None:
        self.scheduler.drive(experiments.ids_in_wave(self.ctx.db, wave["id"]), family=wave["id"])
        for exp in experiments.kept_not_committed(self.ctx.db, wave["id"]):
            self._commit_winner(exp)
        with transaction(self.ctx.db):
            waves.update(self.ctx.db, wave["id"], {"status": "finished", "ended_at": now()})
        self.ctx.say(f"wave {wave['number']} done; baseline now {self.ctx.head()[:12]}")
        self._reflect(wave)

    def _reflect(self, wave: WaveRow) -> None:
        """The wave's post-mortem becomes a KB note for the next research phase (the model's when one
        is configured, else a plain summary). A failed reflection never stops the run."""
        if self.cadence.research is None:
            return
        self.ctx.set_phase("reflecting")
        try:
            note = self.cadence.research.after_wave(self.ctx.ws, self.ctx.db, wave["id"])
        except Exception as exc:  # the run matters more than its diary
            self.ctx.event(
                "reflection_failed", f"wave {wave['number']}: reflection failed ({exc})", level="warning"
            )
            return
        self.ctx.say(f"wave {wave['number']} reflection stored as evidence {note}")

    def _commit_winner(self, exp: ExperimentRow) -> None:
        from runner.record.winners import commit_winner

        try:
            record = commit_winner(self.ctx.ws, self.ctx.db, exp["id"])
        except patchpaths.ProtectedPath as exc:
            # Never on the branch nor in patches/: the experiment's verdict is withdrawn.
            with transaction(self.ctx.db):
                experiments.update(self.ctx.db, exp["id"], {"status": "refused", "reason": str(exc)})
                self.ctx.event("experiment_refused", str(exc), level="warning", exp_id=exp["id"])
            self.ctx.say(f"  exp {exp['id']}: refused at commit ({exc})")
            return
        except UserError as exc:
            # Two winners of one wave touching the same lines: measure the later one again on the
            # new baseline in the next wave.
            self.ctx.event(
                "winner_conflict",
                f"experiment {exp['id']}: kept but not committed ({exc}); "
                "measuring it again on the new baseline",
                level="warning",
                exp_id=exp["id"],
            )
            self.lifecycle.requeue(exp, wave_id=None)
            self.ctx.say(f"  exp {exp['id']} kept but does not apply on the new head; queued again")
            return
        self.ctx.say(f"  winner: exp {exp['id']} as {record.commit_sha[:12]} ({record.patch_file.name})")

    def _final_stage(self) -> None:
        winners = run_records.winners_with_patches(self.ctx.db, self.ctx.run_id)
        if not winners:
            return
        head = self.ctx.head()
        existing = experiments.of_run_kinds(self.ctx.db, self.ctx.run_id, FINAL_KINDS)
        if not existing:
            # The trees each ablation measures: the other winners applied onto the original
            # baseline (git objects only). Then all the experiments at once, so a runner killed
            # here never leaves a stack without its ablations.
            bases: list[tuple[WinnerPatch, str | None]] = []
            if len(winners) >= 2:
                for left_out in winners:
                    base: str | None = self.ctx.state.baseline
                    for w in winners:
                        if w["id"] == left_out["id"] or base is None:
                            continue
                        try:
                            base = gitrepo.commit_patch(
                                self.ctx.repo,
                                base,
                                w["diff"],
                                f"ablation: {w['title']}\n",
                                env={k: v for k, v in gitrepo.identity_env().items() if k not in os.environ},
                            )
                        except UserError:
                            base = None
                    bases.append((left_out, base))
            with transaction(self.ctx.db):
                self.lifecycle.create(
                    kind="stack",
                    title=f"stack of {len(winners)} winners vs the original baseline",
                    baseline=self.ctx.state.baseline,
                    candidate=head,
                    meta={"role": "stack", "winners": len(winners)},
                )
                for left_out, base in bases:
                    exp_id = self.lifecycle.create(
                        kind="ablation",
                        title=f"ablation: without {left_out['title']}",
                        baseline=base or self.ctx.state.baseline,
                        candidate=head,
                        meta={"role": "ablation", "left_out": left_out["experiment_id"]},
                    )
                    if base is None:
                        self.lifecycle.finish(
                            exp_id,
                            "crashed",
                            "does_not_apply",
                            detail="the other winners do not apply without it",
                            cleanup=False,
                        )
            existing = experiments.of_run_kinds(self.ctx.db, self.ctx.run_id, FINAL_KINDS)
        self.ctx.say(
            f"final: the {len(winners)} winners stacked against {self.ctx.state.baseline[:12]}"
            + (", and each left out" if len(winners) >= 2 else "")
        )
        self.scheduler.drive([e["id"] for e in existing])
        stack: dict[str, Any] | None = None
        ablation: list[dict[str, Any]] = []
        for exp in experiments.of_run_kinds(self.ctx.db, self.ctx.run_id, FINAL_KINDS):
            found = decisions.latest(self.ctx.db, exp["id"])
            d = found if found is not None and found.is_final else None
            entry = {
                "experiment": exp["id"],
                "status": exp["status"],
                "reason": exp["reason"],
                "effect": d.effect if d else None,
                "ci": [d.ci_low, d.ci_high] if d else None,
                "pairs": d.pairs if d else 0,
            }
            if exp["kind"] == "stack":
                stack = entry
            else:
                entry["left_out"] = decoded_dict(exp["meta"]).get("left_out")
                ablation.append(entry)
        with transaction(self.ctx.db):
            run = self.ctx.run()
            current = decoded_dict(run["summary"])
            run_records.update(
                self.ctx.db, self.ctx.run_id, {"summary": {**current, "stack": stack, "ablation": ablation}}
            )
