"""What a miner is: knowledge in the KB turned into hypotheses that cite it, with no model.

A miner is an object with a `name` (its hypotheses' origin is `miner:<name>`, its ids are
reported under `<name>_added`), a `label` (how people read its hypotheses: "backend-gap"), the
`reasons` it may skip something for (each with what it means and what would change it) and a
`mine` method. The registry (runner/research/miners/__init__.py) holds one line per miner; the
report, the CLI, the demo's summary and the console read every count from there, so a new miner
is one module and one registration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import sqlite_utils

    from kb.workspace import Workspace


@dataclass
class Mined:
    """What one miner did."""

    added: list[int] = field(default_factory=list)
    """The hypotheses it added."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Reason -> count of what it looked at and did not turn into a hypothesis."""
    left_out: dict[str, int] = field(default_factory=dict)
    """What it left out, by what it touches (`cuda`, `docs+build`): browsable, not queued."""
    details: dict[str, list[int]] = field(default_factory=dict)
    """Lists of its own, reported as they are (the fork miner: conflicts, rebased, needs_port)."""
    note: str = ""
    """A sentence of its own after its count in the summary line."""

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def leave_out(self, reason: str, what: str) -> None:
        self.skip(reason)
        self.left_out[what] = self.left_out.get(what, 0) + 1


class Miner(Protocol):
    """A miner (see the module docstring)."""

    name: str
    label: str
    reasons: Mapping[str, str]

    def mine(self, ws: Workspace, db: sqlite_utils.Database, *, queue_protected: bool) -> Mined:
        """Add hypotheses for what it finds; adds nothing twice when run again (a dedupe key per
        hypothesis, checked before any costly work)."""
        ...
