"""The product's words, one place for each (DESIGN.md's statuses, verdicts, phases, stop reasons and
liveness). Importable without the database or the runner: the data layer (kb/store), the runner,
the CLI's choices and the TUI's filters all read them here, so a new status is added once."""

from __future__ import annotations

import re
from collections.abc import Iterable

HYPOTHESIS_STATUSES: tuple[str, ...] = (
    "proposed",
    "approved",
    "rejected",
    "patched",
    "unpatchable",
    "needs_port",
)
OUTCOMES: tuple[str, ...] = (
    "none",
    "queued",
    "running",
    "kept",
    "discarded",
    "inconclusive",
    "checks_failed",
    "crashed",
    "conflict",
    "refused",
    "cancelled",
    "lost",
)
"""A hypothesis's outcome is its latest experiment's status; `none`: never measured."""
SELF_TEST_STATUSES: tuple[str, ...] = ("passed", "failed")
"""An A/A self-test ends `passed` or `failed`, never with a candidate's verdict word (DESIGN.md)."""

EXPERIMENT_LIVE: tuple[str, ...] = ("queued", "running")
"""An experiment that can still change: waiting for a worker, or being measured."""
DECIDED_STATUSES: tuple[str, ...] = ("kept", "discarded", "inconclusive")
"""Statuses reached through a statistical decision (what `redecide` re-judges)."""
EXPERIMENT_FINAL: tuple[str, ...] = (
    *DECIDED_STATUSES,
    "checks_failed",
    "crashed",
    "conflict",
    "refused",
    "cancelled",
    "lost",
    *SELF_TEST_STATUSES,
)
"""Statuses an experiment can no longer leave."""
VERDICTS: tuple[str, ...] = ("keep", "discard", "inconclusive", "continue")
"""What the statistical policy says of a candidate after a batch of pairs."""
VERDICT_STATUS: dict[str, str] = {"keep": "kept", "discard": "discarded", "inconclusive": "inconclusive"}
"""The experiment status a final verdict ends in (`continue` ends nothing)."""
STATUS_VERDICT: dict[str, str] = {status: verdict for verdict, status in VERDICT_STATUS.items()}
"""The verdict behind a decided status."""

AREAS: tuple[str, ...] = (
    "backend",
    "core",
    "model",
    "app",
    "server",
    "web",
    "python",
    "tests",
    "build",
    "ci",
    "docs",
    "other",
)
"""What part of a project a changed file belongs to (kb.commit_facts sorts a commit's files into
them; `hypotheses.skip_areas` names them)."""

RUN_STATUSES: tuple[str, ...] = ("running", "paused", "finished", "failed", "interrupted")
RUN_LIVE: tuple[str, ...] = ("running", "paused")
"""A run a runner may still be driving (its heartbeat says whether one is)."""
STALE_HEARTBEAT = 30.0
"""Seconds: a runner whose heartbeat is older than this no longer drives its run (the runner beats
every couple of seconds; a SkyPilot worker's watchdog and the console use the same figure)."""

STOP_REASONS: tuple[str, ...] = (
    "queue_empty",
    "budget_usd",
    "budget_minutes",
    "waves",
    "max_experiments",
    "plateau",
    "no_hypotheses",
    "user",
)
"""Why a finished run stopped (runs.stop_reason, one token)."""
STOP_MEANINGS: dict[str, str] = {
    "queue_empty": "nothing left to measure",
    "budget_usd": "the dollar budget (LLM and machines) is spent",
    "budget_minutes": "the time budget is spent",
    "waves": "the wave limit was reached",
    "max_experiments": "the experiment limit was reached",
    "plateau": "autopilot.patience waves in a row kept nothing",
    "no_hypotheses": "the research phase found nothing new to try",
    "user": "stopped by a person (steer stop, the console, Ctrl-C)",
}

SOURCE_FORMS = (
    "URL, fork:NAME@SHA, evidence:ID, paper:ID (or the paper's URL or file:// address), gap:ID or note:TEXT"
)
"""The forms a hypothesis's provenance ref may take (`--source`; runner/submit.py checks them)."""

PHASES: tuple[str, ...] = ("researching", "patching", "measuring", "reflecting", "idle")
"""What a run is doing now (runs.phase), shown in the console."""

STATUS_MEANINGS: dict[str, str] = {
    "queued": "waiting for a worker",
    "running": "being set up, built, benchmarked or checked",
    "kept": "the gain is significant and at least min_effect: a winner",
    "discarded": "a gain of min_effect is ruled out (the interval lies below it)",
    "inconclusive": "neither ruled in nor out at the pair cap: within noise",
    "checks_failed": "the checks script failed on the candidate",
    "crashed": "setup, build or benchmark failed (the reason says which)",
    "conflict": "no longer applies after an earlier winner, even with a three-way merge",
    "refused": "touches a protected path, or tampered with the harness",
    "cancelled": "stopped before a decision",
    "lost": "its worker was lost; the patch is queued again",
    "passed": "A/A self-test: the baseline did not differ from itself",
    "failed": "A/A self-test: the baseline differed from itself (noise too high to judge)",
}
"""One line per experiment status, shown wherever statuses are (history, report, TUI footer)."""


def help_epilog() -> str:
    """The experiment statuses for a command's --help, one per line (click keeps `\\b` blocks)."""
    return "\b\nExperiment statuses:\n" + "\n".join(f"  {s}: {m}" for s, m in STATUS_MEANINGS.items())


def legend(statuses: Iterable[str]) -> list[str]:
    """`status: meaning` for each status given that has a meaning, in the vocabulary's order."""
    wanted = set(statuses)
    return [f"{s}: {m}" for s, m in STATUS_MEANINGS.items() if s in wanted]


SORTS: tuple[str, ...] = ("rank", "priority", "recent", "effect")
"""Orders of the queue's listing: rank (the queue order), priority, recent (newest idea first), effect."""


def gain_words(metric: str, direction: str) -> str:
    """What an effect is, in words: the gain, + better, whichever way the metric is better (a
    +18% on a time in ms is 18% better, not 18% longer)."""
    better = "lower" if direction == "lower" else "higher"
    return f"gain in {metric}, + = better ({better} {metric} is better)"


_TIME_NAME = re.compile(r"(?i)(^|[_.])(time|ms|us|ns|sec|secs|seconds|latency|duration|elapsed)($|[_.])")


def reads_like_time(metric: str) -> bool:
    """Does a metric's name read like a time (`add_remove_ms`, `latency`), where lower is better?"""
    return bool(_TIME_NAME.search(metric))
