"""Whole rows of the workspace's tables, as TypedDicts: the schema in the type checker's words.

A read that returns a table's every column (`SELECT *`, `SELECT e.*, ...`) returns one of these,
or a TypedDict that extends one with the columns it joins or computes. Reads go through
`kb.store.paging.shaped`, which fails (ShapeMismatch) when a query's columns and its row type
differ, and tests/kb/test_store_tables.py checks each class here against the migrated schema
(names, types, NULL-ability), so a migration that adds, drops or retypes a column is answered
here, once, and mypy then finds every reader it affects.

JSON columns (policy, meta, options, ...) are their stored text: the reader decodes them.
"""

from __future__ import annotations

from typing import TypedDict

TABLE_OF: dict[str, str] = {}
"""Filled below: row type name -> its table (the schema test walks it)."""


class SourceRow(TypedDict):
    """A whole row of sources."""

    id: int
    kind: str
    name: str | None
    url: str | None
    canonical_url: str | None
    arxiv_id: str | None
    title: str | None
    authors: str | None
    published: str | None
    site: str | None
    language: str | None
    content_hash: str | None
    ref: str | None
    commit_sha: str | None
    merge_base: str | None
    meta: str | None
    created_at: float
    updated_at: float


class EvidenceRow(TypedDict):
    """A whole row of evidence."""

    id: int
    source_id: int
    kind: str
    ref: str
    title: str | None
    section: str | None
    position: int | None
    body: str
    meta: str | None
    created_at: float


class HypothesisRow(TypedDict):
    """A whole row of hypotheses."""

    id: int
    title: str
    rationale: str
    expected_effect: float | None
    risk: str | None
    confidence: float | None
    cost: float | None
    priority: float
    status: str
    origin: str
    dedupe_key: str | None
    llm_call_id: int | None
    notes: str | None
    created_at: float
    updated_at: float
    rank: float | None
    rank_why: str | None
    family: int | None
    priority_set: int
    repeat_of: int | None
    wave_id: int | None


class PatchRow(TypedDict):
    """A whole row of patches."""

    id: int
    hypothesis_id: int
    diff: str
    diff_sha: str
    files: str
    author_kind: str
    author: str | None
    llm_call_id: int | None
    apply_status: str | None
    apply_error: str | None
    created_at: float
    repair_of: int | None
    from_experiment: int | None
    base_commit: str | None
    norm_sha: str | None


class RunRow(TypedDict):
    """A whole row of runs."""

    id: int
    name: str
    status: str
    branch: str | None
    baseline_commit: str | None
    head_commit: str | None
    backend: str
    policy: str | None
    budget: str | None
    options: str | None
    pid: int | None
    host: str | None
    noise_floor: float | None
    self_test: str | None
    summary: str | None
    cost_usd: float
    error: str | None
    imported_from: str | None
    started_at: float
    ended_at: float | None
    heartbeat_at: float | None
    stop_reason: str | None
    phase: str | None
    steering: str | None


class WaveRow(TypedDict):
    """A whole row of waves."""

    id: int
    run_id: int
    number: int
    baseline_commit: str
    status: str
    reflection_evidence_id: int | None
    started_at: float
    ended_at: float | None


class ExperimentRow(TypedDict):
    """A whole row of experiments."""

    id: int
    run_id: int
    wave_id: int | None
    patch_id: int | None
    kind: str
    title: str
    status: str
    phase: str | None
    reason: str | None
    worker_id: int | None
    baseline_commit: str | None
    candidate_commit: str | None
    retry_of: int | None
    log_dir: str | None
    batches: int
    cost_usd: float
    meta: str | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    hypothesis_id: int | None


class DecisionRow(TypedDict):
    """A whole row of decisions."""

    id: int
    experiment_id: int
    verdict: str
    metric: str
    effect: float | None
    ci_low: float | None
    ci_high: float | None
    pairs: int
    p_value: float | None
    q_value: float | None
    noise: float | None
    reason: str | None
    policy: str | None
    metrics: str | None
    is_final: int
    created_at: float
    origin: str
    family: str | None


class EventRow(TypedDict):
    """A whole row of events."""

    id: int
    ts: float
    level: str
    kind: str
    run_id: int | None
    experiment_id: int | None
    message: str
    data: str | None


class WorkerRow(TypedDict):
    """A whole row of workers."""

    id: int
    run_id: int | None
    name: str
    backend: str
    status: str
    resources: str | None
    noise: float | None
    price_per_hour: float | None
    cost_usd: float
    meta: str | None
    started_at: float
    ended_at: float | None


class WinnerRow(TypedDict):
    """A whole row of winners."""

    id: int
    run_id: int
    experiment_id: int
    commit_sha: str
    patch_file: str | None
    position: int
    created_at: float


class CommandRow(TypedDict):
    """A whole row of commands."""

    id: int
    kind: str
    target_kind: str | None
    target_id: int | None
    args: str | None
    status: str
    result: str | None
    created_at: float
    handled_at: float | None


class LLMCallRow(TypedDict):
    """A whole row of llm_calls."""

    id: int
    purpose: str
    model: str
    api_base: str | None
    prompt: str
    response: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    duration_ms: int | None
    attempt: int
    error: str | None
    run_id: int | None
    hypothesis_id: int | None
    created_at: float
    step: str | None


TABLE_OF.update(
    SourceRow="sources",
    EvidenceRow="evidence",
    HypothesisRow="hypotheses",
    PatchRow="patches",
    RunRow="runs",
    WaveRow="waves",
    ExperimentRow="experiments",
    DecisionRow="decisions",
    EventRow="events",
    WorkerRow="workers",
    WinnerRow="winners",
    CommandRow="commands",
    LLMCallRow="llm_calls",
)
