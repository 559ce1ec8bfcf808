"""The LLM research phase: read the KB, reason about the bottleneck, propose hypotheses with evidence.

`generate()` runs two structured model calls:
1. `queries`: from the target, its measurements and the latest reflections, the model proposes
   full-text search queries; with discovery on (the research phase's `reader`), new papers found
   for them are ingested first; the KB answers them (kb.search) and the inventory gaps are always
   added.
2. `research`: the evidence, quoted as data blocks (runner.prompting), the baseline metrics, the noise
   floor and the bottleneck analysis go to the model, which answers with hypotheses (title,
   rationale, expected effect, risk, confidence, cost, evidence ids).

Bottleneck first: when the benchmark reports `METRIC bytes_per_iter=...` (bytes moved per unit of the
throughput metric) and `METRIC mem_bw_gbs=...` (measured memory bandwidth), the achieved bandwidth is
compared with the measured one. Near the ceiling the workload is memory-bound and the prompt says so:
SIMD micro-tuning of that path is noise; what helps is moving fewer bytes (the published llama.cpp
run: text generation pulled ~30 GB/s, the DRAM ceiling, and only memory-pass fusions paid off).

A hypothesis citing an evidence id that does not exist is rejected (recorded in an event); one that
is a near-duplicate of an existing hypothesis is merged into it (its evidence linked, a note added).
"""

from __future__ import annotations

import difflib
import hashlib
import re
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import sqlite_utils
from pydantic import BaseModel, Field, create_model

from kb.config import Settings
from kb.db import log_event, transaction
from kb.errors import UserError
from kb.store import hypotheses as hypothesis_store
from kb.store import research as store
from runner import prompting
from runner.hypotheses import add_hypothesis, add_note, link_evidence
from runner.research.priority import priority

if TYPE_CHECKING:
    from kb.workspace import Workspace
    from runner.llm import LLMClient

BYTES_METRICS = ("bytes_per_iter", "bytes_per_token")
BANDWIDTH_METRICS = ("mem_bw_gbs",)
RATE_METRICS = ("throughput",)
MEMORY_BOUND_AT = 0.6
"""Achieved / measured bandwidth at or above this: memory-bound (STREAM-like peaks are rarely beaten)."""
COMPUTE_BOUND_BELOW = 0.3
DUPLICATE_JACCARD = 0.6
DUPLICATE_RATIO = 0.85
HITS_PER_QUERY = 6
MAX_EVIDENCE = 30
MAX_GAPS = 8
MAX_NOTES = 3
# fmt: off
_STOP = frozenset({
    "a", "an", "the", "of", "in", "on", "for", "to", "and", "or", "with", "by", "from", "into", "at",
    "as", "is", "are", "be", "via", "use", "using", "add", "make", "backend", "path",
})
# fmt: on


# Every list and string of an answer is bounded: a server that constrains decoding to the schema
# (llama-server's grammars) then cannot loop forever, as a small model otherwise does (it listed
# evidence ids 129, 130, 131, ... until the token cap).
Query = Annotated[str, Field(max_length=160)]


class QueryPlan(BaseModel):
    queries: list[Query] = Field(
        min_length=1,
        max_length=8,
        description="Short full-text search queries (keywords, identifiers, op names) for the KB.",
    )


class ProposedHypothesis(BaseModel):
    title: str = Field(min_length=5, max_length=200, description="Imperative, specific: what to change.")
    rationale: str = Field(
        min_length=20, max_length=1200, description="Why it should help, tied to the bottleneck and evidence."
    )
    expected_effect: float = Field(
        ge=-1.0, le=2.0, description="Expected relative improvement of the primary metric: 0.03 = +3%."
    )
    risk: str = Field(max_length=500, description="What could go wrong (correctness, portability, noise).")
    confidence: float = Field(ge=0.0, le=1.0, description="How strongly the evidence supports it.")
    cost: float = Field(
        default=1.0,
        ge=0.1,
        le=20.0,
        description="Relative cost: 1 = an ordinary small patch and experiment; more for large changes.",
    )
    evidence_ids: list[int] = Field(
        min_length=1, max_length=10, description="Ids of the evidence blocks it relies on."
    )
    repeat_of: int | None = Field(
        default=None,
        description="The id of a hypothesis already tried (in the results) that this one repeats; "
        "null when it is a new idea.",
    )


