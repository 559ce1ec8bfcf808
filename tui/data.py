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

import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kb.errors import UserError
from runner import vocabulary as _vocabulary

if TYPE_CHECKING:
    import sqlite_utils

    from kb.search import Evidence, SearchHit
    from runner.queue_query import QueueFilter, QueueRow
    from runner.record.history import DecisionInfo, ExperimentInfo, RunInfo, Sample, WaveInfo
    from runner.record.redecide import RedecideResult

T = TypeVar("T")

DB_NAME = "autoresearch.db"  # kb.db.DB_NAME (a test checks they agree)
PAGE_SIZE = 200
#: A runner whose heartbeat is older than this is not driving its run any more (runner/measure/loop.py).
STALE_HEARTBEAT = 30.0
LIVE_RUN_STATUSES = ("running", "paused")
LIVE_EXPERIMENT_STATUSES = ("queued", "running")


# kb.db imports sqlite_utils, which imports pandas when it is installed (0.2-0.7 s): the app must
# paint before that, so this module reaches kb.db only from inside functions (run in workers).


def connect(path: Path, *, migrate_schema: bool = True) -> sqlite_utils.Database:
    """The workspace's database, which must exist (the console never creates one)."""
    from kb.db import connect as kb_connect

    return kb_connect(path, migrate_schema=migrate_schema, create=False)


def rows(db: sqlite_utils.Database, sql: str, params: Any = ()) -> list[dict[str, Any]]:
    from kb.db import rows as kb_rows

    return kb_rows(db, sql, params)


def one(db: sqlite_utils.Database, sql: str, params: Any = ()) -> dict[str, Any] | None:
    from kb.db import one as kb_one

    return kb_one(db, sql, params)


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

        settings = load_settings(self.root / "autoresearch.toml")
        return {
            **settings.policy.model_dump(),
            "metric": settings.metric.primary,
            "direction": settings.metric.direction,
            "guards": [g.model_dump() for g in settings.metric.guards],
        }


@dataclass(frozen=True)
class Page(Generic[T]):
    rows: list[T]
    offset: int
    limit: int
    total: int

    @property
    def has_next(self) -> bool:
        return self.offset + len(self.rows) < self.total

    @property
    def has_previous(self) -> bool:
        return self.offset > 0


def _json(text: Any) -> Any:
    if not isinstance(text, str) or not text:
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _count(db: sqlite_utils.Database, sql: str, params: Sequence[Any] = ()) -> int:
    return int(db.execute(sql, list(params)).fetchone()[0])


def clamp_offset(offset: int, total: int, limit: int) -> int:
    """A valid page start: within [0, last page]."""
    if total <= 0:
        return 0
    last = (total - 1) // limit * limit
    return max(0, min(offset, last))


def version(db: sqlite_utils.Database) -> int:
    """PRAGMA data_version: moves when another connection commits (kb.db.data_version)."""
    return int(db.execute("PRAGMA data_version").fetchone()[0])


# --- knowledge: papers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Paper:
    id: int
    title: str
    site: str | None
    published: str | None
    url: str | None
    authors: str | None
    passages: int


@dataclass(frozen=True)
class Passage:
    id: int
    """The evidence id hypotheses cite."""
    position: int | None
    section: str | None
    body: str


def papers(db: sqlite_utils.Database, offset: int = 0, limit: int = PAGE_SIZE) -> Page[Paper]:
    total = _count(db, "SELECT count(*) FROM sources WHERE kind = 'paper'")
    offset = clamp_offset(offset, total, limit)
    found = rows(
        db,
        """SELECT s.id, coalesce(s.title, s.url, '') AS title, s.site, s.published, s.url, s.authors,
                  (SELECT count(*) FROM evidence e WHERE e.source_id = s.id AND e.kind = 'passage') AS n
           FROM sources s WHERE s.kind = 'paper'
           ORDER BY coalesce(s.published, '') DESC, s.id DESC LIMIT ? OFFSET ?""",
        [limit, offset],
    )
    return Page(
        [
            Paper(r["id"], r["title"], r["site"], r["published"], r["url"], r["authors"], r["n"])
            for r in found
        ],
        offset,
        limit,
        total,
    )


