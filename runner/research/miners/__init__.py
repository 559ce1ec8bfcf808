"""Miners that need no LLM: knowledge in the KB becomes hypotheses that cite it.

The registry: one line per miner (`MINERS`, in the order they run and are reported). A miner is
one module with one object (runner/research/miners/base.py says what it has); `mine` runs them
all, ranks the queue once, logs one `hypotheses.mine` event and returns a `MineReport` whose
counts, labels and skip reasons come from the miners themselves, so the CLI, the demo's summary,
the console and `--json` show a new miner's work without a field of their own.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from kb.db import log_event, transaction
from runner.research.miners.base import Mined, Miner

if TYPE_CHECKING:
    import sqlite_utils

    from kb.workspace import Workspace

__all__ = [
    "MINERS",
    "MineReport",
    "Mined",
    "Miner",
    "added_ids",
    "label_of_origin",
    "mine",
    "miners",
    "reasons",
]

MINERS: tuple[str, ...] = (
    "runner.research.miners.gaps:GapMiner",
    "runner.research.miners.forks:ForkMiner",
)
"""Every miner, as `module:class`: a new miner is a module and a line here."""


@cache
def miners() -> tuple[Miner, ...]:
    """The registered miners, imported on first use."""
    found: list[Miner] = []
    for spec in MINERS:
        module, _, name = spec.partition(":")
        found.append(getattr(importlib.import_module(module), name)())
    return tuple(found)


def reasons() -> dict[str, str]:
    """What each skip reason of any miner means and what would change it."""
    out: dict[str, str] = {}
    for miner in miners():
        out.update(miner.reasons)
    return out


def label_of_origin(origin: str) -> str | None:
    """How people read a mined hypothesis's origin (`miner:gap` -> "backend gap"); None: not mined."""
    for miner in miners():
        if origin == f"miner:{miner.name}":
            return miner.label.replace("-", " ")
    return None


@dataclass
class MineReport:
    """What the miners did, together: each miner's hypotheses by its name, and the rest merged."""

    added: dict[str, list[int]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    details: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    """Reason -> count (`reasons()` says what each means)."""
    left_out: dict[str, int] = field(default_factory=dict)
    """What the miners left out, by what it touches (`cuda`, `docs+build`): browsable, not queued."""
    ranked: dict[str, Any] = field(default_factory=dict)
    """What ranking the queue afterwards did (runner.rank.RankReport)."""

    def add(self, miner: Miner, mined: Mined) -> None:
        self.added[miner.name] = [*self.added.get(miner.name, []), *mined.added]
        self.labels[miner.name] = miner.label
        for key, ids in mined.details.items():
            self.details[key] = [*self.details.get(key, []), *ids]
        for reason, count in mined.skipped.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + count
        for what, count in mined.left_out.items():
            self.left_out[what] = self.left_out.get(what, 0) + count
        if mined.note:
            self.notes.append(mined.note)

    @property
    def all_added(self) -> list[int]:
        return [hid for ids in self.added.values() for hid in ids]

    def line(self) -> str:
        """`Added 1 backend-gap and 6 fork-commit hypotheses (...)`."""
        parts = [f"{len(ids)} {self.labels[name]}" for name, ids in self.added.items()]
        counts = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        return f"Added {counts or 'no'} hypotheses" + "".join(f" ({note})" for note in self.notes)

    def to_json(self) -> dict[str, Any]:
        """Each miner's ids under `<name>_added`, then the miners' own lists, skipped, left_out, ranked."""
        return {
            **{f"{name}_added": ids for name, ids in self.added.items()},
            **self.details,
            "skipped": self.skipped,
            "left_out": self.left_out,
            "ranked": self.ranked,
        }


def added_ids(event_data: dict[str, Any]) -> list[int]:
    """The hypotheses a `hypotheses.mine` event says were added, whatever miners ran: the
    registered miners' in their order, then any other miner's the event names."""
    keys = [f"{m.name}_added" for m in miners()]
    keys += sorted(k for k in event_data if k.endswith("_added") and k not in keys)
    return [int(hid) for key in keys if isinstance(event_data.get(key), list) for hid in event_data[key]]


def mine(ws: Workspace, db: sqlite_utils.Database, *, queue_protected: bool = False) -> MineReport:
    """Every miner in turn, then the whole queue ranked; logs one event with what was added."""
    from runner.rank import rerank

    report = MineReport()
    for miner in miners():
        report.add(miner, miner.mine(ws, db, queue_protected=queue_protected))
    if report.all_added:
        report.ranked = rerank(ws, db).to_json()
    counts = " and ".join(f"{len(ids)} {name}" for name, ids in report.added.items())
    with transaction(db):
        log_event(
            db,
            "hypotheses.mine",
            f"mined {counts} hypotheses" + "".join(f" ({note})" for note in report.notes),
            data=report.to_json(),
        )
    return report
