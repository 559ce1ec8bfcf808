"""The provenance chain's reads (winner -> experiment -> patch -> hypothesis -> evidence -> source)
that the other stores do not already give: a hypothesis's evidence with its source, commit and
fusion columns, the wave whose post-mortem suggested it, the keep decision a winner commit reports,
the knowledge-base rows a free-form source ref names, and the reverse walk's lookups.

runner.record.provenance and runner.record.sources turn these rows into refs and JSON. Rows come
back typed: a table's whole row (kb.store.tables), or a TypedDict here named for what it holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from kb.store.paging import one, rows, shaped, shaped_one
from kb.store.tables import DecisionRow, SourceRow

if TYPE_CHECKING:
    import sqlite_utils


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" for _ in values)


# --- forwards ----------------------------------------------------------------------------------


def keep_decision(db: sqlite_utils.Database, experiment_id: int) -> DecisionRow | None:
    """The runner's keep decision on an experiment (final first, then the newest)."""
    return shaped_one(
        db,
        DecisionRow,
        """SELECT * FROM decisions WHERE experiment_id = ? AND origin = 'runner' AND verdict = 'keep'
           ORDER BY is_final DESC, id DESC LIMIT 1""",
        [experiment_id],
    )


def free_refs(db: sqlite_utils.Database, hypothesis_id: int | None) -> list[str]:
    """A hypothesis's free-form source refs in the order they were given."""
    found = rows(
        db, "SELECT ref FROM hypothesis_sources WHERE hypothesis_id = ? ORDER BY rowid", [hypothesis_id]
    )
    return [r["ref"] for r in found]


class CitedEvidence(TypedDict):
    """Evidence a hypothesis cites, with the citation's note, its source's columns, and its commit's
    and its fusion's (NULL when it is not a commit or not a fusion)."""

    id: int
    kind: str
    ref: str
    title: str | None
    section: str | None
    position: int | None
    meta: str | None
    note: str | None
    source_id: int
    source_kind: str
    source_name: str | None
    source_url: str | None
    canonical_url: str | None
    source_title: str | None
    source_commit: str | None
    source_ref: str | None
    commit_sha: str | None
    commit_subject: str | None
    commit_files: str | None
    backend: str | None
    ops: str | None
    fusion_file: str | None
    fusion_line: int | None
    fusion_kind: str | None
    fusion_commit: str | None


def evidence_rows(db: sqlite_utils.Database, hypothesis_id: int) -> list[CitedEvidence]:
    """The evidence a hypothesis cites, each with its source's, commit's and fusion's columns."""
    return shaped(
        db,
        CitedEvidence,
        """
        SELECT e.id, e.kind, e.ref, e.title, e.section, e.position, e.meta, he.note,
               s.id AS source_id, s.kind AS source_kind, s.name AS source_name, s.url AS source_url,
               s.canonical_url, s.title AS source_title, s.commit_sha AS source_commit,
               s.ref AS source_ref,
               c.sha AS commit_sha, c.subject AS commit_subject, c.files AS commit_files,
               f.backend, f.ops, f.file AS fusion_file, f.line AS fusion_line,
               f.kind AS fusion_kind, f.commit_sha AS fusion_commit
        FROM hypothesis_evidence he
        JOIN evidence e ON e.id = he.evidence_id
        JOIN sources s ON s.id = e.source_id
        LEFT JOIN commits c ON c.evidence_id = e.id
        LEFT JOIN fusions f ON f.evidence_id = e.id
        WHERE he.hypothesis_id = ?
        ORDER BY e.id
        """,
        [hypothesis_id],
    )


class SuggestingWave(TypedDict):
    """A wave whose post-mortem a hypothesis came from: its id, number, note and run's name."""

    id: int
    number: int
    reflection_evidence_id: int | None
    run_name: str


def suggesting_wave(db: sqlite_utils.Database, hypothesis_id: int) -> SuggestingWave | None:
    """The wave (id, number, reflection_evidence_id, run_name) whose post-mortem the autopilot read
    when it proposed this hypothesis, if any."""
    return shaped_one(
        db,
        SuggestingWave,
        "SELECT w.id, w.number, w.reflection_evidence_id, r.name AS run_name FROM hypotheses h "
        "JOIN waves w ON w.id = h.wave_id JOIN runs r ON r.id = w.run_id WHERE h.id = ?",
        [hypothesis_id],
    )


# --- what a ref names --------------------------------------------------------------------------


class EvidenceRef(TypedDict):
    """What an evidence ref names: the evidence's id, kind and title, and its source."""

    id: int
    kind: str
    title: str | None
    source_id: int


def evidence(db: sqlite_utils.Database, evidence_id: int) -> EvidenceRef | None:
    """An evidence row's id, kind, title and source_id."""
    return shaped_one(
        db, EvidenceRef, "SELECT id, kind, title, source_id FROM evidence WHERE id = ?", [evidence_id]
    )


