"""The knowledge tables: papers and their passages, forks and their commits, the fusion inventory,
and the evidence rows hypotheses cite."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kb.errors import UserError
from kb.jsoncol import decoded_dict, decoded_list
from kb.store.paging import PAGE_SIZE, Page, clamp_offset, count, like, one, rows

if TYPE_CHECKING:
    import sqlite_utils


# --- papers -------------------------------------------------------------------------------------


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
    total = count(db, "SELECT count(*) FROM sources WHERE kind = 'paper'")
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
    total = count(db, "SELECT count(*) FROM evidence WHERE source_id = ? AND kind = 'passage'", [source_id])
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
    before = count(
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
        params.append(like(path.strip()))
    if hide_upstreamed:
        where.append("c.upstreamed = 0")
    clause = " AND ".join(where)
    base = (
        "FROM evidence e JOIN commits c ON c.evidence_id = e.id JOIN sources s ON s.id = e.source_id "
        f"WHERE {clause}"
    )
    total = count(db, f"SELECT count(*) {base}", params)
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
        files = decoded_list(r["files"])
        out.append(
            CommitRow(
                evidence_id=r["id"],
                fork=r["fork"],
                sha=r["sha"],
                subject=r["subject"],
                author=r["author"],
                authored_at=r["authored_at"],
                files=len(files),
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
    files = decoded_list(r["files"])
    return CommitDetail(
        evidence_id=evidence_id,
        fork=r["fork"],
        fork_url=r["fork_url"],
        sha=r["sha"],
        subject=r["subject"],
        message=r["message"] or r["subject"],
        author=r["author"],
        authored_at=r["authored_at"],
        files=[str(f) for f in files],
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
        meta = decoded_dict(r["meta"])
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


# --- evidence -----------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Note:
    body: str | None
    meta: str | None
    """JSON text."""


def note(db: sqlite_utils.Database, evidence_id: int) -> Note | None:
    r = one(db, "SELECT body, meta FROM evidence WHERE id = ?", [evidence_id])
    return None if r is None else Note(r["body"], r["meta"])


def gap_count(db: sqlite_utils.Database) -> int:
    return count(db, "SELECT count(*) FROM evidence WHERE kind = 'gap'")


def fork_count(db: sqlite_utils.Database) -> int:
    return count(db, "SELECT count(*) FROM sources WHERE kind = 'fork'")