def paper(db: sqlite_utils.Database, source_id: int) -> Paper:
    r = one(
        db,
        """SELECT s.id, coalesce(s.title, s.url, '') AS title, s.site, s.published, s.url, s.authors,
                  (SELECT count(*) FROM evidence e WHERE e.source_id = s.id AND e.kind = 'passage') AS n
           FROM sources s WHERE s.id = ? AND s.kind = 'paper'""",
        [source_id],
    )
    if r is None:
        raise UserError(f"paper {source_id}: no such paper")
    return Paper(r["id"], r["title"], r["site"], r["published"], r["url"], r["authors"], r["n"])


def passages(
    db: sqlite_utils.Database, source_id: int, offset: int = 0, limit: int = PAGE_SIZE
) -> Page[Passage]:
    total = _count(db, "SELECT count(*) FROM evidence WHERE source_id = ? AND kind = 'passage'", [source_id])
    offset = clamp_offset(offset, total, limit)
    found = rows(
        db,
        """SELECT id, position, section, body FROM evidence WHERE source_id = ? AND kind = 'passage'
           ORDER BY position, id LIMIT ? OFFSET ?""",
        [source_id, limit, offset],
    )
    return Page(
        [Passage(r["id"], r["position"], r["section"], r["body"]) for r in found], offset, limit, total
    )


def passage_index(db: sqlite_utils.Database, evidence_id: int) -> tuple[int, int]:
    """(paper id, index of the passage in reading order), to open the reader at a cited passage."""
    r = one(db, "SELECT source_id, position FROM evidence WHERE id = ? AND kind = 'passage'", [evidence_id])
    if r is None:
        raise UserError(f"evidence {evidence_id}: not a paper passage")
    before = _count(
        db,
        """SELECT count(*) FROM evidence WHERE source_id = ? AND kind = 'passage'
           AND (coalesce(position, -1) < coalesce(?, -1)
                OR (coalesce(position, -1) = coalesce(?, -1) AND id < ?))""",
        [r["source_id"], r["position"], r["position"], evidence_id],
    )
    return int(r["source_id"]), before


# --- knowledge: forks and commits ---------------------------------------------------------------


@dataclass(frozen=True)
class Fork:
    id: int
    name: str
    url: str | None
    commits: int
    upstreamed: int


@dataclass(frozen=True)
class CommitRow:
    evidence_id: int
    fork: str
    sha: str
    subject: str
    author: str | None
    authored_at: str | None
    files: int
    insertions: int
    deletions: int
    upstreamed: bool


@dataclass(frozen=True)
class CommitDetail:
    evidence_id: int
    fork: str
    fork_url: str | None
    sha: str
    subject: str
    message: str
    author: str | None
    authored_at: str | None
    files: list[str]
    insertions: int
    deletions: int
    diff: str
    diff_truncated: bool
    upstreamed: bool