class ForkSource(TypedDict):
    """A fork source's id and URLs."""

    id: int
    url: str | None
    canonical_url: str | None


def fork_source(db: sqlite_utils.Database, name: str) -> ForkSource | None:
    """The fork source of this name (id, url, canonical_url)."""
    return shaped_one(
        db, ForkSource, "SELECT id, url, canonical_url FROM sources WHERE kind = 'fork' AND name = ?", [name]
    )


def source_id_by_url(db: sqlite_utils.Database, url: str) -> int | None:
    """The first source whose canonical URL or URL is this one."""
    found = one(
        db, "SELECT id FROM sources WHERE canonical_url = ? OR url = ? ORDER BY id LIMIT 1", [url, url]
    )
    return int(found["id"]) if found else None


def source(db: sqlite_utils.Database, source_id: int) -> SourceRow | None:
    """Every column of a source."""
    return shaped_one(db, SourceRow, "SELECT * FROM sources WHERE id = ?", [source_id])


def winner_experiments_by_prefix(db: sqlite_utils.Database, sha_prefix: str) -> list[int]:
    """The experiments of the winner commits whose sha starts with `sha_prefix` (lower case)."""
    found = rows(db, "SELECT experiment_id FROM winners WHERE commit_sha LIKE ?", [sha_prefix + "%"])
    return [int(r["experiment_id"]) for r in found]


# --- backwards ---------------------------------------------------------------------------------


def evidence_ids_of_source(db: sqlite_utils.Database, source_id: int) -> list[int]:
    return [r["id"] for r in rows(db, "SELECT id FROM evidence WHERE source_id = ?", [source_id])]


def hypotheses_citing(db: sqlite_utils.Database, evidence_ids: Sequence[int]) -> set[int]:
    """The hypotheses that cite any of this evidence."""
    found = rows(
        db,
        f"SELECT hypothesis_id FROM hypothesis_evidence WHERE evidence_id IN ({_marks(evidence_ids)})",
        list(evidence_ids),
    )
    return {r["hypothesis_id"] for r in found}


def hypotheses_with_refs(db: sqlite_utils.Database, refs: Sequence[str]) -> set[int]:
    """The hypotheses with any of these free-form source refs."""
    found = rows(
        db, f"SELECT hypothesis_id FROM hypothesis_sources WHERE ref IN ({_marks(refs)})", list(refs)
    )
    return {r["hypothesis_id"] for r in found}


def hypotheses_with_ref_like(db: sqlite_utils.Database, pattern: str) -> set[int]:
    """The hypotheses with a free-form source ref matching this LIKE pattern."""
    found = rows(db, "SELECT hypothesis_id FROM hypothesis_sources WHERE ref LIKE ?", [pattern])
    return {r["hypothesis_id"] for r in found}


class HypothesisSummary(TypedDict):
    """A hypothesis's id, title, status and origin (`provenance led-to --json` prints it as it is)."""

    id: int
    title: str
    status: str
    origin: str


def hypothesis_summaries(db: sqlite_utils.Database, ids: Sequence[int]) -> list[HypothesisSummary]:
    """id, title, status and origin of these hypotheses, by id."""
    return shaped(
        db,
        HypothesisSummary,
        f"SELECT id, title, status, origin FROM hypotheses WHERE id IN ({_marks(ids)}) ORDER BY id",
        list(ids),
    )


class HypothesisExperiment(TypedDict):
    """An experiment that tried a hypothesis, with its run's name and its winner commit, if any."""

    id: int
    title: str
    status: str
    kind: str
    run_id: int
    run: str
    hypothesis_id: int
    """Its own hypothesis or its patch's: never NULL, the query picks experiments by it."""
    winner_commit: str | None
    winner_patch_file: str | None


def experiments_of_hypotheses(db: sqlite_utils.Database, ids: Sequence[int]) -> list[HypothesisExperiment]:
    """The experiments that tried these hypotheses (their own or their patch's), by id, with their
    run's name and winner commit; `provenance led-to --json` prints each row with its decision's
    effect, ci and pairs."""
    return shaped(
        db,
        HypothesisExperiment,
        f"""
        SELECT e.id, e.title, e.status, e.kind, e.run_id, r.name AS run,
               COALESCE(e.hypothesis_id, p.hypothesis_id) AS hypothesis_id,
               w.commit_sha AS winner_commit, w.patch_file AS winner_patch_file
        FROM experiments e
        JOIN runs r ON r.id = e.run_id
        LEFT JOIN patches p ON p.id = e.patch_id
        LEFT JOIN winners w ON w.experiment_id = e.id
        WHERE COALESCE(e.hypothesis_id, p.hypothesis_id) IN ({_marks(ids)})
        ORDER BY e.id
        """,
        list(ids),
    )
