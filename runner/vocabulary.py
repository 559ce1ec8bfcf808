"""The queue's words (DESIGN.md's statuses), importable without the database: the CLI's choices and
the TUI's filters read them at start-up, and runner/hypotheses.py, runner/queue_query.py use them."""

from __future__ import annotations

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
SORTS: tuple[str, ...] = ("rank", "priority", "recent", "effect")
"""Orders of the queue's listing: rank (the queue order), priority, recent (newest idea first), effect."""
