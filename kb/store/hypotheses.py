"""The hypothesis tables as the faces read them: a hypothesis's text, the evidence and sources it
cites, its patches and the experiments that tried it; and their writes, as runner.hypotheses makes
them. The queue's order is kb.store.queue's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Required, TypedDict

from kb.errors import UserError
from kb.jsoncol import decoded_list
from kb.store.knowledge import EvidenceLink
from kb.store.paging import one, rows, shaped, shaped_one
from kb.store.tables import HypothesisRow, PatchRow

if TYPE_CHECKING:
    import sqlite_utils


@dataclass(frozen=True)
class HypothesisText:
    rationale: str
    risk: str | None
    confidence: float | None
    notes: str | None


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
class TriedIn:
    """An experiment that tried a hypothesis (directly or through one of its patches)."""

    id: int
    run: str
    status: str


def _patch_info(p: PatchRow | None) -> PatchInfo | None:
    if p is None:
        return None
    files = decoded_list(p["files"])
    return PatchInfo(
        p["id"],
        p["diff"],
        [str(f) for f in files],
        p["author_kind"],
        p["author"],
        p["apply_status"],
        p["apply_error"],
    )


def text(db: sqlite_utils.Database, hypothesis_id: int) -> HypothesisText:
    r = one(db, "SELECT rationale, risk, confidence, notes FROM hypotheses WHERE id = ?", [hypothesis_id])
    if r is None:
        raise UserError(f"hypothesis {hypothesis_id}: no such hypothesis")
    return HypothesisText(r["rationale"] or "", r["risk"], r["confidence"], r["notes"])


def cited_evidence(db: sqlite_utils.Database, hypothesis_id: int) -> list[EvidenceLink]:
    return [
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


def source_refs(db: sqlite_utils.Database, hypothesis_id: int) -> list[str]:
    found = rows(
        db, "SELECT ref FROM hypothesis_sources WHERE hypothesis_id = ? ORDER BY ref", [hypothesis_id]
    )
    return [x["ref"] for x in found]


def latest_patch(db: sqlite_utils.Database, hypothesis_id: int) -> PatchInfo | None:
    return _patch_info(latest_patch_row(db, hypothesis_id))


def patch(db: sqlite_utils.Database, patch_id: int) -> PatchInfo | None:
    return _patch_info(patch_row(db, patch_id))


def tried_in(db: sqlite_utils.Database, hypothesis_id: int, *, last: int = 20) -> list[TriedIn]:
    """The newest experiments of a hypothesis, newest first."""
    found = rows(
        db,
        """SELECT x.id, r.name AS run, x.status
           FROM experiments x JOIN runs r ON r.id = x.run_id
           WHERE x.hypothesis_id = ? OR x.patch_id IN (SELECT id FROM patches WHERE hypothesis_id = ?)
           ORDER BY x.id DESC LIMIT ?""",
        [hypothesis_id, hypothesis_id, last],
    )
    return [TriedIn(x["id"], x["run"], x["status"]) for x in found]


@dataclass(frozen=True)
class QueueEntry:
    """A hypothesis in priority order with its newest patch and the newest experiment that tried it
    (`autoresearch queue list`)."""

    id: int
    title: str
    status: str
    priority: float
    origin: str
    patch_id: int | None
    files: list[str]
    sources: list[str]
    experiment_id: int | None
    outcome: str | None
    outcome_reason: str | None


def by_priority(db: sqlite_utils.Database) -> list[QueueEntry]:
    found = rows(
        db,
        """
        SELECT h.id, h.title, h.status, h.priority, h.origin,
               p.id AS patch_id, p.files,
               (SELECT group_concat(ref, char(30)) FROM (SELECT ref FROM hypothesis_sources s
                WHERE s.hypothesis_id = h.id ORDER BY s.rowid)) AS sources,
               e.id AS experiment_id, e.status AS outcome, e.reason AS outcome_reason
        FROM hypotheses h
        LEFT JOIN patches p ON p.id = (SELECT max(id) FROM patches WHERE hypothesis_id = h.id)
        LEFT JOIN experiments e ON e.id = (
            SELECT max(id) FROM experiments WHERE patch_id = p.id OR hypothesis_id = h.id)
        ORDER BY h.priority DESC, h.id
        """,
    )
    return [
        QueueEntry(
            id=r["id"],
            title=r["title"],
            status=r["status"],
            priority=r["priority"],
            origin=r["origin"],
            patch_id=r["patch_id"],
            files=decoded_list(r["files"]),
            # group_concat joined them with the record separator (refs may hold commas)
            sources=r["sources"].split("\x1e") if r["sources"] else [],
            experiment_id=r["experiment_id"],
            outcome=r["outcome"],
            outcome_reason=r["outcome_reason"],
        )
        for r in found
    ]


class SameChange(TypedDict):
    """A hypothesis whose newest patch makes a given normalised change (kb/patchnorm.py), and
    the status of the newest candidate experiment that tried it (None: never tried)."""

    id: int
    title: str
    status: str
    outcome: str | None


def same_change(db: sqlite_utils.Database, norm_sha: str) -> list[SameChange]:
    """The hypotheses whose newest patch makes the change `norm_sha` names, oldest first."""
    return shaped(
        db,
        SameChange,
        """
        SELECT h.id, h.title, h.status,
               (SELECT e.status FROM experiments e WHERE e.hypothesis_id = h.id
                AND e.kind = 'candidate' ORDER BY e.id DESC LIMIT 1) AS outcome
        FROM hypotheses h
        JOIN patches p ON p.id = (SELECT max(id) FROM patches WHERE hypothesis_id = h.id)
        WHERE p.norm_sha = ?
        ORDER BY h.id
        """,
        [norm_sha],
    )


@dataclass(frozen=True)
class CitedSource:
    """Evidence a hypothesis cites, with its source's URL (`hypotheses show`); fields in the order
    `--json` prints them."""

    id: int
    kind: str
    title: str | None
    ref: str
    source: str | None
    url: str | None


@dataclass(frozen=True)
class PatchRecord:
    id: int
    author_kind: str
    author: str | None
    llm_call_id: int | None
    apply_status: str | None
    apply_error: str | None
    files: list[str]
    diff: str
    created_at: float


@dataclass(frozen=True)
class FamilyMember:
    id: int
    status: str
    rank: float | None
    title: str


def stored(db: sqlite_utils.Database, hypothesis_id: int) -> HypothesisRow | None:
    """Every column of a hypothesis as stored (`hypotheses show --json` prints them all)."""
    return shaped_one(db, HypothesisRow, "SELECT * FROM hypotheses WHERE id = ?", [hypothesis_id])


def cited_sources(db: sqlite_utils.Database, hypothesis_id: int) -> list[CitedSource]:
    found = rows(
        db,
        "SELECT e.id, e.kind, e.title, e.ref, coalesce(s.title, s.name, s.url) AS source, s.url "
        "FROM hypothesis_evidence he JOIN evidence e ON e.id = he.evidence_id "
        "JOIN sources s ON s.id = e.source_id WHERE he.hypothesis_id = ? ORDER BY e.id",
        [hypothesis_id],
    )
    return [CitedSource(**r) for r in found]


def patches(db: sqlite_utils.Database, hypothesis_id: int) -> list[PatchRecord]:
    found = rows(
        db,
        "SELECT id, author_kind, author, llm_call_id, apply_status, apply_error, files, diff, created_at "
        "FROM patches WHERE hypothesis_id = ? ORDER BY id",
        [hypothesis_id],
    )
    return [PatchRecord(**{**r, "files": decoded_list(r["files"])}) for r in found]


def family(db: sqlite_utils.Database, family_id: int) -> list[FamilyMember]:
    found = rows(
        db,
        "SELECT id, status, rank, title FROM hypotheses WHERE family = ? ORDER BY rank DESC, id",
        [family_id],
    )
    return [FamilyMember(**r) for r in found]


# --- writes -------------------------------------------------------------------------------------


class NewHypothesis(TypedDict, total=False):
    """A hypothesis to insert; columns left out take the table's defaults."""

    title: Required[str]
    rationale: str
    expected_effect: float | None
    confidence: float | None
    priority: float
    status: str
    origin: str
    dedupe_key: str | None
    llm_call_id: int | None
    notes: str | None
    risk: str | None
    cost: float | None
    wave_id: int | None
    created_at: Required[float]
    updated_at: Required[float]


