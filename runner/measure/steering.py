"""Housekeeping between polls: the heartbeat, the budget, and the commands people send
(`autoresearch steer`, the console, `hypotheses approve|reject`: runner/commands.py writes them).

Steering that outlives this process is in the database, not in memory: a focus or avoid note and
the approval switch are kept in runs.steering (the next research phase reads them), a new budget
in runs.budget; only pause and stop act on this runner directly."""

from __future__ import annotations

from typing import Any

from kb.db import now
from kb.errors import UserError
from kb.jsoncol import decoded_dict
from kb.store import commands, experiments, run_records
from kb.store.runs import dollars_spent
from runner.commands import checked_args
from runner.measure.common import (
    FINAL,
    HEARTBEAT_SECONDS,
    RunStopped,
    Stop,
)
from runner.measure.context import RunContext
from runner.measure.lifecycle import Lifecycle
from runner.measure.live import LiveJobs


class Budget:
    """The run's budget: minutes, dollars (machines and model together) and experiments. Once
    spent, running batches finish and nothing new starts (RunState.spent)."""

    def __init__(self, ctx: RunContext, live: LiveJobs) -> None:
        self.ctx = ctx
        self.live = live

    def check(self, *, costs: bool = True) -> Stop | None:
        """Whether budget.minutes or budget.usd (machines and model together) is spent."""
        state = self.ctx.state
        minutes = state.budget.get("minutes")
        if minutes is not None and (now() - state.started_at) / 60 >= minutes:
            return Stop("budget_minutes", f"{minutes:g} minutes")
        usd = state.budget.get("usd")
        if usd is not None and costs:
            spent = dollars_spent(self.ctx.db, self.ctx.run_id, self.live.cost_usd())
            if spent >= usd:
                return Stop("budget_usd", f"${usd:g} (spent ${spent:.2f})")
        return None

    def spend(self, stop: Stop | None) -> None:
        """Remember a spent budget: running batches finish, nothing new starts."""
        if stop is not None:
            self.ctx.state.spent = stop

    def refresh(self) -> None:
        """Check the budget now and remember it if it is spent."""
        self.spend(self.check())

    def stop(self) -> Stop | None:
        """The run's end when a budget is spent (its words say which budget)."""
        spent = self.ctx.state.spent
        return None if spent is None else Stop(spent.reason, f"budget: {spent.words}")

    def change(self, changed: dict[str, float]) -> None:
        """A `budget` command: the new limits, and going on when they lie above what is spent."""
        state = self.ctx.state
        state.budget = {**state.budget, **changed}
        run_records.update(self.ctx.db, self.ctx.run_id, {"budget": state.budget})
        if state.spent is not None and self.check() is None:
            state.spent = None  # raised above what is spent: go on


