"""The hypothesis queue, filtered, sorted and paged: the one query the CLI and the TUI list it with.

    page = queue_page(db, QueueFilter(status="proposed", backend="cpu", sort="rank"), offset=0, limit=50)
    page.rows[0].rank, page.rows[0].outcome, page.rows[0].waits_behind, page.total

The queue's reader lives in the data layer, and the CLI and the TUI import it from here. The queue
order (`sort="rank"`, the default, and the order the runner takes hypotheses in,
`runner.hypotheses.runnable`):

1. a priority a person set (`hypotheses prioritize`, the TUI's `+`/`-`) above 0 goes first, highest
   first; one at 0 or below goes last (a person saying "not now");
2. then the rank (relevance to the target, runner/rank.py), best first (ties: the older first); a
   hypothesis never ranked after the ranked ones, by its priority;
3. within a family (a series of fork commits on the same functions), the best-ranked open member
   leads; the others *wait*: they come after every hypothesis that does not wait, until the leader
   has been measured (an experiment of it exists), rejected, or found unpatchable.

Every filter is SQL, and the page's ids are chosen before the per-row columns (outcome, evidence,
patch) are computed, so paging through 10,000 hypotheses costs one ordered scan per page.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from kb.errors import UserError
from kb.jsoncol import decoded
from kb.store.paging import shaped
from kb.vocabulary import HYPOTHESIS_STATUSES, OUTCOMES, SORTS

if TYPE_CHECKING:
    import sqlite_utils

OPEN_STATUSES: tuple[str, ...] = ("proposed", "approved", "patched")
"""Statuses of a hypothesis that may still run (a family's leader is chosen among them)."""

PERSON_TIER = (
    "CASE WHEN h.priority_set = 1 AND h.priority > 0 THEN 0 WHEN h.priority_set = 1 THEN 2 ELSE 1 END"
)
_OPEN = ", ".join(f"'{s}'" for s in OPEN_STATUSES)
_BETTER = (
    "(coalesce(f.rank, -1) > coalesce(h.rank, -1) "
    "OR (coalesce(f.rank, -1) = coalesce(h.rank, -1) AND f.id < h.id))"
)
_LEADER = f"""
    SELECT f.id FROM hypotheses f
    WHERE f.family = h.family AND f.id != h.id AND f.status IN ({_OPEN}) AND {_BETTER}
      AND NOT EXISTS (SELECT 1 FROM experiments x WHERE x.hypothesis_id = f.id AND x.status != 'lost')
"""
WAITING = f"(h.family IS NOT NULL AND EXISTS ({_LEADER}))"
"""1 when a better member of the hypothesis's family is still open and unmeasured (it waits)."""
WAITS_BEHIND = f"CASE WHEN h.family IS NULL THEN NULL ELSE ({_LEADER} ORDER BY f.rank DESC, f.id LIMIT 1) END"
QUEUE_ORDER = (
    f"{PERSON_TIER}, CASE WHEN h.priority_set = 1 THEN h.priority END DESC, {WAITING}, "
    "h.rank DESC NULLS LAST, CASE WHEN h.rank IS NULL THEN h.priority END DESC, h.id"
)
"""The queue order (see the module doc), over a `hypotheses h` row."""
_WHEN = "coalesce(json_extract(h.rank_why, '$.when'), h.created_at)"
_ORDERS = {
    "rank": QUEUE_ORDER,
    "priority": "h.priority DESC, h.rank DESC NULLS LAST, h.id",
    "recent": f"{_WHEN} DESC, h.id DESC",
    "effect": "h.expected_effect DESC NULLS LAST, h.rank DESC NULLS LAST, h.id",
}
_OUTCOME = """coalesce(
    (SELECT x.status FROM experiments x WHERE x.hypothesis_id = h.id ORDER BY x.id DESC LIMIT 1),
    (SELECT x.status FROM experiments x JOIN patches p ON p.id = x.patch_id
     WHERE p.hypothesis_id = h.id ORDER BY x.id DESC LIMIT 1))"""
"""A hypothesis's outcome: its latest experiment's status (NULL: never measured)."""


@dataclass(frozen=True)
class QueueFilter:
    """What `hypotheses list` and the TUI's Hypotheses pane show; None means any."""

    status: str | None = None
    outcome: str | None = None
    """An experiment status (its latest experiment's), or `none`: never measured."""
    origin: str | None = None
    """`miner:fork`, or a part of it: `miner` (every miner), `fork`, `gap`, `llm`, `manual`."""
    path: str | None = None
    """A file or folder prefix: the patch's files or the cited fork commit's files."""
    backend: str | None = None
    """A compute backend (cpu, cuda, ...) the hypothesis touches."""
    search: str | None = None
    """Words in the title or rationale, or in the evidence it cites (the KB search)."""
    sort: str = "rank"

    def check(self) -> None:
        """A bad value is a one-line UserError naming the option (before any query runs)."""
        if self.status is not None and self.status not in HYPOTHESIS_STATUSES:
            raise UserError(f"--status {self.status!r}: must be one of {', '.join(HYPOTHESIS_STATUSES)}")
        if self.outcome is not None and self.outcome not in OUTCOMES:
            raise UserError(f"--outcome {self.outcome!r}: must be one of {', '.join(OUTCOMES)}")
        if self.sort not in SORTS:
            raise UserError(f"--sort {self.sort!r}: must be one of {', '.join(SORTS)}")
        for name in ("origin", "path", "backend", "search"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise UserError(f"--{name}: must not be empty")

    def describe(self) -> str:
        """The active filters as `status proposed, backend cpu` (empty when none)."""
        parts = [
            f"{name} {getattr(self, name)}"
            for name in ("status", "outcome", "origin", "path", "backend", "search")
            if getattr(self, name) is not None
        ]
        return ", ".join(parts)


@dataclass(frozen=True)
class QueueRow:
    id: int
    title: str
    status: str
    outcome: str | None
    """Its latest experiment's status (None: never measured)."""
    priority: float
    priority_set: bool
    """A person set the priority: it orders the queue before the rank."""
    rank: float | None
    origin: str
    expected_effect: float | None
    confidence: float | None
    cost: float | None
    evidence: int
    """How many evidence rows it cites."""
    cites: list[str]
    """The kinds of the evidence it cites (passage, commit, gap, ...)."""
    patch_id: int | None
    apply_status: str | None
    family: int | None
    family_size: int
    waits_behind: int | None
    """The family member it waits behind (None: it does not wait)."""
    created_at: float
    rank_why: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "outcome": self.outcome,
            "priority": self.priority,
            "priority_set": self.priority_set,
            "rank": self.rank,
            "origin": self.origin,
            "expected_effect": self.expected_effect,
            "confidence": self.confidence,
            "cost": self.cost,
            "title": self.title,
            "evidence": self.evidence,
            "patch_id": self.patch_id,
            "apply_status": self.apply_status,
            "family": self.family,
            "family_size": self.family_size,
            "waits_behind": self.waits_behind,
            "rank_why": self.rank_why,
        }


@dataclass(frozen=True)
class QueuePage:
    rows: list[QueueRow]
    offset: int
    limit: int | None
    total: int
    """Hypotheses matching the filter (all pages)."""

    @property
    def remaining(self) -> int:
        """Matching hypotheses after this page."""
        return max(0, self.total - self.offset - len(self.rows))


def _like_prefix(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.rstrip("/") + "/%"


def _where(flt: QueueFilter) -> tuple[str, list[Any]]:
    from kb.search import fts_query, stem_query

    clauses: list[str] = []
    params: list[Any] = []
    if flt.status is not None:
        clauses.append("h.status = ?")
        params.append(flt.status)
    if flt.outcome == "none":
        clauses.append(f"{_OUTCOME} IS NULL")
    elif flt.outcome is not None:
        clauses.append(f"{_OUTCOME} = ?")
        params.append(flt.outcome)
    if flt.origin is not None:
        clauses.append("(h.origin = ? OR h.origin LIKE ? || ':%' OR h.origin LIKE '%:' || ?)")
        params += [flt.origin] * 3
    if flt.path is not None:
        exact, prefix = flt.path.rstrip("/") or flt.path, _like_prefix(flt.path)
        clauses.append(
            "(EXISTS (SELECT 1 FROM hypothesis_evidence he JOIN commit_files cf ON cf.evidence_id = "
            "he.evidence_id WHERE he.hypothesis_id = h.id AND (cf.path = ? OR cf.path LIKE ? ESCAPE '\\'))"
            " OR EXISTS (SELECT 1 FROM patches p, json_each(p.files) pf WHERE p.hypothesis_id = h.id "
            "AND (pf.value = ? OR pf.value LIKE ? ESCAPE '\\')))"
        )
        params += [exact, prefix, exact, prefix]
    if flt.backend is not None:
        clauses.append(
            "(EXISTS (SELECT 1 FROM json_each(h.rank_why, '$.backends') b WHERE b.value = ?)"
            " OR EXISTS (SELECT 1 FROM hypothesis_evidence he JOIN commits c ON c.evidence_id = "
            "he.evidence_id, json_each(c.backends) cb WHERE he.hypothesis_id = h.id AND cb.value = ?))"
        )
        params += [flt.backend, flt.backend]
    if flt.search is not None:
        words = flt.search.strip()
        # The title and rationale as typed (any case), or evidence the KB search finds for it (the exact
        # index and the one that forgives word forms: kb/search.py's own query rules).
        clauses.append(
            "(h.title LIKE ? ESCAPE '\\' OR h.rationale LIKE ? ESCAPE '\\' OR h.id IN ("
            "SELECT he.hypothesis_id FROM hypothesis_evidence he WHERE he.evidence_id IN ("
            "SELECT rowid FROM evidence_fts WHERE evidence_fts MATCH ? "
            "UNION SELECT rowid FROM evidence_stem_fts WHERE evidence_stem_fts MATCH ?)))"
        )
        like = "%" + words.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        params += [like, like, fts_query(words), stem_query(words)]
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params


_DETAIL_SQL = f"""
SELECT h.id, h.title, h.status, h.priority, h.priority_set, h.rank, h.rank_why, h.origin,
       h.expected_effect, h.confidence, h.cost, h.family, h.created_at,
       {_OUTCOME} AS outcome,
       (SELECT count(*) FROM hypothesis_evidence he WHERE he.hypothesis_id = h.id) AS evidence,
       (SELECT group_concat(ev.kind) FROM hypothesis_evidence he JOIN evidence ev ON ev.id = he.evidence_id
        WHERE he.hypothesis_id = h.id) AS cites,
       (SELECT count(*) FROM hypotheses m WHERE m.family = h.family) AS family_size,
       {WAITS_BEHIND} AS waits_behind,
       p.id AS patch_id, p.apply_status
FROM hypotheses h
LEFT JOIN patches p ON p.id = (SELECT max(id) FROM patches WHERE hypothesis_id = h.id)
"""


class QueueDetail(TypedDict):
    """A hypothesis's row as _DETAIL_SQL reads it (rank_why: JSON text; cites: kinds joined by commas)."""

    id: int
    title: str
    status: str
    priority: float
    priority_set: int
    rank: float | None
    rank_why: str | None
    origin: str
    expected_effect: float | None
    confidence: float | None
    cost: float | None
    family: int | None
    created_at: float
    outcome: str | None
    evidence: int
    cites: str | None
    family_size: int
    waits_behind: int | None
    patch_id: int | None
    apply_status: str | None


def _row(r: QueueDetail) -> QueueRow:
    why: Any = decoded(r["rank_why"])
    return QueueRow(
        id=r["id"],
        title=r["title"],
        status=r["status"],
        outcome=r["outcome"],
        priority=float(r["priority"]),
        priority_set=bool(r["priority_set"]),
        rank=r["rank"],
        origin=r["origin"],
        expected_effect=r["expected_effect"],
        confidence=r["confidence"],
        cost=r["cost"],
        evidence=int(r["evidence"]),
        cites=[k for k in (r["cites"] or "").split(",") if k],
        patch_id=r["patch_id"],
        apply_status=r["apply_status"],
        family=r["family"],
        family_size=int(r["family_size"]) if r["family"] is not None else 1,
        waits_behind=r["waits_behind"],
        created_at=float(r["created_at"]),
        rank_why=why if isinstance(why, dict) else {},
    )


def queue_page(
    db: sqlite_utils.Database, flt: QueueFilter, *, offset: int = 0, limit: int | None = 50
) -> QueuePage:
    """One page of the queue under `flt`: `limit` rows from `offset` (None: all of them), and the
    total that match. An offset past the end gives the last page."""
    flt.check()
    if offset < 0 or (limit is not None and limit < 1):
        raise UserError(f"--offset {offset} / --limit {limit}: the offset is 0 or more, the limit 1 or more")
    where, params = _where(flt)
    try:
        total = int(db.execute(f"SELECT count(*) FROM hypotheses h {where}", params).fetchone()[0])
        if limit is not None and offset >= total > 0:
            offset = max(0, (total - 1) // limit * limit)
        page = "" if limit is None else f" LIMIT {int(limit)} OFFSET {int(offset)}"
        ids = [
            r[0]
            for r in db.execute(
                f"SELECT h.id FROM hypotheses h {where} ORDER BY {_ORDERS[flt.sort]}{page}", params
            )
        ]
    except sqlite3.OperationalError as exc:
        raise UserError(f"{flt.describe() or 'the queue'}: cannot list ({exc})") from None
    found: dict[int, QueueRow] = {}
    for start in range(0, len(ids), 500):  # SQLite's variable limit, with room to spare
        chunk = ids[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        for r in shaped(db, QueueDetail, _DETAIL_SQL + f" WHERE h.id IN ({marks})", chunk):
            found[r["id"]] = _row(r)
    return QueuePage([found[i] for i in ids if i in found], offset, limit, total)


def queue_ids(db: sqlite_utils.Database, where: str, params: list[Any]) -> list[int]:
    """Ids of the hypotheses matching a WHERE clause over `hypotheses h`, in the queue order."""
    return [r[0] for r in db.execute(f"SELECT h.id FROM hypotheses h {where} ORDER BY {QUEUE_ORDER}", params)]


def unpatched_ids(db: sqlite_utils.Database, statuses: Sequence[str]) -> list[int]:
    """Ids of the hypotheses in one of `statuses` without a latest patch that applies (none, or one
    that conflicts), in the queue order: what the patch writer works on."""
    marks = ", ".join("?" for _ in statuses)
    return queue_ids(
        db,
        f"""
        LEFT JOIN patches p ON p.id = (SELECT max(id) FROM patches WHERE hypothesis_id = h.id)
        WHERE h.status IN ({marks}) AND (p.id IS NULL OR p.apply_status = 'conflict')
        """,
        list(statuses),
    )


def queue_row(db: sqlite_utils.Database, hypothesis_id: int) -> QueueRow:
    """One hypothesis as the queue lists it (outcome, family, what it waits behind)."""
    found = shaped(db, QueueDetail, _DETAIL_SQL + " WHERE h.id = ?", [hypothesis_id])
    if not found:
        raise UserError(f"hypothesis {hypothesis_id}: no such hypothesis")
    return _row(found[0])
