"""The TUI's typed access to the workspace database: every query and write the app makes lives here.

Widgets never see SQL or rows: screens call these functions inside thread workers (each with a
fresh connection from `Store.session()`), and hand the returned dataclasses down to widgets.
Large tables come back as a `Page` (LIMIT/OFFSET with the total), so the app stays fast with
100,000 passages and 10,000 experiments.

Writes are steering only: hypothesis status and priority changes go through runner.hypotheses
(the same path as `autoresearch hypotheses approve|reject|prioritize`), and run or experiment
steering (pause, resume, stop, cancel) is a row in the `commands` table for the runner process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb import vocabulary as _vocabulary
from kb.errors import UserError

# The typed rows and queries live in the data layer (kb.store); screens and tests import them from
# here, so the names are re-exported.
from kb.store import decisions as _decision_store
from kb.store import hypotheses as _hyp_store
from kb.store import runs as _run_store
from kb.store.experiments import candidate_samples
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
from kb.store.paging import (
    PAGE_SIZE,
    Page,
    clamp_offset,
    version,
)
from kb.store.runs import (
    FleetExperiment,
    RunStatus,
    WorkerRow,
    current_run_id,
    experiment_log_dir,
)
from kb.vocabulary import EXPERIMENT_LIVE as LIVE_EXPERIMENT_STATUSES
from kb.vocabulary import RUN_LIVE as LIVE_RUN_STATUSES
from kb.vocabulary import STALE_HEARTBEAT

if TYPE_CHECKING:
    import sqlite_utils

    from kb.search import Evidence, SearchHit
    from runner.queue_query import QueueFilter, QueueRow
    from runner.record.history import DecisionInfo, ExperimentInfo, RunInfo, Sample, WaveInfo
    from runner.record.redecide import RedecideResult

# Only the names this module re-exports from kb.store (its own definitions are public anyway).
__all__ = [
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
    "LIVE_EXPERIMENT_STATUSES",
    "LIVE_RUN_STATUSES",
    "STALE_HEARTBEAT",
    "FleetExperiment",
    "RunStatus",
    "WorkerRow",
    "current_run_id",
    "experiment_log_dir",
]

DB_NAME = "autoresearch.db"  # kb.db.DB_NAME (a test checks they agree)


# kb.db imports sqlite_utils, which imports pandas when it is installed (0.2-0.7 s): the app must
# paint before that, so this module reaches kb.db only from inside functions (run in workers).


def connect(path: Path, *, migrate_schema: bool = True) -> sqlite_utils.Database:
    """The workspace's database, which must exist (the console never creates one)."""
    from kb.db import connect as kb_connect

    return kb_connect(path, migrate_schema=migrate_schema, create=False)


def transaction(db: sqlite_utils.Database) -> AbstractContextManager[sqlite_utils.Database]:
    from kb.db import transaction as kb_transaction

    return kb_transaction(db)


def log_event(db: sqlite_utils.Database, kind: str, message: str) -> int:
    from kb.db import log_event as kb_log_event

    return kb_log_event(db, kind, message)


class Store:
    """The workspace database as the TUI sees it: a new connection per session, per thread."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._migrated = False
        self._lock = threading.Lock()

    @property
    def db_path(self) -> Path:
        return self.root / DB_NAME

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def name(self) -> str:
        return self.root.name

    @contextmanager
    def session(self) -> Iterator[sqlite_utils.Database]:
        """A connection for the calling thread, closed afterwards. The first one brings the schema
        up to date (in a worker, so the app paints first); the others wait for it."""
        if not self._migrated:
            with self._lock:
                if not self._migrated:
                    connect(self.db_path).conn.close()
                    self._migrated = True
        db = connect(self.db_path, migrate_schema=False)
        try:
            yield db
        finally:
            db.conn.close()

    def fallback_policy(self) -> dict[str, Any]:
        """The config's policy and metric, for runs whose stored policy lacks a key (as the CLI)."""
        from kb.config import load_settings
        from runner.record.redecide import fallback_policy

        return fallback_policy(load_settings(self.root / "autoresearch.toml"))


# --- knowledge: search and evidence -------------------------------------------------------------

SNIPPET_MARKS = ("\x01", "\x02")  # search hit highlights, turned into styles by the widget


def search(db: sqlite_utils.Database, query: str, limit: int = 50) -> list[SearchHit]:
    from kb.search import search as kb_search

    return kb_search(db, query, limit=limit, marks=SNIPPET_MARKS, snippet_tokens=16)


def evidence(db: sqlite_utils.Database, evidence_id: int) -> Evidence:
    from kb.search import get_evidence

    return get_evidence(db, evidence_id)


# --- hypotheses ---------------------------------------------------------------------------------