def forks(db: sqlite_utils.Database) -> list[Fork]:
    found = rows(
        db,
        """SELECT s.id, coalesce(s.name, s.url, '') AS name, s.url,
                  count(c.evidence_id) AS n, coalesce(sum(c.upstreamed), 0) AS up
           FROM sources s
           LEFT JOIN evidence e ON e.source_id = s.id AND e.kind = 'commit'
           LEFT JOIN commits c ON c.evidence_id = e.id
           WHERE s.kind = 'fork' GROUP BY s.id ORDER BY name""",
    )
    return [Fork(r["id"], r["name"], r["url"], r["n"], r["up"]) for r in found]


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def commits(
    db: sqlite_utils.Database,
    *,
    fork_id: int | None = None,
    path: str = "",
    hide_upstreamed: bool = False,
    offset: int = 0,
    limit: int = PAGE_SIZE,
) -> Page[CommitRow]:
    """Fork commits, newest first; `path` keeps those touching a path containing it."""
    where = ["e.kind = 'commit'"]
    params: list[Any] = []
    if fork_id is not None:
        where.append("e.source_id = ?")
        params.append(fork_id)
    if path.strip():
        where.append(
            "EXISTS (SELECT 1 FROM commit_files f WHERE f.evidence_id = e.id AND f.path LIKE ? ESCAPE '\\')"
        )
        params.append(_like(path.strip()))
    if hide_upstreamed:
        where.append("c.upstreamed = 0")
    clause = " AND ".join(where)
    base = (
        "FROM evidence e JOIN commits c ON c.evidence_id = e.id JOIN sources s ON s.id = e.source_id "
        f"WHERE {clause}"
    )
    total = _count(db, f"SELECT count(*) {base}", params)
    offset = clamp_offset(offset, total, limit)
    found = rows(
        db,
        f"""SELECT e.id, coalesce(s.name, s.url, '') AS fork, c.sha, c.subject, c.author, c.authored_at,
                   c.files, c.insertions, c.deletions, c.upstreamed
            {base} ORDER BY coalesce(c.authored_at, '') DESC, e.id DESC LIMIT ? OFFSET ?""",
        [*params, limit, offset],
    )
    out = []
    for r in found:
        files = _json(r["files"])
        out.append(
            CommitRow(
                evidence_id=r["id"],
                fork=r["fork"],
                sha=r["sha"],
                subject=r["subject"],
                author=r["author"],
                authored_at=r["authored_at"],
                files=len(files) if isinstance(files, list) else 0,
                insertions=r["insertions"],
                deletions=r["deletions"],
                upstreamed=bool(r["upstreamed"]),
            )
        )
    return Page(out, offset, limit, total)


def commit(db: sqlite_utils.Database, evidence_id: int) -> CommitDetail:
    r = one(
        db,
        """SELECT c.*, coalesce(s.name, s.url, '') AS fork, s.url AS fork_url
           FROM commits c JOIN evidence e ON e.id = c.evidence_id JOIN sources s ON s.id = e.source_id
           WHERE c.evidence_id = ?""",
        [evidence_id],
    )
    if r is None:
        raise UserError(f"evidence {evidence_id}: not a fork commit")
    files = _json(r["files"])
    return CommitDetail(
        evidence_id=evidence_id,
        fork=r["fork"],
        fork_url=r["fork_url"],
        sha=r["sha"],
        subject=r["subject"],
        message=r["message"] or r["subject"],
        author=r["author"],
        authored_at=r["authored_at"],
        files=[str(f) for f in files] if isinstance(files, list) else [],
        insertions=r["insertions"],
        deletions=r["deletions"],
        diff=r["diff"] or "",
        diff_truncated=bool(r["diff_truncated"]),
        upstreamed=bool(r["upstreamed"]),
    )


# --- knowledge: the fusion inventory ------------------------------------------------------------


@dataclass(frozen=True)
class FusionCell:
    backend: str
    state: str
    """`fused`, `gap` (the backend lacks a fusion another backend has) or `none`."""
    evidence_id: int | None = None
    file: str | None = None
    line: int | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file else ""


@dataclass(frozen=True)
class FusionRow:
    ops: str
    cells: dict[str, FusionCell]
    gap_ids: tuple[int, ...]
    """Evidence ids of the gaps recorded for this fusion (hypotheses cite them)."""

    @property
    def missing(self) -> list[str]:
        return [b for b, c in self.cells.items() if c.state == "gap"]


@dataclass(frozen=True)
class FusionMatrix:
    backends: list[str]
    rows: list[FusionRow]

    def row_of(self, evidence_id: int) -> int | None:
        """The row holding a fusion or gap evidence id."""
        for i, row in enumerate(self.rows):
            if evidence_id in row.gap_ids or any(c.evidence_id == evidence_id for c in row.cells.values()):
                return i
        return None