def create(db: sqlite_utils.Database, hypothesis: NewHypothesis) -> int:
    from kb.db import insert

    return insert(db, "hypotheses", hypothesis)


def add_source_ref(db: sqlite_utils.Database, hypothesis_id: int, ref: str) -> None:
    """Free-form provenance (URL, fork:NAME@SHA, gap:ID, note:TEXT) of a hypothesis."""
    from kb.db import insert

    insert(db, "hypothesis_sources", {"hypothesis_id": hypothesis_id, "ref": ref})


def patch_row(db: sqlite_utils.Database, patch_id: int) -> PatchRow | None:
    """Every column of a patch as stored: the loop hands it on as the queue gives patches."""
    return shaped_one(db, PatchRow, "SELECT * FROM patches WHERE id = ?", [patch_id])


@dataclass(frozen=True)
class HypothesisOrigin:
    """Where an idea came from in the autopilot: the wave whose post-mortem the research phase
    read when it proposed it, and the idea it repeats (already measured here)."""

    wave: int | None
    """The wave's number in its run (hypotheses.wave_id -> waves.number)."""
    repeat_of: int | None


def origins(db: sqlite_utils.Database, hypothesis_ids: list[int]) -> dict[int, HypothesisOrigin]:
    """The wave and repeat of each hypothesis given (those with neither are left out)."""
    if not hypothesis_ids:
        return {}
    marks = ", ".join("?" for _ in hypothesis_ids)
    found = rows(
        db,
        f"SELECT h.id, w.number AS wave, h.repeat_of FROM hypotheses h "
        f"LEFT JOIN waves w ON w.id = h.wave_id "
        f"WHERE h.id IN ({marks}) AND (h.wave_id IS NOT NULL OR h.repeat_of IS NOT NULL)",
        list(hypothesis_ids),
    )
    return {int(r["id"]): HypothesisOrigin(r["wave"], r["repeat_of"]) for r in found}


