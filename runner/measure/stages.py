"""The stages of a run: the A/A self-test, the waves (with their post-mortems), the final stack."""

from __future__ import annotations

import json
import os
from typing import Any

from kb import gitrepo
from kb.db import now, transaction
from kb.errors import UserError
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
from runner.measure.research_phase import Researching

FINAL_KINDS = ("stack", "ablation")
"""The final stage's experiments: the winners stacked, and each one left out."""


class Stages(Researching):
    """The stages of a run."""

    def _stages(self) -> Stop:
        """The self-test, the waves, the final stage; returns why the waves stopped."""
        try:
            stop = self._waves()
            if self.options.final:
                if self._spent is not None and self._spent.reason == "max_experiments":
                    # --max-experiments counts the candidates a user budgets; the final stack and
                    # its ablations measure what they won, and are measured (time and money stay).
                    self._spent = None
                self._set_phase("measuring")
                self._final_stage()
            return stop
        except RunStopped:
            self._cancel_live("stopped")
            return Stop("user", "stopped")

    def _nothing_left(self) -> Stop:
        if self.autopilot:
            hint = (
                ""
                if self.has_model
                else " (no model: only the miners ran; add forks with `autoresearch kb add-fork`, "
                "backends with `kb inventory`, or give --model)"
            )
            return Stop("no_hypotheses", f"no new hypotheses: the research phase found nothing to try{hint}")
        return Stop("queue_empty", "queue empty")

    def _waves(self) -> Stop:
        if not self._self_test_done():
            if not self._pending_work():
                self._research_phase()  # the autopilot reads before the first wave
                if not self._pending_work():
                    return self._nothing_left()
            self._spend(self._budget_spent())
            if stop := self._budget_stop():
                return stop
            self._self_test()
            if stop := self._budget_stop():
                return stop
        done = waves.count(self.db, self.run_id)  # --waves counts across a resume
        while True:
            wave = waves.running(self.db, self.run_id)
            if wave is None:
                if self.options.waves is not None and done >= self.options.waves:
                    return Stop("waves", f"waves: {done}")
                self._spend(self._budget_spent())
                if stop := self._budget_stop():
                    return stop
                if stop := self._plateau():
                    return stop
                self._research_phase()
                if stop := self._budget_stop():  # the research phase's model calls count too
                    return stop
                wave = self._new_wave()
                if wave is None:
                    return self._budget_stop() or self._nothing_left()
            self._set_phase("measuring")
            self._wave(wave)
            done += 1
            if stop := self._budget_stop():
                return stop

    def _cancel_live(self, reason: str) -> None:
        for exp_id in experiments.ids_of_run(self.db, self.run_id, LIVE):
            self._finish_experiment(exp_id, "cancelled", reason)
        with transaction(self.db):
            waves.cancel_running(self.db, self.run_id, now())

    def _self_test_done(self) -> bool:
        if not self.options.self_test:
            return True
        run = self._run()
        return bool(run["self_test"] and json.loads(run["self_test"]).get("passed"))

    def _pending_work(self) -> bool:
        if waves.any_of(self.db, self.run_id):
            return True
        return bool(self._runnable(1))

    def _self_test(self) -> None:
        """A/A before the first wave. A statistical difference is measured once more (two chance
        failures in a row have probability alpha**2); a crash or failing checks end the run."""
        while True:
            attempts = experiments.of_run_kinds(self.db, self.run_id, ["self_test"])
            done = [e for e in attempts if e["status"] in FINAL]
            results = [self._self_test_result(e) for e in done]
            if results and results[-1].get("passed"):
                return
            if done and done[-1]["status"] not in SELF_TEST_STATUSES:
                last = done[-1]
                detail = json.loads(last["meta"] or "{}").get("detail", "")
                raise RunFailed(
                    f"self-test {last['status']}"
                    + (f" ({last['reason']})" if last["reason"] else "")
                    + (f": {detail}" if detail else "")
                    + f"; see {last['log_dir']}"
                )
            if len(results) >= SELF_TEST_ATTEMPTS:
                raise RunFailed(f"self-test failed: {results[-1].get('reason')}")
            if results:
                self._say(f"self-test: {results[-1].get('reason')}; measuring again")
            live = [e for e in attempts if e["status"] in LIVE]
            exp_id = (
                live[0]["id"]
                if live
                else self._create_experiment(
                    kind="self_test", title="A/A self-test", baseline=self.baseline, candidate=self.baseline
                )
            )
            self._say(f"self-test: the baseline against itself, {self.settings.policy.self_test_pairs} pairs")
            self._drive([exp_id])
            if self._spent:
                return  # spent while it ran: the run ends, it did not fail

    def _self_test_result(self, exp: ExperimentRow) -> dict[str, Any]:
        meta = json.loads(exp["meta"] or "{}")
        result = meta.get("self_test")
        if isinstance(result, dict):
            return result
        return {"passed": False, "reason": f"{exp['status']}: {exp['reason'] or 'no result'}"}

    def _new_wave(self) -> WaveRow | None:
        size = self.wave_size
        cap = self.budget.get("max_experiments")
        if cap is not None:
            size = min(size, cap - experiments.measured_count(self.db, self.run_id))
            if size <= 0:
                self._spend(Stop("max_experiments", f"max experiments ({cap})"))
                return None
        carried = experiments.carried(self.db, self.run_id)
        patches = self._runnable(max(0, size - len(carried)))
        if not carried and not patches:
            return None
        head = self.head()
        with transaction(self.db):
            number = waves.next_number(self.db, self.run_id)
            wave_id = waves.create(
                self.db,
                {"run_id": self.run_id, "number": number, "baseline_commit": head, "started_at": now()},
            )
            for exp in carried:
                experiments.update(self.db, exp["id"], {"wave_id": wave_id, "baseline_commit": head})
            for patch in patches:
                self._create_experiment(
                    kind="candidate",
                    title=patch["hypothesis_title"],
                    baseline=head,
                    patch=patch,
                    wave_id=wave_id,
                )
            self._event(
                "wave_started",
                f"wave {number}: {len(carried) + len(patches)} experiments against {head[:12]}",
                data={"wave": wave_id},
            )
        wave = waves.get(self.db, wave_id)
        assert wave is not None
        self._say(f"wave {number}: {len(carried) + len(patches)} experiments against {head[:12]}")
        return wave

    def _wave(self, wave: WaveRow) -> None:
        self._drive(experiments.ids_in_wave(self.db, wave["id"]), family=wave["id"])
        for exp in experiments.kept_not_committed(self.db, wave["id"]):
            self._commit_winner(exp)
        with transaction(self.db):
            waves.update(self.db, wave["id"], {"status": "finished", "ended_at": now()})
        self._say(f"wave {wave['number']} done; baseline now {self.head()[:12]}")
        self._reflect(wave)

    def _reflect(self, wave: WaveRow) -> None:
        """The wave's post-mortem becomes a KB note for the next research phase (the model's when one
        is configured, else a plain summary). A failed reflection never stops the run."""
        if self.research is None:
            return
        self._set_phase("reflecting")
        try:
            note = self.research.after_wave(self.ws, self.db, wave["id"])
        except Exception as exc:  # the run matters more than its diary
            self._event(
                "reflection_failed", f"wave {wave['number']}: reflection failed ({exc})", level="warning"
            )
            return
        self._say(f"wave {wave['number']} reflection stored as evidence {note}")

    def _commit_winner(self, exp: ExperimentRow) -> None:
        from runner.record.winners import commit_winner

        try:
            record = commit_winner(self.ws, self.db, exp["id"])
        except patchpaths.ProtectedPath as exc:
            # Never on the branch nor in patches/: the experiment's verdict is withdrawn.
            with transaction(self.db):
                experiments.update(self.db, exp["id"], {"status": "refused", "reason": str(exc)})
                self._event("experiment_refused", str(exc), level="warning", exp_id=exp["id"])
            self._say(f"  exp {exp['id']}: refused at commit ({exc})")
            return
        except UserError as exc:
            # Two winners of one wave touching the same lines: measure the later one again on the
            # new baseline in the next wave.
            self._event(
                "winner_conflict",
                f"experiment {exp['id']}: kept but not committed ({exc}); "
                "measuring it again on the new baseline",
                level="warning",
                exp_id=exp["id"],
            )
            self._requeue(exp, wave_id=None)
            self._say(f"  exp {exp['id']} kept but does not apply on the new head; queued again")
            return
        self._say(f"  winner: exp {exp['id']} as {record.commit_sha[:12]} ({record.patch_file.name})")

    def _final_stage(self) -> None:
        winners = run_records.winners_with_patches(self.db, self.run_id)
        if not winners:
            return
        head = self.head()
        existing = experiments.of_run_kinds(self.db, self.run_id, FINAL_KINDS)
        if not existing:
            # The trees each ablation measures: the other winners applied onto the original
            # baseline (git objects only). Then all the experiments at once, so a runner killed
            # here never leaves a stack without its ablations.
            bases: list[tuple[WinnerPatch, str | None]] = []
            if len(winners) >= 2:
                for left_out in winners:
                    base: str | None = self.baseline
                    for w in winners:
                        if w["id"] == left_out["id"] or base is None:
                            continue
                        try:
                            base = gitrepo.commit_patch(
                                self.repo,
                                base,
                                w["diff"],
                                f"ablation: {w['title']}\n",
                                env={k: v for k, v in gitrepo.identity_env().items() if k not in os.environ},
                            )
                        except UserError:
                            base = None
                    bases.append((left_out, base))
            with transaction(self.db):
                self._create_experiment(
                    kind="stack",
                    title=f"stack of {len(winners)} winners vs the original baseline",
                    baseline=self.baseline,
                    candidate=head,
                    meta={"role": "stack", "winners": len(winners)},
                )
                for left_out, base in bases:
                    exp_id = self._create_experiment(
                        kind="ablation",
                        title=f"ablation: without {left_out['title']}",
                        baseline=base or self.baseline,
                        candidate=head,
                        meta={"role": "ablation", "left_out": left_out["experiment_id"]},
                    )
                    if base is None:
                        self._finish_experiment(
                            exp_id,
                            "crashed",
                            "does_not_apply",
                            detail="the other winners do not apply without it",
                            cleanup=False,
                        )
            existing = experiments.of_run_kinds(self.db, self.run_id, FINAL_KINDS)
        self._say(
            f"final: the {len(winners)} winners stacked against {self.baseline[:12]}"
            + (", and each left out" if len(winners) >= 2 else "")
        )
        self._drive([e["id"] for e in existing])
        stack: dict[str, Any] | None = None
        ablation: list[dict[str, Any]] = []
        for exp in experiments.of_run_kinds(self.db, self.run_id, FINAL_KINDS):
            found = decisions.latest(self.db, exp["id"])
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
                entry["left_out"] = json.loads(exp["meta"] or "{}").get("left_out")
                ablation.append(entry)
        with transaction(self.db):
            run = self._run()
            current = json.loads(run["summary"] or "{}")
            run_records.update(
                self.db, self.run_id, {"summary": {**current, "stack": stack, "ablation": ablation}}
            )