def fusion_matrix(db: sqlite_utils.Database) -> FusionMatrix:
    """Fusion patterns by backend: fused cells with file:line, gaps highlighted, gaps first."""
    fused: dict[str, dict[str, FusionCell]] = {}
    for r in rows(db, "SELECT evidence_id, backend, ops, file, line FROM fusions ORDER BY ops, backend"):
        fused.setdefault(r["ops"], {})[r["backend"]] = FusionCell(
            r["backend"], "fused", r["evidence_id"], r["file"], r["line"]
        )
    gaps: dict[str, dict[str, FusionCell]] = {}
    gap_ids: dict[str, list[int]] = {}
    for r in rows(db, "SELECT id, ref, title, section, meta FROM evidence WHERE kind = 'gap' ORDER BY id"):
        meta = _json(r["meta"]) if r["meta"] else {}
        meta = meta if isinstance(meta, dict) else {}
        ops = r["title"] or str(r["ref"]).split(":", 1)[-1]
        missing = meta.get("missing") or ([r["section"]] if r["section"] else [])
        gap_ids.setdefault(ops, []).append(r["id"])
        for backend in missing:
            gaps.setdefault(ops, {})[str(backend)] = FusionCell(
                str(backend), "gap", r["id"], meta.get("file"), meta.get("line")
            )
        for backend in meta.get("present") or []:
            fused.setdefault(ops, {}).setdefault(str(backend), FusionCell(str(backend), "fused"))
    backends = sorted({b for cells in (*fused.values(), *gaps.values()) for b in cells})
    keys = sorted(gaps) + sorted(k for k in fused if k not in gaps)
    out = []
    for ops in keys:
        cells = {}
        for backend in backends:
            cell = fused.get(ops, {}).get(backend) or gaps.get(ops, {}).get(backend)
            cells[backend] = cell or FusionCell(backend, "none")
        out.append(FusionRow(ops, cells, tuple(gap_ids.get(ops, ()))))
    return FusionMatrix(backends, out)


# --- knowledge: search and evidence -------------------------------------------------------------

SNIPPET_MARKS = ("\x01", "\x02")  # search hit highlights, turned into styles by the widget


def search(db: sqlite_utils.Database, query: str, limit: int = 50) -> list[SearchHit]:
    from kb.search import search as kb_search

    return kb_search(db, query, limit=limit, marks=SNIPPET_MARKS, snippet_tokens=16)


@dataclass(frozen=True)
class EvidenceLink:
    id: int
    kind: str
    """The evidence kind: passage, commit, fusion, gap, single_op, note."""
    title: str
    source: str
    ref: str
    note: str | None = None

    @property
    def label(self) -> str:
        return {"passage": "paper", "commit": "fork commit", "gap": "fusion gap"}.get(self.kind, self.kind)


def evidence_link(db: sqlite_utils.Database, evidence_id: int) -> EvidenceLink:
    r = one(
        db,
        """SELECT e.id, e.kind, coalesce(e.title, '') AS title, e.ref,
                  coalesce(s.title, s.name, s.url, '') AS source
           FROM evidence e JOIN sources s ON s.id = e.source_id WHERE e.id = ?""",
        [evidence_id],
    )
    if r is None:
        raise UserError(f"evidence {evidence_id}: no such evidence id")
    return EvidenceLink(r["id"], r["kind"], r["title"], r["source"], r["ref"])


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
class PatchInfo:
    id: int
    diff: str
    files: list[str]
    author_kind: str
    author: str | None
    apply_status: str | None
    apply_error: str | None


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


