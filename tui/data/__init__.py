"""The TUI's typed access to the workspace database: every query and write the app makes lives here.

Widgets never see SQL or rows: screens call these functions inside thread workers (each with a
fresh connection from `Store.session()`), and hand the returned dataclasses down to widgets.
Large tables come back as a `Page` (LIMIT/OFFSET with the total), so the app stays fast with
100,000 passages and 10,000 experiments.

Writes are steering only: hypothesis status and priority changes go through runner.hypotheses
(the same path as `autoresearch hypotheses approve|reject|prioritize`), and run or experiment
steering (pause, resume, stop, cancel, focus, avoid, approval) is a row in the `commands` table
for the runner process.

One module per concern: `store` (the connection), `knowledge`, `hypotheses`, `fleet` (with the
research log) and `history`; screens keep `from tui import data` and read every name from here.
"""

from __future__ import annotations

# The typed rows and queries of the data layer (kb.store) the screens use, re-exported.
from kb.store.hypotheses import PatchInfo
from kb.store.knowledge import (
    CommitDetail,
    CommitRow,
    EvidenceLink,
    Fork,
    FusionCell,
    FusionMatrix,
    FusionRow,
    Paper,
    Passage,
    commit,
    commits,
    evidence_link,
    forks,
    fusion_matrix,
    paper,
    papers,
    passage_index,
    passages,
)
from kb.store.paging import PAGE_SIZE, Page, clamp_offset, version
from kb.store.research_log import ResearchPhase, RunSteering
from kb.store.runs import FleetExperiment, FleetWorker, RunStatus, current_run_id, experiment_log_dir
from kb.vocabulary import EXPERIMENT_LIVE as LIVE_EXPERIMENT_STATUSES
from kb.vocabulary import RUN_LIVE as LIVE_RUN_STATUSES
from kb.vocabulary import STALE_HEARTBEAT
from tui.data.fleet import (
    NOTE_KINDS,
    FleetSnapshot,
    cancel_experiment,
    fleet,
    log_files,
    log_tail,
    read_log,
    run_status,
    send_command,
    steer_run,
)
from tui.data.history import (
    ChartPoint,
    ExperimentDetail,
    ExperimentLine,
    MetricSeries,
    experiment_detail,
    metric_series,
    redecide,
    run_experiments,
    runs,
    waves,
)
from tui.data.hypotheses import (
    HYPOTHESIS_SORTS,
    HYPOTHESIS_STATUSES,
    HypothesisDetail,
    HypothesisOutcome,
    HypothesisRow,
    approve,
    change_priority,
    hypotheses,
    hypothesis,
    parse_filter,
    reject,
    source_kind,
)
from tui.data.knowledge import (
    SNIPPET_MARKS,
    evidence,
    search,
)
from tui.data.store import (
    DB_NAME,
    Store,
    connect,
    log_event,
    transaction,
)

__all__ = [
    "ResearchPhase",
    "RunSteering",
    "NOTE_KINDS",
    "PatchInfo",
    "CommitDetail",
    "CommitRow",
    "EvidenceLink",
    "Fork",
    "FusionCell",
    "FusionMatrix",
    "FusionRow",
    "Paper",
    "Passage",
    "commit",
    "commits",
    "evidence_link",
    "forks",
    "fusion_matrix",
    "paper",
    "papers",
    "passage_index",
    "passages",
    "PAGE_SIZE",
    "Page",
    "clamp_offset",
    "version",
    "FleetExperiment",
    "RunStatus",
    "FleetWorker",
    "current_run_id",
    "experiment_log_dir",
    "LIVE_EXPERIMENT_STATUSES",
    "LIVE_RUN_STATUSES",
    "STALE_HEARTBEAT",
    "DB_NAME",
    "connect",
    "transaction",
    "log_event",
    "Store",
    "SNIPPET_MARKS",
    "search",
    "evidence",
    "HYPOTHESIS_STATUSES",
    "HYPOTHESIS_SORTS",
    "source_kind",
    "HypothesisRow",
    "HypothesisOutcome",
    "HypothesisDetail",
    "hypotheses",
    "parse_filter",
    "hypothesis",
    "approve",
    "reject",
    "change_priority",
    "FleetSnapshot",
    "run_status",
    "fleet",
    "log_files",
    "log_tail",
    "read_log",
    "send_command",
    "cancel_experiment",
    "steer_run",
    "ExperimentLine",
    "ChartPoint",
    "MetricSeries",
    "runs",
    "waves",
    "run_experiments",
    "metric_series",
    "ExperimentDetail",
    "experiment_detail",
    "redecide",
]
