"""The hypotheses pane's reads and its steering writes (approve, reject, priority), through
kb.store.queue and runner.hypotheses, as the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kb import vocabulary as _vocabulary
from kb.store import decisions as _decision_store
from kb.store import hypotheses as _hyp_store
from kb.store.hypotheses import PatchInfo
from kb.store.knowledge import EvidenceLink
from kb.store.paging import PAGE_SIZE, Page
from tui.data.store import log_event, transaction

if TYPE_CHECKING:
    import sqlite_utils

    from kb.store.queue import QueueFilter, QueueRow


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
    wave: int | None = None
    """The wave whose post-mortem the autopilot read when it proposed this idea."""
    repeat_of: int | None = None
    """The idea it repeats (already measured here: not run again)."""


@dataclass(frozen=True)
class HypothesisOutcome:
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
    experiments: list[HypothesisOutcome] = field(default_factory=list)


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
    as `autoresearch hypotheses list` (kb.store.queue). `status` narrows `filters` when given."""
    from kb.store.queue import QueueFilter, queue_page

    flt = filters or QueueFilter()
    if status is not None:
        flt = replace(flt, status=status)
    page = queue_page(db, flt, offset=offset, limit=limit)
    found = _hyp_store.origins(db, [r.id for r in page.rows])
    return Page([_with_origin(_hyp_row(r), found) for r in page.rows], page.offset, limit, page.total)


def _with_origin(row: HypothesisRow, found: dict[int, _hyp_store.HypothesisOrigin]) -> HypothesisRow:
    origin = found.get(row.id)
    return row if origin is None else replace(row, wave=origin.wave, repeat_of=origin.repeat_of)


def parse_filter(text: str, sort: str = "rank", status: str | None = None) -> QueueFilter:
    """The Hypotheses pane's filter bar: `status:proposed backend:cpu path:ggml/src/iqk repack` ->
    a QueueFilter (the words left over search titles, rationales and the evidence cited)."""
    from kb.store.queue import QueueFilter

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
    from kb.store.queue import queue_row

    r = queue_row(db, hypothesis_id)
    extra = _hyp_store.text(db, hypothesis_id)
    found = _hyp_store.tried_in(db, hypothesis_id)
    latest = _decision_store.latest_of(db, [x.id for x in found])
    exps = [
        HypothesisOutcome(x.id, x.run, x.status, latest[x.id].effect if x.id in latest else None)
        for x in found
    ]
    return HypothesisDetail(
        row=_with_origin(_hyp_row(r), _hyp_store.origins(db, [hypothesis_id])),
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