class ResearchAnswer(BaseModel):
    hypotheses: list[ProposedHypothesis] = Field(max_length=20)


def research_answer(n: int) -> type[ResearchAnswer]:
    """The answer schema for a request of `n` hypotheses: no room for more."""
    schema: type[ResearchAnswer] = create_model(
        "ResearchAnswer",
        __base__=ResearchAnswer,
        hypotheses=(list[ProposedHypothesis], Field(max_length=n)),
    )
    return schema


@dataclass(frozen=True)
class Bottleneck:
    verdict: Literal["memory-bound", "compute-bound", "mixed", "unknown"]
    achieved_gbs: float | None = None
    measured_gbs: float | None = None
    ratio: float | None = None
    explanation: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _first(metrics: dict[str, float], names: tuple[str, ...]) -> tuple[str, float] | None:
    for name in names:
        if name in metrics and metrics[name] > 0:
            return name, metrics[name]
    return None


def analyze_bottleneck(metrics: dict[str, float], primary: str, direction: str = "higher") -> Bottleneck:
    """Memory- or compute-bound, from bytes per iteration x iterations per second vs measured bandwidth."""
    moved = _first(metrics, BYTES_METRICS)
    peak = _first(metrics, BANDWIDTH_METRICS)
    rate = _first(metrics, RATE_METRICS)
    if rate is None and direction == "higher" and metrics.get(primary, 0) > 0:
        rate = (primary, metrics[primary])
    if moved is None or peak is None or rate is None:
        missing = [
            label
            for label, value in (
                (f"METRIC {BYTES_METRICS[0]}", moved),
                (f"METRIC {BANDWIDTH_METRICS[0]}", peak),
                (f"a throughput metric ({RATE_METRICS[0]} or a higher-is-better primary)", rate),
            )
            if value is None
        ]
        return Bottleneck(
            "unknown",
            explanation="Cannot tell whether the workload is memory- or compute-bound: the benchmark "
            f"does not report {', '.join(missing)}. Reason about it from the evidence, and prefer "
            "hypotheses that would matter either way.",
        )
    achieved = moved[1] * rate[1] / 1e9
    ratio = achieved / peak[1]
    numbers = (
        f"{moved[0]}={moved[1]:.4g} bytes x {rate[0]}={rate[1]:.4g}/s = {achieved:.3g} GB/s achieved, "
        f"against a measured {peak[1]:.3g} GB/s ({ratio:.0%} of it)"
    )
    if ratio >= MEMORY_BOUND_AT:
        return Bottleneck(
            "memory-bound",
            achieved,
            peak[1],
            ratio,
            f"The workload looks MEMORY-BOUND: {numbers}. The cores mostly wait for data, so SIMD "
            "micro-tuning, unrolling or prefetching in the hot loop will be noise. Prefer changes that "
            "move fewer bytes: fuse passes over the same data (ops fused in other backends), avoid "
            "intermediate buffers, use smaller or better-packed data, improve reuse; or speed up the "
            "small parts that are not memory-bound.",
        )
    if ratio < COMPUTE_BOUND_BELOW:
        return Bottleneck(
            "compute-bound",
            achieved,
            peak[1],
            ratio,
            f"The workload looks COMPUTE- or overhead-bound: {numbers}. Memory bandwidth is not the "
            "limit; vectorisation, better kernels, less synchronisation and less per-op overhead can pay.",
        )
    return Bottleneck(
        "mixed",
        achieved,
        peak[1],
        ratio,
        f"The workload is between regimes: {numbers}. Both fewer bytes moved and faster compute may "
        "help; prefer changes with evidence of gains on similar hardware.",
    )