class HypothesisUpdate(TypedDict, total=False):
    """Columns of a hypothesis that change after its insert; only those given are written."""

    status: str
    priority: float
    priority_set: int
    repeat_of: int | None
    notes: str | None
    updated_at: float


def update(db: sqlite_utils.Database, hypothesis_id: int, values: HypothesisUpdate) -> None:
    from kb.db import update as update_row

    update_row(db, "hypotheses", hypothesis_id, values)


def by_dedupe_key(db: sqlite_utils.Database, dedupe_key: str) -> int | None:
    """The hypothesis with this dedupe key, if any (miners and the research phase add each once)."""
    found = one(db, "SELECT id FROM hypotheses WHERE dedupe_key = ?", [dedupe_key])
    return int(found["id"]) if found else None


def exists(db: sqlite_utils.Database, hypothesis_id: int) -> bool:
    return one(db, "SELECT id FROM hypotheses WHERE id = ?", [hypothesis_id]) is not None


def evidence_exists(db: sqlite_utils.Database, evidence_id: int) -> bool:
    return one(db, "SELECT id FROM evidence WHERE id = ?", [evidence_id]) is not None


def link_evidence(db: sqlite_utils.Database, hypothesis_id: int, evidence_id: int) -> bool:
    """Cite evidence from a hypothesis; False when it already did."""
    cursor = db.execute(
        "INSERT OR IGNORE INTO hypothesis_evidence (hypothesis_id, evidence_id) VALUES (?, ?)",
        [hypothesis_id, evidence_id],
    )
    return bool(cursor.rowcount)