def _patch_info(p: dict[str, Any] | None) -> PatchInfo | None:
    if p is None:
        return None
    files = _json(p["files"])
    return PatchInfo(
        p["id"],
        p["diff"],
        [str(f) for f in files] if isinstance(files, list) else [],
        p["author_kind"],
        p["author"],
        p["apply_status"],
        p["apply_error"],
    )


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
    from runner.record import history

    r = queue_row(db, hypothesis_id)
    extra = one(db, "SELECT rationale, risk, confidence, notes FROM hypotheses WHERE id = ?", [hypothesis_id])
    assert extra is not None
    links = [
        EvidenceLink(e["id"], e["kind"], e["title"], e["source"], e["ref"], e["note"])
        for e in rows(
            db,
            """SELECT e.id, e.kind, coalesce(e.title, '') AS title, e.ref, he.note,
                      coalesce(s.title, s.name, s.url, '') AS source
               FROM hypothesis_evidence he JOIN evidence e ON e.id = he.evidence_id
               JOIN sources s ON s.id = e.source_id
               WHERE he.hypothesis_id = ? ORDER BY e.id""",
            [hypothesis_id],
        )
    ]
    refs = [
        x["ref"]
        for x in rows(
            db, "SELECT ref FROM hypothesis_sources WHERE hypothesis_id = ? ORDER BY ref", [hypothesis_id]
        )
    ]
    patch = _patch_info(
        one(db, "SELECT * FROM patches WHERE hypothesis_id = ? ORDER BY id DESC LIMIT 1", [hypothesis_id])
    )
    found = rows(
        db,
        """SELECT x.id, r.name AS run, x.status
           FROM experiments x JOIN runs r ON r.id = x.run_id
           WHERE x.hypothesis_id = ? OR x.patch_id IN (SELECT id FROM patches WHERE hypothesis_id = ?)
           ORDER BY x.id DESC LIMIT 20""",
        [hypothesis_id, hypothesis_id],
    )
    latest = history.latest_decision_rows(db, [x["id"] for x in found])
    exps = [
        HypothesisExperiment(
            x["id"], x["run"], x["status"], latest[x["id"]]["effect"] if x["id"] in latest else None
        )
        for x in found
    ]
    return HypothesisDetail(
        row=_hyp_row(r),
        rationale=extra["rationale"] or "",
        risk=extra["risk"],
        confidence=extra["confidence"],
        notes=extra["notes"],
        evidence=links,
        source_refs=refs,
        patch=patch,
        experiments=exps,
    )


def approve(db: sqlite_utils.Database, hypothesis_id: int) -> str:
    """Approve (a hypothesis whose patch applies becomes `patched`, as with the CLI); returns the
    new status. The runner takes approved and patched hypotheses into its next wave."""
    from runner import hypotheses as queue

    with transaction(db):
        hyp = queue.get(db, hypothesis_id)
        new = queue.approval_status(db, hypothesis_id)
        if hyp.status != new:
            queue.set_status(db, hypothesis_id, new)
            log_event(db, "hypothesis.approve", f"hypothesis {hypothesis_id}: {hyp.status} -> {new} (tui)")
    return new


def reject(db: sqlite_utils.Database, hypothesis_id: int) -> str:
    from runner import hypotheses as queue

    with transaction(db):
        hyp = queue.get(db, hypothesis_id)
        if hyp.status != "rejected":
            queue.set_status(db, hypothesis_id, "rejected")
            log_event(db, "hypothesis.reject", f"hypothesis {hypothesis_id}: {hyp.status} -> rejected (tui)")
    return "rejected"


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
class RunStatus:
    id: int
    name: str
    status: str
    backend: str
    pid: int | None
    host: str | None
    started_at: float
    ended_at: float | None
    heartbeat_at: float | None
    wave: int | None
    waves: int
    experiments: int
    kept: int
    cost_usd: float
    error: str | None
    pending_commands: int

    def heartbeat_age(self, now: float) -> float | None:
        return None if self.heartbeat_at is None else max(0.0, now - self.heartbeat_at)

    def runner_live(self, now: float) -> bool:
        """Is a runner process driving this run (a fresh heartbeat)?"""
        age = self.heartbeat_age(now)
        return self.status in LIVE_RUN_STATUSES and age is not None and age < STALE_HEARTBEAT


@dataclass(frozen=True)
class WorkerRow:
    id: int
    name: str
    backend: str
    status: str
    noise: float | None
    cost_usd: float
    experiment_id: int | None
    experiment: str | None
    phase: str | None = None
    """What a cluster is doing (launching, qualifying, downing, ...): the SkyPilot fleet's meta."""


@dataclass(frozen=True)
class FleetExperiment:
    id: int
    title: str
    kind: str
    wave: int | None
    worker: str | None
    backend: str | None
    status: str
    phase: str | None
    reason: str | None
    started_at: float | None
    ended_at: float | None
    pairs: int
    log_path: str | None
    """The experiment's newest log file (the running batch's), if any."""

    def elapsed(self, now: float) -> float | None:
        if self.started_at is None:
            return None
        return (self.ended_at if self.ended_at is not None else now) - self.started_at


