"""Housekeeping between polls: the heartbeat, the budget, and the commands people send
(`autoresearch steer`, the console, `hypotheses approve|reject`: runner/commands.py writes them).

Steering that outlives this process is in the database, not in memory: a focus or avoid note and
the approval switch are kept in runs.steering (the next research phase reads them), a new budget
in runs.budget; only pause and stop act on this runner directly."""

from __future__ import annotations

import json
from typing import Any

from kb.db import now
from kb.errors import UserError
from kb.store import commands, experiments, run_records
from kb.store.runs import dollars_spent
from runner.measure.common import (
    FINAL,
    HEARTBEAT_SECONDS,
    RunStopped,
    Stop,
)
from runner.measure.jobs import Jobs


class Steering(Jobs):
    """Housekeeping between polls."""

    def _housekeeping(self) -> None:
        assert self.fleet is not None
        self.fleet.tick()  # background fleet work (SkyPilot: launches, qualification); rate-limited
        stamp = now()
        beat = stamp - self._last_beat >= HEARTBEAT_SECONDS
        if beat:
            self._last_beat = stamp
            assert self.fleet is not None
            cost = self.fleet.cost_usd()
            run_records.update(self.db, self.run_id, {"heartbeat_at": stamp, "cost_usd": cost})
        # The clock is checked on every poll, costs (database sums) with the heartbeat.
        if self._spent is None:
            self._spend(self._budget_spent(costs=beat))
            if self._spent:
                self._say(f"budget spent ({self._spent.words}): finishing what runs, starting nothing")
                self._event("budget_spent", f"budget spent: {self._spent.words}", level="warning")
        self._commands()
        if self.stopping:
            raise RunStopped

    def _budget_spent(self, *, costs: bool = True) -> Stop | None:
        """Whether budget.minutes or budget.usd (machines and model together) is spent."""
        minutes = self.budget.get("minutes")
        if minutes is not None and (now() - self.started_at) / 60 >= minutes:
            return Stop("budget_minutes", f"{minutes:g} minutes")
        usd = self.budget.get("usd")
        if usd is not None and costs:
            spent = dollars_spent(self.db, self.run_id, self.fleet.cost_usd() if self.fleet else 0.0)
            if spent >= usd:
                return Stop("budget_usd", f"${usd:g} (spent ${spent:.2f})")
        return None

    def _spend(self, stop: Stop | None) -> None:
        """Remember a spent budget: running batches finish, nothing new starts."""
        if stop is not None:
            self._spent = stop

    def _budget_stop(self) -> Stop | None:
        """The run's end when a budget is spent (its words say which budget)."""
        return None if self._spent is None else Stop(self._spent.reason, f"budget: {self._spent.words}")

    def _steering(self) -> dict[str, Any]:
        """runs.steering: {"focus": [...], "avoid": [...], "approval": bool | None}."""
        raw = self._run().get("steering")
        data = json.loads(raw) if raw else {}
        return data if isinstance(data, dict) else {}

    def _require_approval(self) -> bool:
        """`steer approval on|off` for this run, else hypotheses.require_approval."""
        chosen = self._steering().get("approval")
        return bool(chosen) if chosen is not None else self.settings.hypotheses.require_approval

    def _steer(self, key: str, value: Any) -> None:
        current = self._steering()
        if key in ("focus", "avoid"):
            notes = [n for n in current.get(key, []) if n != value]
            current[key] = [*notes, value][-10:]  # the newest ten: a prompt has room for them
        else:
            current[key] = value
        run_records.update(self.db, self.run_id, {"steering": current})

    def _commands(self) -> None:
        from runner import hypotheses

        for cmd in commands.pending(self.db):
            kind, target = cmd["kind"], cmd["target_id"]
            if cmd["target_kind"] == "run" and target not in (None, self.run_id):
                continue
            if cmd["target_kind"] == "experiment":
                exp = experiments.row(self.db, target) if target is not None else None
                if exp is not None and exp["run_id"] != self.run_id:
                    continue
            if not commands.claim(self.db, cmd["id"], now()):
                continue
            args = json.loads(cmd["args"] or "{}")
            try:
                result = self._command(kind, target, args, hypotheses)
                status = "done"
            except UserError as exc:
                result, status = str(exc), "failed"
            commands.finish(self.db, cmd["id"], status, result)
            self._event(
                "command",
                f"{kind} {cmd['target_kind'] or ''} {target or ''}: {result}".strip(),
                level="info" if status == "done" else "warning",
            )

    def _command(self, kind: str, target: int | None, args: dict[str, Any], hypotheses: Any) -> str:
        if kind in ("approve", "reject"):
            assert target is not None
            new = hypotheses.approve_or_reject(self.db, target, kind, by=f"run {self.name}")
            return f"hypothesis {target} {new}"
        if kind == "prioritize":
            assert target is not None
            priority = args.get("priority")
            if not isinstance(priority, int | float):
                raise UserError("prioritize: args need a numeric 'priority'")
            hypotheses.set_priority(self.db, target, float(priority))
            return f"hypothesis {target} priority {priority}"
        if kind == "pause":
            self.paused = True
            run_records.update(self.db, self.run_id, {"status": "paused"})
            self._say("paused: running batches finish, nothing new starts")
            return "paused"
        if kind == "resume":
            self.paused = False
            run_records.update(self.db, self.run_id, {"status": "running"})
            self._say("resumed")
            return "resumed"
        if kind == "stop":
            self.stopping = True
            self._say("stopping: cancelling running experiments")
            return "stopping"
        if kind in ("focus", "avoid"):
            text = " ".join(str(args.get("text") or "").split())
            if not text:
                raise UserError(f"{kind}: args need a non-empty 'text'")
            self._steer(kind, text[:500])
            return f"{kind}: {text[:80]} (read by the next research phase)"
        if kind == "approval":
            on = args.get("on")
            if not isinstance(on, bool):
                raise UserError("approval: args need 'on': true or false")
            self._steer("approval", on)
            return "approval on: generated hypotheses wait for a person" if on else "approval off"
        if kind == "budget":
            changed = {k: args[k] for k in ("usd", "minutes") if args.get(k) is not None}
            if not changed or not all(isinstance(v, int | float) and v > 0 for v in changed.values()):
                raise UserError("budget: args need a positive 'usd' and/or 'minutes'")
            self.budget = {**self.budget, **changed}
            run_records.update(self.db, self.run_id, {"budget": self.budget})
            if self._spent is not None and self._budget_spent() is None:
                self._spent = None  # raised above what is spent: go on
            return "budget " + ", ".join(f"{k} {v:g}" for k, v in changed.items())
        if kind == "cancel":
            assert target is not None
            exp = experiments.row(self.db, target)
            if exp is None:
                raise UserError(f"experiment {target}: no such experiment")
            if exp["status"] in FINAL:
                return f"experiment {target} already {exp['status']}"
            self._finish_experiment(target, "cancelled", "cancelled")
            return f"experiment {target} cancelled"
        raise UserError(f"command {kind!r}: unknown")
