"""Housekeeping between polls: the heartbeat, the budget, and the commands people send."""

from __future__ import annotations

import json
from typing import Any

from kb.db import now, one, rows, update
from kb.errors import UserError
from kb.store.runs import dollars_spent
from runner.measure.common import (
    FINAL,
    HEARTBEAT_SECONDS,
    RunStopped,
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
            update(self.db, "runs", self.run_id, {"heartbeat_at": stamp, "cost_usd": cost})
        # The clock is checked on every poll, costs (database sums) with the heartbeat.
        if self._budget_reason is None:
            self._budget_reason = self._budget_spent(costs=beat)
            if self._budget_reason:
                self._say(f"budget spent ({self._budget_reason}): finishing what runs, starting nothing")
                self._event("budget_spent", f"budget spent: {self._budget_reason}", level="warning")
        self._commands()
        if self.stopping:
            raise RunStopped

    def _budget_spent(self, *, costs: bool = True) -> str | None:
        minutes = self.budget.get("minutes")
        if minutes is not None and (now() - self.started_at) / 60 >= minutes:
            return f"{minutes:g} minutes"
        usd = self.budget.get("usd")
        if usd is not None and costs:
            spent = dollars_spent(self.db, self.run_id, self.fleet.cost_usd() if self.fleet else 0.0)
            if spent >= usd:
                return f"${usd:g} (spent ${spent:.2f})"
        return None

    def _commands(self) -> None:
        from runner import hypotheses

        for cmd in rows(self.db, "SELECT * FROM commands WHERE status = 'pending' ORDER BY id"):
            kind, target = cmd["kind"], cmd["target_id"]
            if cmd["target_kind"] == "run" and target not in (None, self.run_id):
                continue
            if cmd["target_kind"] == "experiment":
                exp = one(self.db, "SELECT * FROM experiments WHERE id = ?", [target])
                if exp is not None and exp["run_id"] != self.run_id:
                    continue
            claimed = self.db.execute(
                "UPDATE commands SET status = 'done', handled_at = ? WHERE id = ? AND status = 'pending'",
                [now(), cmd["id"]],
            ).rowcount
            if not claimed:
                continue
            args = json.loads(cmd["args"] or "{}")
            try:
                result = self._command(kind, target, args, hypotheses)
                status = "done"
            except UserError as exc:
                result, status = str(exc), "failed"
            update(self.db, "commands", cmd["id"], {"status": status, "result": result})
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
            update(self.db, "runs", self.run_id, {"status": "paused"})
            self._say("paused: running batches finish, nothing new starts")
            return "paused"
        if kind == "resume":
            self.paused = False
            update(self.db, "runs", self.run_id, {"status": "running"})
            self._say("resumed")
            return "resumed"
        if kind == "stop":
            self.stopping = True
            self._say("stopping: cancelling running experiments")
            return "stopping"
        if kind == "cancel":
            assert target is not None
            exp = one(self.db, "SELECT * FROM experiments WHERE id = ?", [target])
            if exp is None:
                raise UserError(f"experiment {target}: no such experiment")
            if exp["status"] in FINAL:
                return f"experiment {target} already {exp['status']}"
            self._finish_experiment(target, "cancelled", "cancelled")
            return f"experiment {target} cancelled"
        raise UserError(f"command {kind!r}: unknown")