@dataclass(frozen=True)
class FleetSnapshot:
    run: RunStatus | None
    workers: list[WorkerRow]
    experiments: list[FleetExperiment]
    """Live experiments (running, queued) first, then the most recent finished ones."""
    version: int


def _run_status(db: sqlite_utils.Database, run_id: int) -> RunStatus | None:
    r = one(
        db,
        """SELECT r.*,
              (SELECT max(number) FROM waves w WHERE w.run_id = r.id) AS wave,
              (SELECT count(*) FROM waves w WHERE w.run_id = r.id) AS n_waves,
              (SELECT count(*) FROM experiments e WHERE e.run_id = r.id) AS n_exp,
              (SELECT count(*) FROM experiments e WHERE e.run_id = r.id AND e.status = 'kept') AS n_kept,
              (SELECT count(*) FROM commands c WHERE c.status = 'pending') AS n_cmd
           FROM runs r WHERE r.id = ?""",
        [run_id],
    )
    if r is None:
        return None
    return RunStatus(
        id=r["id"],
        name=r["name"],
        status=r["status"],
        backend=r["backend"],
        pid=r["pid"],
        host=r["host"],
        started_at=r["started_at"],
        ended_at=r["ended_at"],
        heartbeat_at=r["heartbeat_at"],
        wave=r["wave"],
        waves=r["n_waves"],
        experiments=r["n_exp"],
        kept=r["n_kept"],
        cost_usd=r["cost_usd"] or 0.0,
        error=r["error"],
        pending_commands=r["n_cmd"],
    )


def current_run_id(db: sqlite_utils.Database) -> int | None:
    """The run going on (running or paused), else the latest one."""
    r = one(db, "SELECT id FROM runs ORDER BY status IN ('running', 'paused') DESC, id DESC LIMIT 1")
    return None if r is None else int(r["id"])


def run_status(db: sqlite_utils.Database, run_id: int | None = None) -> RunStatus | None:
    chosen = run_id if run_id is not None else current_run_id(db)
    return None if chosen is None else _run_status(db, chosen)


def _worker_phase(row: dict[str, Any]) -> str | None:
    try:
        meta = json.loads(row["meta"]) if row["meta"] else {}
    except ValueError:
        return None
    if not isinstance(meta, dict):
        return None
    return "downing" if meta.get("teardown") == "pending" else meta.get("phase")


def fleet(db: sqlite_utils.Database, run_id: int | None = None, *, finished: int = 30) -> FleetSnapshot:
    """Workers and experiments of the current run (or `run_id`), for the live fleet pane."""
    stamp = version(db)
    run = run_status(db, run_id)
    if run is None:
        return FleetSnapshot(None, [], [], stamp)
    workers = [
        WorkerRow(
            r["id"],
            r["name"],
            r["backend"],
            r["status"],
            r["noise"],
            r["cost_usd"] or 0.0,
            r["exp_id"],
            r["exp_title"],
            _worker_phase(r),
        )
        for r in rows(
            db,
            """SELECT k.*, x.id AS exp_id, x.title AS exp_title FROM workers k
               LEFT JOIN experiments x ON x.id = (
                   SELECT id FROM experiments WHERE worker_id = k.id AND status = 'running'
                   ORDER BY id DESC LIMIT 1)
               WHERE k.run_id = ? ORDER BY k.id""",
            [run.id],
        )
    ]
    select = """
        SELECT x.id, x.title, x.kind, x.status, x.phase, x.reason, x.started_at, x.ended_at, x.log_dir,
               w.number AS wave, k.name AS worker, k.backend AS backend,
               (SELECT j.log_path FROM jobs j WHERE j.experiment_id = x.id
                ORDER BY j.id DESC LIMIT 1) AS log_path,
               (SELECT d.pairs FROM decisions d WHERE d.experiment_id = x.id AND d.origin != 'redecide'
                ORDER BY d.id DESC LIMIT 1) AS pairs
        FROM experiments x LEFT JOIN waves w ON w.id = x.wave_id LEFT JOIN workers k ON k.id = x.worker_id
    """
    live = rows(
        db,
        select + " WHERE x.run_id = ? AND x.status IN ('running', 'queued') "
        "ORDER BY x.status = 'running' DESC, x.id",
        [run.id],
    )
    done = rows(
        db,
        select + " WHERE x.run_id = ? AND x.status NOT IN ('running', 'queued') ORDER BY x.id DESC LIMIT ?",
        [run.id, finished],
    )
    exps = [
        FleetExperiment(
            id=r["id"],
            title=r["title"],
            kind=r["kind"],
            wave=r["wave"],
            worker=r["worker"],
            backend=r["backend"],
            status=r["status"],
            phase=r["phase"],
            reason=r["reason"],
            started_at=r["started_at"],
            ended_at=r["ended_at"],
            pairs=r["pairs"] or 0,
            log_path=r["log_path"] or _newest_log(r["log_dir"]),
        )
        for r in [*live, *done]
    ]
    return FleetSnapshot(run, workers, exps, stamp)