@dataclass(frozen=True)
class Measurements:
    run_id: int | None
    metrics: dict[str, float]
    """Baseline medians per metric (side A samples of the latest run that has any)."""
    noise: dict[str, float]
    """Per-sample coefficient of variation of the baseline, per metric."""
    noise_floor: float | None
    """The run's A/A noise floor when measured, else the primary metric's baseline noise."""


def baseline_measurements(db: sqlite_utils.Database, primary: str) -> Measurements:
    from runner.stats import noise

    run_id = store.latest_baseline_run(db)
    if run_id is None:
        return Measurements(None, {}, {}, None)
    values: dict[str, list[float]] = {}
    for metric, value in store.baseline_values(db, run_id):
        values.setdefault(metric, []).append(value)
    medians = {m: float(statistics.median(v)) for m, v in values.items()}
    cvs = {m: cv for m, v in values.items() if (cv := noise(v)) is not None}
    stored = store.noise_floor(db, run_id)
    floor = stored if stored is not None else cvs.get(primary)
    return Measurements(run_id, medians, cvs, floor)


def _words(title: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"\w+", title.lower()) if w not in _STOP}


def similar(a: str, b: str) -> bool:
    """Near-duplicate titles: most significant words shared, or nearly the same text."""
    wa, wb = _words(a), _words(b)
    if wa and wb and len(wa & wb) / len(wa | wb) >= DUPLICATE_JACCARD:
        return True
    return difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio() >= DUPLICATE_RATIO


def _retrieve(db: sqlite_utils.Database, query: str, limit: int) -> list[int]:
    """Evidence ids for one model-proposed query: all words first, any word if that finds nothing."""
    from kb.search import search

    try:
        hits = search(db, query, limit=limit)
        if not hits:
            words = [w for w in re.findall(r"\w+", query) if w.lower() not in _STOP]
            if len(words) > 1:
                hits = search(db, " OR ".join(words), limit=limit)
    except UserError:
        return []  # a query with nothing searchable in it
    return [h.id for h in hits]


def _reflection_ids(db: sqlite_utils.Database) -> list[int]:
    return store.evidence_ids_of_kind(db, "note", MAX_NOTES, newest=True)


def _context(
    settings: Settings,
    measured: Measurements,
    bottleneck: Bottleneck,
    db: sqlite_utils.Database,
    focus: str | None,
) -> str:
    metric = settings.metric
    lines = [
        f"Target: {settings.target.path} at baseline "
        f"{settings.target.baseline_commit[:12] or settings.target.baseline}.",
        f"Primary metric: {metric.primary} ({metric.direction} is better"
        f"{', ' + metric.unit if metric.unit else ''}).",
    ]
    if settings.target.paths_of_interest:
        lines.append(f"Paths of interest: {', '.join(settings.target.paths_of_interest)}.")
    if measured.metrics:
        shown = ", ".join(
            f"{name}={value:.4g}" + (f" (noise {measured.noise[name]:.1%})" if name in measured.noise else "")
            for name, value in sorted(measured.metrics.items())
        )
        lines.append(f"Baseline measurements (run {measured.run_id}, medians): {shown}.")
    else:
        lines.append("Baseline measurements: none yet.")
    if measured.noise_floor is not None:
        lines.append(
            f"Noise floor: {measured.noise_floor:.1%} per sample. Effects much smaller than this need many "
            f"pairs to detect; the keep threshold is {settings.policy.min_effect:.0%}."
        )
    lines.append(f"Bottleneck: {bottleneck.explanation}")
    existing = store.top_hypotheses(db, 60)
    if existing:
        lines.append("Existing hypotheses (do not propose these again):")
        lines.extend(f"  #{h['id']} [{h['status']}] {h['title']}" for h in existing)
    if focus:
        lines.append(f"Focus requested by the engineer: {focus}")
    return "\n".join(lines)