class Steering:
    """Housekeeping between polls: the heartbeat, the budget, and the commands people send."""

    def __init__(self, ctx: RunContext, live: LiveJobs, lifecycle: Lifecycle, budget: Budget) -> None:
        self.ctx = ctx
        self.live = live
        self.lifecycle = lifecycle
        self.budget = budget

    def housekeeping(self) -> None:
        self.live.fleet.tick()  # background fleet work (SkyPilot: launches, qualification); rate-limited
        stamp = now()
        beat = stamp - self.ctx.state.last_beat >= HEARTBEAT_SECONDS
        if beat:
            self.ctx.state.last_beat = stamp
            cost = self.live.fleet.cost_usd()
            run_records.update(self.ctx.db, self.ctx.run_id, {"heartbeat_at": stamp, "cost_usd": cost})
        # The clock is checked on every poll, costs (database sums) with the heartbeat.
        if self.ctx.state.spent is None:
            self.budget.spend(self.budget.check(costs=beat))
            if self.ctx.state.spent:
                self.ctx.say(
                    f"budget spent ({self.ctx.state.spent.words}): finishing what runs, starting nothing"
                )
                self.ctx.event("budget_spent", f"budget spent: {self.ctx.state.spent.words}", level="warning")
        self.commands()
        if self.ctx.state.stopping:
            raise RunStopped

    def notes(self) -> dict[str, Any]:
        """runs.steering: {"focus": [...], "avoid": [...], "approval": bool | None}."""
        raw = self.ctx.run().get("steering")
        return decoded_dict(raw)

    def require_approval(self) -> bool:
        """`steer approval on|off` for this run, else hypotheses.require_approval."""
        chosen = self.notes().get("approval")
        return bool(chosen) if chosen is not None else self.ctx.settings.hypotheses.require_approval

    def _steer(self, key: str, value: Any) -> None:
        current = self.notes()
        if key in ("focus", "avoid"):
            notes = [n for n in current.get(key, []) if n != value]
            current[key] = [*notes, value][-10:]  # the newest ten: a prompt has room for them
        else:
            current[key] = value
        run_records.update(self.ctx.db, self.ctx.run_id, {"steering": current})

    def commands(self) -> None:
        from runner import hypotheses

        for cmd in commands.pending(self.ctx.db):
            kind, target = cmd["kind"], cmd["target_id"]
            if cmd["target_kind"] == "run" and target not in (None, self.ctx.run_id):
                continue
            if cmd["target_kind"] == "experiment":
                exp = experiments.row(self.ctx.db, target) if target is not None else None
                if exp is not None and exp["run_id"] != self.ctx.run_id:
                    continue
            if not commands.claim(self.ctx.db, cmd["id"], now()):
                continue
            args = decoded_dict(cmd["args"])
            try:
                result = self._command(kind, target, args, hypotheses)
                status = "done"
            except UserError as exc:
                result, status = str(exc), "failed"
            commands.finish(self.ctx.db, cmd["id"], status, result)
            self.ctx.event(
                "command",
                f"{kind} {cmd['target_kind'] or ''} {target or ''}: {result}".strip(),
                level="info" if status == "done" else "warning",
            )

    def _command(self, kind: str, target: int | None, raw: dict[str, Any], hypotheses: Any) -> str:
        args = checked_args(kind, raw)  # the check `send` made at the door (runner/commands.py)
        if kind in ("approve", "reject"):
            assert target is not None
            new = hypotheses.approve_or_reject(self.ctx.db, target, kind, by=f"run {self.ctx.state.name}")
            return f"hypothesis {target} {new}"
        if kind == "prioritize":
            assert target is not None
            hypotheses.set_priority(self.ctx.db, target, args["priority"])
            return f"hypothesis {target} priority {args['priority']:g}"
        if kind == "pause":
            self.ctx.state.paused = True
            run_records.update(self.ctx.db, self.ctx.run_id, {"status": "paused"})
            self.ctx.say("paused: running batches finish, nothing new starts")
            return "paused"
        if kind == "resume":
            self.ctx.state.paused = False
            run_records.update(self.ctx.db, self.ctx.run_id, {"status": "running"})
            self.ctx.say("resumed")
            return "resumed"
        if kind == "stop":
            self.ctx.state.stopping = True
            self.ctx.say("stopping: cancelling running experiments")
            return "stopping"
        if kind in ("focus", "avoid"):
            self._steer(kind, args["text"])
            return f"{kind}: {args['text'][:80]} (read by the next research phase)"
        if kind == "approval":
            self._steer("approval", args["on"])
            return "approval on: generated hypotheses wait for a person" if args["on"] else "approval off"
        if kind == "budget":
            self.budget.change(args)
            return "budget " + ", ".join(f"{k} {v:g}" for k, v in args.items())
        if kind == "cancel":
            assert target is not None
            exp = experiments.row(self.ctx.db, target)
            if exp is None:
                raise UserError(f"experiment {target}: no such experiment")
            if exp["status"] in FINAL:
                return f"experiment {target} already {exp['status']}"
            self.lifecycle.finish(target, "cancelled", "cancelled")
            return f"experiment {target} cancelled"
        raise UserError(f"command {kind!r}: unknown")