HYPOTHESIS_STATUSES = _vocabulary.HYPOTHESIS_STATUSES
HYPOTHESIS_SORTS = _vocabulary.SORTS
_SOURCE_OF_KIND = {"passage": "paper", "commit": "fork", "gap": "gap", "fusion": "gap", "single_op": "gap"}


def source_kind(origin: str, cited_kinds: Sequence[str]) -> str:
    """What a hypothesis comes from: the kinds of evidence it cites, else its origin."""
    kinds = sorted({_SOURCE_OF_KIND.get(k, k) for k in cited_kinds})
    return "+".join(kinds) if kinds else origin


@dataclass(frozen=True)
class HypothesisRow:
    id: int
    title: str
    status: str
    priority: float
    origin: str
    source: str
    expected_effect: float | None
    outcome: str | None
    """Its latest experiment's status."""
    rank: float | None = None
    priority_set: bool = False
    """A person set the priority (it orders the queue before the rank)."""
    family: int | None = None
    family_size: int = 1
    waits_behind: int | None = None
    """The family member it waits behind (None: it does not wait)."""
    why: str = ""
    """The rank's two weightiest reasons, in one line."""
    rank_lines: tuple[str, ...] = ()
    """Every part of the rank, one line each (runner.rank.explain)."""


@dataclass(frozen=True)
class HypothesisExperiment:
    id: int
    run: str
    status: str
    effect: float | None


@dataclass(frozen=True)
class HypothesisDetail:
    row: HypothesisRow
    rationale: str
    risk: str | None
    confidence: float | None
    notes: str | None
    evidence: list[EvidenceLink]
    source_refs: list[str]
    patch: PatchInfo | None
    experiments: list[HypothesisExperiment] = field(default_factory=list)


def _hyp_row(r: QueueRow) -> HypothesisRow:
    from runner.rank import explain, summary

    return HypothesisRow(
        id=r.id,
        title=r.title,
        status=r.status,
        priority=r.priority,
        origin=r.origin,
        source=source_kind(r.origin, r.cites),
        expected_effect=r.expected_effect,
        outcome=r.outcome,
        rank=r.rank,
        priority_set=r.priority_set,
        family=r.family,
        family_size=r.family_size,
        waits_behind=r.waits_behind,
        why=summary(r.rank_why, 200) if r.rank_why else "",
        rank_lines=tuple(explain(r.rank_why)) if r.rank_why else (),
    )


def hypotheses(
    db: sqlite_utils.Database,
    status: str | None = None,
    offset: int = 0,
    limit: int = PAGE_SIZE,
    filters: QueueFilter | None = None,
) -> Page[HypothesisRow]:
    """The queue in the order the runner takes it (or the filter's sort), one page: the same query
    as `autoresearch hypotheses list` (runner.queue_query). `status` narrows `filters` when given."""
    from dataclasses import replace

    from runner.queue_query import QueueFilter, queue_page

    flt = filters or QueueFilter()
    if status is not None:
        flt = replace(flt, status=status)
    page = queue_page(db, flt, offset=offset, limit=limit)
    return Page([_hyp_row(r) for r in page.rows], page.offset, limit, page.total)


def parse_filter(text: str, sort: str = "rank", status: str | None = None) -> QueueFilter:
    """The Hypotheses pane's filter bar: `status:proposed backend:cpu path:ggml/src/iqk repack` ->
    a QueueFilter (the words left over search titles, rationales and the evidence cited)."""
    from runner.queue_query import QueueFilter

    keys = {"status", "outcome", "origin", "path", "backend"}
    found: dict[str, str] = {}
    words: list[str] = []
    for token in text.split():
        key, sep, value = token.partition(":")
        if sep and key in keys and value:
            found[key] = value
        else:
            words.append(token)
    flt = QueueFilter(
        status=found.get("status", status),
        outcome=found.get("outcome"),
        origin=found.get("origin"),
        path=found.get("path"),
        backend=found.get("backend"),
        search=" ".join(words) or None,
        sort=sort,
    )
    flt.check()
    return flt


def hypothesis(db: sqlite_utils.Database, hypothesis_id: int) -> HypothesisDetail:
    from runner.queue_query import queue_row

    r = queue_row(db, hypothesis_id)
    extra = _hyp_store.text(db, hypothesis_id)
    found = _hyp_store.tried_in(db, hypothesis_id)
    latest = _decision_store.latest_of(db, [x.id for x in found])
    exps = [
        HypothesisExperiment(x.id, x.run, x.status, latest[x.id].effect if x.id in latest else None)
        for x in found
    ]
    return HypothesisDetail(
        row=_hyp_row(r),
        rationale=extra.rationale,
        risk=extra.risk,
        confidence=extra.confidence,
        notes=extra.notes,
        evidence=_hyp_store.cited_evidence(db, hypothesis_id),
        source_refs=_hyp_store.source_refs(db, hypothesis_id),
        patch=_hyp_store.latest_patch(db, hypothesis_id),
        experiments=exps,
    )


