"""Messages the TUI's workers and widgets post: dataclasses named for what happened.

Workers run in threads and post these to their screen (post_message is thread-safe); widgets post
them up to the screen that owns the state ("attributes down, messages up").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from kb.search import Evidence, SearchHit
    from runner.record.history import RunInfo, WaveInfo
    from runner.record.redecide import RedecideResult
    from tui.data import (
        CommitDetail,
        ExperimentDetail,
        FleetSnapshot,
        Fork,
        FusionMatrix,
        HypothesisDetail,
        MetricSeries,
        Page,
        Paper,
    )
    from tui.spawn import ProcessResult


@dataclass
class DatabaseChanged(Message):
    """Another connection committed (PRAGMA data_version moved). Bursts coalesce."""

    version: int

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DatabaseChanged)


@dataclass
class PageLoaded(Message):
    """A page of a table came back from a worker; `table` names which table it is for."""

    table: str
    page: Page[Any]
    select_id: int | None = None
    """Put the cursor on this row (a jump from search or an evidence link)."""


@dataclass
class ForksLoaded(Message):
    forks: list[Fork]


@dataclass
class PaperOpened(Message):
    paper: Paper
    page: Page[Any]
    select_id: int | None


@dataclass
class CommitLoaded(Message):
    commit: CommitDetail


@dataclass
class EvidenceLoaded(Message):
    evidence: Evidence


@dataclass
class InventoryLoaded(Message):
    matrix: FusionMatrix
    select_id: int | None = None


@dataclass
class SearchCompleted(Message):
    query: str
    hits: list[SearchHit]
    error: str | None = None


@dataclass
class HypothesisLoaded(Message):
    detail: HypothesisDetail


@dataclass
class HypothesisSteered(Message):
    """A status or priority change was written; `summary` is the one line to show."""

    hypothesis_id: int
    summary: str


@dataclass
class FleetRefreshed(Message):
    snapshot: FleetSnapshot
    tail: list[str]
    """The last log lines of the selected experiment."""
    tail_of: int | None
    elapsed: float
    """Seconds the worker took (the benchmark reads it)."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FleetRefreshed)


@dataclass
class LogRead(Message):
    path: str
    text: str
    offset: int
    reset: bool


@dataclass
class RunsLoaded(Message):
    runs: list[RunInfo]


@dataclass
class WavesLoaded(Message):
    run_id: int
    waves: list[WaveInfo]


@dataclass
class SeriesLoaded(Message):
    run_id: int
    series: MetricSeries


@dataclass
class ComparisonLoaded(Message):
    left: ExperimentDetail
    right: ExperimentDetail


@dataclass
class RedecideCompleted(Message):
    result: RedecideResult


@dataclass
class ProcessFinished(Message):
    what: str
    result: ProcessResult
