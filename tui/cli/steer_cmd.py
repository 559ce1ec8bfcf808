"""`autoresearch steer`: steer the run that is going, from any shell (the console does the same).

Each subcommand writes one command to the workspace database (runner/commands.py); the runner
reads it between polls and records what it did. focus/avoid notes and the approval switch reach
the next research phase; with nothing running they wait for the next run."""

from __future__ import annotations

from typing import Any

import click

from tui.cli.common import echo, echo_json, json_option, workspace
from tui.cli.params import TEXT, Number

_POSITIVE = Number(min=0, min_open=True)


@click.group("steer")
def cli() -> None:
    """Steer the going run: pause, resume, stop, focus, avoid, approval, budget."""


def _send(ctx: click.Context, kind: str, args: dict[str, Any], wait: float, as_json: bool) -> None:
    from kb.errors import UserError
    from runner.commands import steer

    sent = steer(workspace(ctx).db(), kind, args, wait)
    if as_json:
        echo_json(sent.to_json())
        return
    if sent.status == "pending":
        where = f"run {sent.run_name}" if sent.run_name else "the next run"
        echo(f"{kind}: sent (command {sent.command}); {where} reads it between polls")
    elif (refused := sent.refusal()) is not None:
        raise UserError(refused)
    else:
        echo(f"{kind}: {sent.result}")


def _wait_option(fn: Any) -> Any:
    return click.option(
        "--wait",
        type=Number(min=0),
        default=5.0,
        show_default=True,
        help="Seconds to wait for the runner's answer.",
    )(fn)


def _simple(kind: str, doc: str) -> None:
    @cli.command(kind, help=doc)
    @_wait_option
    @json_option
    @click.pass_context
    def command(ctx: click.Context, wait: float, as_json: bool) -> None:
        _send(ctx, kind, {}, wait, as_json)


_simple("pause", "Running batches finish; nothing new starts until `steer resume`.")
_simple("resume", "Carry on after a pause.")
_simple("stop", "Cancel what runs and finish the run (stop_reason user).")


@cli.command("focus")
@click.argument("text", type=TEXT)
@_wait_option
@json_option
@click.pass_context
def focus(ctx: click.Context, text: str, wait: float, as_json: bool) -> None:
    """A direction for the next research phase (e.g. "memory traffic in the matmul")."""
    _send(ctx, "focus", {"text": text}, wait, as_json)


@cli.command("avoid")
@click.argument("text", type=TEXT)
@_wait_option
@json_option
@click.pass_context
def avoid(ctx: click.Context, text: str, wait: float, as_json: bool) -> None:
    """A direction the research phase should leave alone (e.g. "SIMD micro-tuning")."""
    _send(ctx, "avoid", {"text": text}, wait, as_json)


@cli.command("approval")
@click.argument("state", type=click.Choice(["on", "off"]))
@_wait_option
@json_option
@click.pass_context
def approval(ctx: click.Context, state: str, wait: float, as_json: bool) -> None:
    """on: generated hypotheses wait for a person (`hypotheses approve`); off: the autopilot runs them."""
    _send(ctx, "approval", {"on": state == "on"}, wait, as_json)


@cli.command("budget")
@click.option("--usd", type=_POSITIVE, help="The run's dollar budget (machines and model together).")
@click.option("--minutes", type=_POSITIVE, help="The run's time budget, from its start.")
@_wait_option
@json_option
@click.pass_context
def budget(ctx: click.Context, usd: float | None, minutes: float | None, wait: float, as_json: bool) -> None:
    """Change the going run's budget (raise it to let a stopped-by-budget wave go on)."""
    _send(ctx, "budget", {"usd": usd, "minutes": minutes}, wait, as_json)