def link_source_ref(db: sqlite_utils.Database, hypothesis_id: int, ref: str) -> None:
    """A free-form source ref of a hypothesis, once (a second equal ref is ignored)."""
    db.execute(
        "INSERT OR IGNORE INTO hypothesis_sources (hypothesis_id, ref) VALUES (?, ?)", [hypothesis_id, ref]
    )


def evidence_ids(db: sqlite_utils.Database, hypothesis_id: int) -> list[int]:
    """The evidence a hypothesis cites, by id."""
    found = rows(
        db,
        "SELECT evidence_id FROM hypothesis_evidence WHERE hypothesis_id = ? ORDER BY evidence_id",
        [hypothesis_id],
    )
    return [r["evidence_id"] for r in found]


# --- patches ------------------------------------------------------------------------------------


class NewPatch(TypedDict):
    """A patch to insert (`files` is stored as JSON)."""

    hypothesis_id: int
    diff: str
    diff_sha: str
    files: list[str]
    author_kind: str
    author: str | None
    llm_call_id: int | None
    apply_status: str
    apply_error: str | None
    base_commit: str | None
    repair_of: int | None
    from_experiment: int | None
    norm_sha: str | None
    created_at: float


class PatchUpdate(TypedDict, total=False):
    apply_status: str
    apply_error: str | None


def create_patch(db: sqlite_utils.Database, patch: NewPatch) -> int:
    from kb.db import insert

    return insert(db, "patches", patch)


def update_patch(db: sqlite_utils.Database, patch_id: int, values: PatchUpdate) -> None:
    from kb.db import update as update_row

    update_row(db, "patches", patch_id, values)


def latest_patch_row(db: sqlite_utils.Database, hypothesis_id: int) -> PatchRow | None:
    """Every column of a hypothesis's latest patch: the patch writer and the loop pass it on whole."""
    return shaped_one(
        db,
        PatchRow,
        "SELECT * FROM patches WHERE hypothesis_id = ? ORDER BY id DESC LIMIT 1",
        [hypothesis_id],
    )


class RunnablePatch(PatchRow):
    """A patch ready for a wave, with its hypothesis's title, priority and rank."""

    hypothesis_title: str
    priority: float
    rank: float | None


def runnable(
    db: sqlite_utils.Database, statuses: Sequence[str], *, limit: int | None = None
) -> list[RunnablePatch]:
    """Patches ready for a wave, in the queue order: the latest patch (every column, with
    hypothesis_title, priority and rank) of each hypothesis in one of `statuses` that may run and
    has no finished or live experiment for that patch yet; the first `limit` of them (a queue of
    thousands is not read whole to fill a wave)."""
    from kb.store.queue import QUEUE_ORDER

    marks = ", ".join("?" for _ in statuses)
    return shaped(
        db,
        RunnablePatch,
        f"""
        SELECT p.*, h.title AS hypothesis_title, h.priority AS priority, h.rank AS rank
        FROM patches p JOIN hypotheses h ON h.id = p.hypothesis_id
        WHERE h.status IN ({marks}) AND h.status != 'needs_port'
          -- an idea already measured in this workspace (the autopilot's novelty check) is not run again
          AND h.repeat_of IS NULL
          AND p.id = (SELECT max(id) FROM patches WHERE hypothesis_id = h.id)
          -- a patch known not to apply on the baseline waits for the patch writer to rebase it
          AND coalesce(p.apply_status, 'unchecked') != 'conflict'
          AND NOT EXISTS (
              -- a lost experiment is re-queued as a new one, so it does not count here
              SELECT 1 FROM experiments e WHERE e.patch_id = p.id AND e.status != 'lost')
        ORDER BY {QUEUE_ORDER}
        LIMIT ?
        """,
        [*statuses, -1 if limit is None else max(0, limit)],
    )
