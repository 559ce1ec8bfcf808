"""`autoresearch llm log`: every model call (purpose, model, tokens, cost, duration, error), newest first.

Reads the database only; never imports litellm.
"""

from __future__ import annotations

import contextlib
import json

import click

from tui.cli.common import echo, echo_json, echo_table, json_option, workspace


@click.group("llm")
def cli() -> None:
    """LLM calls log."""


@cli.command("log")
@click.option("--limit", "-n", type=click.IntRange(1, 100_000), default=20, show_default=True)
@click.option(
    "--purpose", default=None, help="Only calls for this purpose (queries, research, patch, reflect)."
)
@json_option
@click.pass_context
def log(ctx: click.Context, limit: int, purpose: str | None, as_json: bool) -> None:
    """The latest model calls; --json includes prompts and responses."""
    from dataclasses import asdict

    from kb.store import llm_calls

    ws = workspace(ctx)
    db = ws.db()
    found = llm_calls.latest(db, limit, purpose)
    totals = llm_calls.totals(db)
    budget = ws.settings.llm.budget_usd
    calls = [asdict(c) for c in found]
    if as_json:
        for call in calls:
            with contextlib.suppress(ValueError):
                call["prompt"] = json.loads(call["prompt"])
        echo_json(
            {
                "calls": calls,
                "total_calls": totals.calls,
                "spent_usd": totals.spent_usd,
                "budget_usd": budget,
            }
        )
        return
    if not calls:
        echo("No LLM calls logged.")
        return
    echo_table(
        ["id", "purpose", "model", "try", "in", "out", "cost", "ms", "hyp", "error"],
        [
            [
                c["id"],
                c["purpose"],
                c["model"],
                c["attempt"],
                c["input_tokens"],
                c["output_tokens"],
                "" if c["cost_usd"] is None else f"${c['cost_usd']:.4f}",
                c["duration_ms"],
                c["hypothesis_id"],
                " ".join((c["error"] or "").split())[:70],
            ]
            for c in calls
        ],
    )
    echo(f"\n{totals.calls} calls, ${totals.spent_usd:.4f} spent of ${budget:.2f} budget")
