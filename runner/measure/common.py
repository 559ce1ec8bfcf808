"""The run's shared pieces: options, the job and outcome records, limits, and the interface the
loop asks of research (`Research`), which runner.autopilot implements."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import sqlite_utils

from kb.jsoncol import decoded_dict
from kb.store.run_records import StackedWinner
from kb.vocabulary import EXPERIMENT_FINAL, EXPERIMENT_LIVE
from kb.workspace import Workspace
from runner import stats
from runner.fleet import JobRef
from runner.harness.protocol import LogParser
from runner.research_io import ResearchReport, ResearchRequest

Progress = Callable[[str], None]

FINAL = EXPERIMENT_FINAL

LIVE = EXPERIMENT_LIVE

HEARTBEAT_SECONDS = 2.0

MAX_LOST_JOBS = 3

MAX_RETRIES = 2

SELF_TEST_ATTEMPTS = 2

JOB_MARGIN_SECONDS = 120


@dataclass
class RunOptions:
    """What `autoresearch run` was asked for; stored with the run so `--resume` continues alike."""

    waves: int | None = None
    parallel: int | None = None
    budget_minutes: float | None = None
    budget_usd: float | None = None
    max_experiments: int | None = None
    bench_timeout: int | None = None
    check_timeout: int | None = None
    build_timeout: int | None = None
    backend: str | None = None
    name: str | None = None
    self_test: bool = True
    final: bool = True
    """Measure the stacked winners and the ablations at the end."""
    baseline: str | None = None
    """Start from this commit instead of target.baseline_commit (`--from-winners`: a run's head)."""
    from_winners: str | None = None
    """The earlier run whose head `baseline` is (recorded with the run's options)."""
    autopilot: bool | None = None
    """Research, repair and port between waves (`--autopilot`); None: `autopilot.enabled`."""
    model: str | None = None
    """`--model`: overrides llm.model for this run's research, repairs and ports."""
    api_base: str | None = None
    """`--api-base`: overrides llm.api_base likewise."""

    @classmethod
    def from_json(cls, raw: str | None) -> RunOptions:
        data = decoded_dict(raw)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class ActiveJob:
    ref: JobRef
    experiment_id: int
    batch: int
    nonce: str
    parser: LogParser
    parsed_lines: int
    """How far the log has been parsed (jobs.parsed_lines; warnings are deduplicated by line)."""
    deadline: float | None
    offset: int = 0
    stopped: str | None = None
    """Why the runner stopped this job itself: cancel, timeout, no_metric, stop."""
    warned: dict[str, int] = field(default_factory=dict)
    """Warnings of each kind read from its log so far in this process (capped: MAX_JOB_WARNINGS)."""


@dataclass
class Outcome:
    """What a finished job means for its experiment."""

    status: str | None  # a final experiment status, or None: decide from the samples
    reason: str | None = None
    detail: str = ""


@dataclass
class RunSummary:
    run_id: int
    name: str
    status: str
    branch: str | None
    baseline_commit: str | None
    head_commit: str | None
    self_test: dict[str, Any] | None
    experiments: list[dict[str, Any]] = field(default_factory=list)
    winners: list[StackedWinner] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    error: str | None = None
    stop_reason: str | None = None
    """One token of kb.vocabulary.STOP_REASONS once the run finished."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Stop:
    """Why a run ended: one token of STOP_REASONS (runs.stop_reason) and the words people read
    (runs.summary.stopped_by, e.g. "budget: 90 minutes")."""

    reason: str
    words: str


class Research(Protocol):
    """What the measuring loop asks of the research stage. The loop defines it and never imports
    research; runner.autopilot wires an implementation in (the CLI, the console and the demo start
    runs through it)."""

    def after_wave(self, ws: Workspace, db: sqlite_utils.Database, wave_id: int) -> int | None:
        """The finished wave's post-mortem; the evidence id of the note it stored, if any."""
        ...

    def research(self, ws: Workspace, db: sqlite_utils.Database, request: ResearchRequest) -> ResearchReport:
        """New candidates: refresh the miners; with a model, repair, port, generate and patch.
        Model trouble is reported in `failures`, never raised: the run goes on with what it has."""
        ...


class RunStopped(Exception):
    """The run was told to stop (a `stop` command)."""


class RunFailed(Exception):
    """The run cannot go on (the self-test failed, the benchmark script is missing, ...)."""


def policy_of(ws: Workspace) -> stats.Policy:
    s = ws.settings
    return stats.Policy(
        min_effect=s.policy.min_effect,
        alpha=s.policy.alpha,
        max_pairs=s.policy.max_pairs,
        min_pairs=s.policy.min_pairs,
        batch=s.policy.batch_pairs,
        direction=s.metric.direction,
    )


def rules_of(ws: Workspace) -> stats.Rules:
    """What the workspace's experiments are judged by: the policy, the guard metrics (they move the
    same way as the primary one: pp and tg are both throughputs) and the wall-clock switch."""
    metric = ws.settings.metric
    guards = tuple(stats.Guard(g.metric, g.max_regression, metric.direction) for g in metric.guards)
    return stats.Rules(policy_of(ws), guards, metric.wall_clock_guard)


def stored_policy(rules: stats.Rules, metric: str) -> dict[str, Any]:
    """The policy a run and each of its decisions record: the Policy's fields, the primary metric,
    the guards and the wall-clock switch, everything `redecide` needs to replay a decision."""
    return {**asdict(rules.policy), "metric": metric, **rules.to_json()}


def first_given(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def job_walls(active: ActiveJob) -> dict[str, dict[str, float]]:
    """The harness's clock of this job's completed invocations, {pair: {side: seconds}} (merged
    into the experiment's meta `wall`, pair by pair, with the earlier batches')."""
    found: dict[str, dict[str, float]] = {}
    for inv in active.parser.state.invocations:
        if inv.rc == 0 and inv.seconds is not None:
            found.setdefault(str(inv.pair), {})[inv.side] = round(inv.seconds, 6)
    return found


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