def approve(db: sqlite_utils.Database, hypothesis_id: int) -> str:
    """Approve (a hypothesis whose patch applies becomes `patched`, as with the CLI); returns the
    new status. The runner takes approved and patched hypotheses into its next wave."""
    from runner import hypotheses as queue

    return queue.approve_or_reject(db, hypothesis_id, "approve", by="tui")


def reject(db: sqlite_utils.Database, hypothesis_id: int) -> str:
    from runner import hypotheses as queue

    return queue.approve_or_reject(db, hypothesis_id, "reject", by="tui")


def change_priority(db: sqlite_utils.Database, hypothesis_id: int, delta: float) -> float:
    """Raise (delta > 0) or lower a hypothesis's priority, as a person's (it then orders the queue
    before the rank: `+` puts one no person set before the ranked queue, `-` after it); returns the
    new priority."""
    from runner import hypotheses as queue

    with transaction(db):
        hyp = queue.get(db, hypothesis_id)
        new = queue.stepped_priority(hyp, delta)
        queue.set_priority(db, hypothesis_id, new)
        log_event(db, "hypothesis.prioritize", f"hypothesis {hypothesis_id}: priority {new} (tui)")
    return new


# --- fleet --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetSnapshot:
    run: RunStatus | None
    workers: list[WorkerRow]
    experiments: list[FleetExperiment]
    """Live experiments (running, queued) first, then the most recent finished ones."""
    version: int


def run_status(db: sqlite_utils.Database, run_id: int | None = None) -> RunStatus | None:
    chosen = run_id if run_id is not None else current_run_id(db)
    return None if chosen is None else _run_store.run_status(db, chosen)


def fleet(db: sqlite_utils.Database, run_id: int | None = None, *, finished: int = 30) -> FleetSnapshot:
    """Workers and experiments of the current run (or `run_id`), for the live fleet pane."""
    stamp = version(db)
    run = run_status(db, run_id)
    if run is None:
        return FleetSnapshot(None, [], [], stamp)
    workers = _run_store.run_workers(db, run.id)
    exps = _run_store.fleet_experiments(db, run.id, finished=finished)
    return FleetSnapshot(run, workers, exps, stamp)


def log_files(folder: str | None) -> list[str]:
    """The log files of an experiment's folder (batches, build, bench, checks), by name."""
    if not folder:
        return []
    try:
        return sorted(e.path for e in os.scandir(folder) if e.is_file() and e.name.endswith(".log"))
    except OSError:
        return []


def log_tail(path: str | None, lines: int = 8, *, max_bytes: int = 16_384) -> list[str]:
    """The last `lines` lines of a log file (reads at most `max_bytes` from its end)."""
    if not path:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            chunk = fh.read()
    except OSError:
        return []
    text = chunk.decode("utf-8", errors="replace").replace("\r", "")
    found = text.splitlines()
    if size > max_bytes and found:
        found = found[1:]  # the first line is probably cut
    return found[-lines:]