def _system(nonce: str) -> str:
    return (
        "You are a performance engineer doing literature-guided research on an open-source compute "
        "project: read first, then propose changes worth measuring. Ground every claim in the evidence "
        "given and in the bottleneck analysis; prefer ideas with a mechanism (fewer passes over memory, "
        "less data moved, better parallel split) over generic micro-optimisations.\n\n"
        + prompting.rules(nonce)
    )


@dataclass
class GenerateReport:
    added: list[int] = field(default_factory=list)
    merged: list[dict[str, Any]] = field(default_factory=list)
    """{"into": existing id, "title": proposed title}."""
    rejected: list[dict[str, Any]] = field(default_factory=list)
    """{"title": ..., "reason": ...}."""
    repeats: list[dict[str, Any]] = field(default_factory=list)
    """{"of": hypothesis id, "title": ...}: ideas the model marked as repeats of ones tried."""
    queries: list[str] = field(default_factory=list)
    evidence_shown: list[int] = field(default_factory=list)
    bottleneck: dict[str, Any] = field(default_factory=dict)
    call_ids: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _missing_ids(db: sqlite_utils.Database, ids: list[int]) -> list[int]:
    if not ids:
        return []
    found = store.existing_evidence(db, ids)
    return [i for i in ids if i not in found]


def generate(
    ws: Workspace,
    db: sqlite_utils.Database,
    client: LLMClient,
    *,
    n: int = 5,
    focus: str | None = None,
    learnt: str = "",
    step: str | None = None,
    wave_id: int | None = None,
    reader: Callable[[list[str]], None] | None = None,
) -> GenerateReport:
    """Propose up to `n` hypotheses from the KB; returns what was added, merged and rejected.

    `learnt` is what a run has learnt so far (the autopilot's results table, the directions to
    avoid and why); `step` keys the two model calls so a resumed phase reuses stored answers;
    `wave_id` is recorded on the hypotheses as the wave whose post-mortem they answer; `reader`
    is given the model's queries before the knowledge base is searched (the research phase's
    discovery ingests new papers there: runner/research/reading.py)."""
    if n < 1 or n > 20:
        raise UserError(f"--n {n}: must be between 1 and 20")
    settings = ws.settings
    report = GenerateReport()
    measured = baseline_measurements(db, settings.metric.primary)
    bottleneck = analyze_bottleneck(measured.metrics, settings.metric.primary, settings.metric.direction)
    report.bottleneck = bottleneck.to_json()
    context = _context(settings, measured, bottleneck, db, focus)
    if learnt:
        context += "\n\n" + learnt
    nonce = prompting.new_nonce()
    notes_text, note_ids = prompting.evidence_blocks(db, _reflection_ids(db), nonce, per_item=2500)

    plan = client.complete_structured(
        "queries",
        [
            {"role": "system", "content": _system(nonce)},
            {
                "role": "user",
                "content": f"{context}\n\n"
                + (f"Post-mortems of earlier waves:\n{notes_text}\n\n" if notes_text else "")
                + "The knowledge base holds paper passages, fork commits (diffs of forks of the target), "
                "and a backend inventory (operator fusions present in some backends, missing in others). "
                "Propose up to 6 short full-text search queries (keywords, function or op names) that "
                "would find the evidence most relevant to speeding up the primary metric.",
            },
        ],
        QueryPlan,
        step=f"{step}:queries" if step else None,
    )
    report.call_ids.append(plan.call_id)
    report.queries = [q.strip() for q in plan.value.queries if q.strip()]
    if focus:
        report.queries.append(focus)
    if reader is not None:
        reader(report.queries)

    candidates: list[int] = []
    for query in report.queries:
        candidates.extend(_retrieve(db, query, HITS_PER_QUERY))
    gaps = store.evidence_ids_of_kind(db, "gap", MAX_GAPS)
    ordered = list(dict.fromkeys([*candidates, *gaps]))[:MAX_EVIDENCE]
    evidence_text, shown = prompting.evidence_blocks(db, ordered, nonce)
    report.evidence_shown = [*shown, *note_ids]

    answer = client.complete_structured(
        "research",
        [
            {"role": "system", "content": _system(nonce)},
            {
                "role": "user",
                "content": f"{context}\n\n"
                + (f"Post-mortems of earlier waves:\n{notes_text}\n\n" if notes_text else "")
                + (
                    f"Evidence from the knowledge base:\n{evidence_text}\n\n"
                    if evidence_text
                    else "The knowledge base returned no evidence for these queries.\n\n"
                )
                + f"Propose up to {n} hypotheses, best first. Each cites the ids of the evidence blocks "
                f"it relies on (the id= attribute); expected_effect is the relative change of "
                f"{settings.metric.primary} (0.03 = +3%), realistic given the bottleneck and the "
                "noise floor. Do not propose again what was tried and failed; if an idea repeats one "
                "tried, set repeat_of to that hypothesis id.",
            },
        ],
        ResearchAnswer,
        decode_schema=research_answer(n),
        step=f"{step}:hypotheses" if step else None,
    )
    report.call_ids.append(answer.call_id)
    _record(db, answer.value.hypotheses[:n], answer.call_id, report, wave_id=wave_id)
    if report.added:
        from runner.rank import rerank

        rerank(ws, db, ids=report.added)  # their place in the queue
    with transaction(db):
        log_event(
            db,
            "hypotheses.generate",
            f"generated {len(report.added)} hypotheses, merged {len(report.merged)}, "
            f"rejected {len(report.rejected)} (llm calls {', '.join(map(str, report.call_ids))})",
            data=report.to_json(),
        )
    return report