def _newest_log(folder: str | None) -> str | None:
    if not folder:
        return None
    try:
        logs = [e for e in os.scandir(folder) if e.is_file() and e.name.endswith(".log")]
    except OSError:
        return None
    if not logs:
        return None
    return max(logs, key=lambda e: (e.stat().st_mtime, e.name)).path


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


def experiment_log_dir(db: sqlite_utils.Database, experiment_id: int) -> str | None:
    r = one(db, "SELECT log_dir FROM experiments WHERE id = ?", [experiment_id])
    if r is None:
        raise UserError(f"experiment {experiment_id}: no such experiment")
    return str(r["log_dir"]) if r["log_dir"] else None


def send_command(
    db: sqlite_utils.Database, kind: str, target_id: int | None = None, args: dict[str, Any] | None = None
) -> int:
    """Queue a steering command (pause, resume, stop, cancel, ...) for the runner; returns its id."""
    from runner.commands import send

    return send(db, kind, target_id, args)


def cancel_experiment(db: sqlite_utils.Database, experiment_id: int) -> int:
    r = one(db, "SELECT status FROM experiments WHERE id = ?", [experiment_id])
    if r is None:
        raise UserError(f"experiment {experiment_id}: no such experiment")
    if r["status"] not in LIVE_EXPERIMENT_STATUSES:
        raise UserError(f"experiment {experiment_id}: already {r['status']}; nothing to cancel")
    return send_command(db, "cancel", experiment_id)


def steer_run(db: sqlite_utils.Database, kind: str, run_id: int, now: float) -> int:
    """pause, resume or stop a run whose runner is alive (a dead one would never read it)."""
    run = _run_status(db, run_id)
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

    run = one(db, "SELECT policy FROM runs WHERE id = ?", [run_id])
    if run is None:
        raise UserError(f"run {run_id}: no such run")
    policy = _json(run["policy"]) or {}
    policy = policy if isinstance(policy, dict) else {}
    metric = str(policy.get("metric") or "")
    direction = str(policy.get("direction") or "higher")
    exps = rows(
        db,
        """SELECT id, status FROM experiments WHERE run_id = ? AND kind = 'candidate'
           ORDER BY id DESC LIMIT ?""",
        [run_id, last],
    )
    exps.reverse()
    if not metric:
        found = one(
            db,
            "SELECT metric FROM decisions d JOIN experiments e ON e.id = d.experiment_id "
            "WHERE e.run_id = ? LIMIT 1",
            [run_id],
        )
        metric = found["metric"] if found else ""
    values: dict[tuple[int, str], list[float]] = {}
    ids = [e["id"] for e in exps]
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        for r in db.execute(
            f"SELECT experiment_id, side, value FROM samples WHERE metric = ? AND experiment_id IN ({marks})",
            [metric, *chunk],
        ):
            values.setdefault((int(r[0]), str(r[1])), []).append(float(r[2]))
    points = []
    for e in exps:
        a = values.get((e["id"], "A"))
        b = values.get((e["id"], "B"))
        points.append(
            ChartPoint(e["id"], e["status"], side_value(b) if b else None, side_value(a) if a else None)
        )
    return MetricSeries(metric, direction, points)


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
        patch = _patch_info(one(db, "SELECT * FROM patches WHERE id = ?", [info.patch_id]))
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