def read_log(path: str, offset: int = 0, max_bytes: int = 1_000_000) -> tuple[str, int]:
    """Up to `max_bytes` of a log from byte `offset`; returns (text, new offset) to follow it."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read(max_bytes)
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    # Stop after the last complete line, so a line still being written is read whole next time.
    last = chunk.rfind(b"\n")
    cut = last + 1 if last >= 0 else (len(chunk) if len(chunk) == max_bytes else 0)
    return chunk[:cut].decode("utf-8", errors="replace"), offset + cut


def send_command(
    db: sqlite_utils.Database, kind: str, target_id: int | None = None, args: dict[str, Any] | None = None
) -> int:
    """Queue a steering command (pause, resume, stop, cancel, ...) for the runner; returns its id."""
    from runner.commands import send

    return send(db, kind, target_id, args)


def cancel_experiment(db: sqlite_utils.Database, experiment_id: int) -> int:
    status = _run_store.experiment_status(db, experiment_id)
    if status not in LIVE_EXPERIMENT_STATUSES:
        raise UserError(f"experiment {experiment_id}: already {status}; nothing to cancel")
    return send_command(db, "cancel", experiment_id)


def steer_run(db: sqlite_utils.Database, kind: str, run_id: int, now: float) -> int:
    """pause, resume or stop a run whose runner is alive (a dead one would never read it)."""
    run = _run_store.run_status(db, run_id)
    if run is None:
        raise UserError(f"run {run_id}: no such run")
    if not run.runner_live(now):
        raise UserError(f"run {run.name}: no runner is driving it ({run.status}); nothing to {kind}")
    if kind == "pause" and run.status == "paused":
        raise UserError(f"run {run.name}: already paused")
    if kind == "resume" and run.status != "paused":
        raise UserError(f"run {run.name}: not paused")
    return send_command(db, kind, run_id)


# --- history ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExperimentRow:
    id: int
    wave: int | None
    kind: str
    title: str
    status: str
    reason: str | None
    verdict: str | None
    effect: float | None
    ci_low: float | None
    ci_high: float | None
    pairs: int
    winner: bool
    difference: float | None = None
    """The effect as a difference where it was judged on that scale (values of 0 or below)."""


@dataclass(frozen=True)
class ChartPoint:
    experiment_id: int
    status: str
    candidate: float | None
    """Median of the primary metric on the candidate side."""
    baseline: float | None


@dataclass(frozen=True)
class MetricSeries:
    metric: str
    direction: str
    points: list[ChartPoint]


def runs(db: sqlite_utils.Database) -> list[RunInfo]:
    from runner.record import history

    return list(reversed(history.runs(db)))


def waves(db: sqlite_utils.Database, run_id: int) -> list[WaveInfo]:
    from runner.record import history

    return history.waves(db, run_id)


def run_experiments(
    db: sqlite_utils.Database, run_id: int, offset: int = 0, limit: int = PAGE_SIZE
) -> Page[ExperimentRow]:
    """A page of a run's experiments with the runner's decision (runner.record.history, paged)."""
    from runner.record import history

    total = history.experiment_count(db, run_id)
    offset = clamp_offset(offset, total, limit)
    return Page(
        [
            ExperimentRow(
                id=e.id,
                wave=e.wave,
                kind=e.kind,
                title=e.title,
                status=e.status,
                reason=e.reason,
                verdict=e.decision.verdict if e.decision else None,
                effect=e.effect,
                ci_low=e.ci[0],
                ci_high=e.ci[1],
                pairs=e.pairs,
                winner=e.winner_commit is not None,
                difference=e.difference,
            )
            for e in history.experiments_page(db, run_id, offset, limit)
        ],
        offset,
        limit,
        total,
    )


def metric_series(db: sqlite_utils.Database, run_id: int, *, last: int = 400) -> MetricSeries:
    """The primary metric's candidate and baseline medians for the run's latest candidate
    experiments, oldest first (the history chart)."""
    from runner.stats import side_value

    found = candidate_samples(db, run_id, last=last)
    points = []
    for exp_id, status in found.experiments:
        a = found.values.get((exp_id, "A"))
        b = found.values.get((exp_id, "B"))
        points.append(ChartPoint(exp_id, status, side_value(b) if b else None, side_value(a) if a else None))
    return MetricSeries(found.metric, found.direction, points)


@dataclass(frozen=True)
class ExperimentDetail:
    info: ExperimentInfo
    decisions: list[DecisionInfo]
    samples: list[Sample]
    metrics: list[str]
    patch: PatchInfo | None

    def paired(self, metric: str) -> tuple[list[float], list[float]]:
        from runner.record.history import paired_values

        return paired_values(self.samples, metric)


def experiment_detail(db: sqlite_utils.Database, experiment_id: int) -> ExperimentDetail:
    from runner.record import history

    info = history.experiment(db, experiment_id)
    patch = None
    if info.patch_id is not None:
        patch = _hyp_store.patch(db, info.patch_id)
    return ExperimentDetail(
        info=info,
        decisions=history.decisions(db, experiment_id, include_redecide=False),
        samples=history.samples(db, experiment_id),
        metrics=history.metrics(db, experiment_id),
        patch=patch,
    )


def redecide(
    db: sqlite_utils.Database,
    run_id: int,
    *,
    min_effect: float | None = None,
    alpha: float | None = None,
    max_pairs: int | None = None,
    save: bool = False,
    fallback_policy: dict[str, Any] | None = None,
) -> RedecideResult:
    """Re-judge a run's decided experiments under another policy (runner.record.redecide)."""
    from runner.record.redecide import redecide as run_redecide

    if min_effect is not None and not 0 <= min_effect < 1:
        raise UserError(f"min effect {min_effect}: must be a fraction in [0, 1), e.g. 0.01 for 1%")
    if alpha is not None and not 0 < alpha < 1:
        raise UserError(f"alpha {alpha}: must be between 0 and 1")
    if max_pairs is not None and max_pairs < 2:
        raise UserError(f"max pairs {max_pairs}: must be at least 2")
    return run_redecide(
        db,
        run_id,
        min_effect=min_effect,
        alpha=alpha,
        max_pairs=max_pairs,
        save=save,
        fallback_policy=fallback_policy,
    )
