"""The queue's words (DESIGN.md's statuses), importable without the database: the CLI's choices and
the TUI's filters read them at start-up, and runner/hypotheses.py, runner/queue_query.py use them."""

from __future__ import annotations

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
