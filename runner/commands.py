"""Steering: the TUI and the CLI write commands, the runner picks them up between polls.

Kinds (the `commands` table's vocabulary): `approve`, `reject`, `prioritize` (args `{"priority": P}`)
a hypothesis; `pause`, `resume`, `stop` a run; `cancel` an experiment; and the autopilot's steering
of a run: `focus` / `avoid` (args `{"text": T}`, read by the next research phase), `approval`
(`{"on": bool}`: generated hypotheses wait for a person) and `budget` (`{"usd": N, "minutes": M}`).
The runner marks each one `done` or `failed` with a one-line result.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from kb.db import now, transaction
from kb.errors import UserError
from kb.store import commands as store

TARGETS: dict[str, str] = {
    "approve": "hypothesis",
    "reject": "hypothesis",
    "prioritize": "hypothesis",
    "pause": "run",
    "resume": "run",
    "stop": "run",
    "cancel": "experiment",
    "focus": "run",
    "avoid": "run",
    "approval": "run",
    "budget": "run",
}


NOTE_CHARS = 500
"""A focus or avoid note is kept to this many characters (a prompt has room for ten of them)."""


def checked_args(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """A command's arguments, checked and normalised: the one check, made by `send` at the door
    (a bad command is refused, not queued) and by the runner on what it reads (a row written some
    other way gets the same answer). UserError says what is wrong."""
    if kind == "prioritize":
        priority = args.get("priority")
        if isinstance(priority, bool) or not isinstance(priority, int | float):
            raise UserError("command prioritize: needs args {'priority': <number>}")
        return {"priority": float(priority)}
    if kind in ("focus", "avoid"):
        text = " ".join(str(args.get("text") or "").split())
        if not text:
            raise UserError(f"command {kind}: needs a non-empty text")
        return {"text": text[:NOTE_CHARS]}
    if kind == "approval":
        if not isinstance(args.get("on"), bool):
            raise UserError("command approval: needs on or off")
        return {"on": args["on"]}
    if kind == "budget":
        given: dict[str, Any] = {k: args[k] for k in ("usd", "minutes") if args.get(k) is not None}
        if not given:
            raise UserError("command budget: give --usd and/or --minutes")
        for key, value in given.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise UserError(f"command budget: {key} must be a positive number")
        return {k: float(v) for k, v in given.items()}
    return {}


def send(
    db: sqlite_utils.Database, kind: str, target_id: int | None = None, args: dict[str, Any] | None = None
) -> int:
    """Queue a command for the runner; returns its id. A run command without an id targets
    whichever run is going."""
    if kind not in TARGETS:
        raise UserError(f"command {kind!r}: must be one of {', '.join(TARGETS)}")
    target_kind = TARGETS[kind]
    if target_id is None and target_kind != "run":
        raise UserError(f"command {kind}: needs the id of a {target_kind}")
    checked_args(kind, args or {})
    with transaction(db):
        if target_id is not None and not store.target_exists(db, target_kind, target_id):
            raise UserError(f"command {kind}: no {target_kind} {target_id}")
        return store.create(
            db,
            {
                "kind": kind,
                "target_kind": target_kind,
                "target_id": target_id,
                "args": args,
                "status": "pending",
                "created_at": now(),
            },
        )


@dataclass(frozen=True)
class Steered:
    """A steering command sent to the going run (or kept for the next one), as the runner left it
    when the sender stopped waiting."""

    command: int
    kind: str
    run: int | None
    run_name: str | None
    status: str
    """pending (not read yet), done or failed."""
    result: str | None

    def refusal(self) -> str | None:
        """The runner's refusal in one line, or None."""
        return f"steer {self.kind}: {self.result}" if self.status == "failed" else None

    def to_json(self) -> dict[str, Any]:
        """`steer ... --json`."""
        return {
            "command": self.command,
            "kind": self.kind,
            "run": self.run,
            "status": self.status,
            "result": self.result,
        }


def steer(db: sqlite_utils.Database, kind: str, args: dict[str, Any], wait: float) -> Steered:
    """Send the going run a command and wait up to `wait` seconds for the runner's answer: the one
    path of `autoresearch steer` and the MCP server's steering tools. pause, resume and stop need a
    run that is going; focus, avoid, approval and budget with no run going wait for the next one."""
    from kb.store.runs import command, live_run

    live = live_run(db, now())
    if live is None and kind in ("pause", "resume", "stop"):
        raise UserError(f"steer {kind}: no run is going (autoresearch history lists the runs)")
    command_id = send(db, kind, live.id if live else None, args)
    row = command(db, command_id)
    deadline = time.monotonic() + (wait if live is not None else 0)
    while row is not None and row.status == "pending" and time.monotonic() < deadline:
        time.sleep(0.2)
        row = command(db, command_id)
    return Steered(
        command_id,
        kind,
        live.id if live else None,
        live.name if live else None,
        row.status if row else "pending",
        row.result if row else None,
    )