def _record(
    db: sqlite_utils.Database,
    proposed: list[ProposedHypothesis],
    call_id: int,
    report: GenerateReport,
    *,
    wave_id: int | None = None,
) -> None:
    existing = store.hypothesis_titles(db)
    for item in proposed:
        title = " ".join(item.title.split())
        if item.repeat_of is not None and hypothesis_store.exists(db, item.repeat_of):
            # The model says it repeats an idea tried: counted, not queued again.
            report.repeats.append({"of": item.repeat_of, "title": title})
            with transaction(db):
                log_event(
                    db, "hypotheses.repeat", f"{title!r}: a repeat of #{item.repeat_of} (llm call {call_id})"
                )
            continue
        ids = list(dict.fromkeys(item.evidence_ids))
        missing = _missing_ids(db, ids)
        if missing:
            reason = f"cites evidence id(s) {', '.join(map(str, missing))} that do not exist"
            report.rejected.append({"title": title, "reason": reason})
            with transaction(db):
                log_event(
                    db, "hypotheses.rejected", f"{title!r} {reason} (llm call {call_id})", level="warning"
                )
            continue
        twin = next((h for h in existing if similar(title, h["title"])), None)
        if twin is not None:
            with transaction(db):
                link_evidence(db, twin["id"], ids)
                add_note(db, twin["id"], f"merged: llm call {call_id} proposed a near-duplicate: {title}")
            report.merged.append({"into": twin["id"], "title": title})
            continue
        key = "llm:" + hashlib.sha256(" ".join(sorted(_words(title))).encode()).hexdigest()[:16]
        hid = add_hypothesis(
            db,
            title,
            rationale=item.rationale,
            origin="llm",
            expected_effect=item.expected_effect,
            risk=item.risk,
            confidence=item.confidence,
            cost=item.cost,
            priority=priority(item.expected_effect, item.confidence, item.cost),
            dedupe_key=key,
            llm_call_id=call_id,
            evidence_ids=ids,
            wave_id=wave_id,
        )
        if hid is None:  # same significant words as an earlier hypothesis (its dedupe key)
            report.merged.append({"into": hypothesis_store.by_dedupe_key(db, key), "title": title})
            continue
        report.added.append(hid)
        existing.append({"id": hid, "title": title})
