"""The research phase's reads and its one knowledge write: what runner/research (generate, miners,
patch_writer, phase, reflection) asks of the measured runs, the knowledge base and the queue, and
the post-mortem note a reflection stores for its wave.

Rows come back typed (kb.store.paging.shaped): a whole table's row from kb/store/tables.py, one
extended with the columns its query joins (RepairCandidate, WaveWithRun), or a TypedDict next to
its query naming the columns it selects (as dicts in the query's column order); single values come
back as the ids and values asked for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from kb.store.decisions import latest_decision_id
from kb.store.paging import one, rows, shaped, shaped_one
from kb.store.tables import EvidenceRow, ExperimentRow, WaveRow

if TYPE_CHECKING:
    import sqlite_utils


def _marks(values: Sequence[Any]) -> str:
    """Placeholders for an IN list; `NULL` for none, so the list matches nothing."""
    return ", ".join("?" for _ in values) or "NULL"


# --- what was measured -------------------------------------------------------------------------


def latest_baseline_run(db: sqlite_utils.Database) -> int | None:
    """The run of the newest baseline (side A) sample."""
    found = one(
        db,
        "SELECT e.run_id FROM samples s JOIN experiments e ON e.id = s.experiment_id "
        "WHERE s.side = 'A' ORDER BY s.id DESC LIMIT 1",
    )
    return int(found["run_id"]) if found else None


def baseline_values(db: sqlite_utils.Database, run_id: int) -> list[tuple[str, float]]:
    """(metric, value) of every baseline sample of the run, in the order measured."""
    found = rows(
        db,
        "SELECT s.metric, s.value FROM samples s JOIN experiments e ON e.id = s.experiment_id "
        "WHERE e.run_id = ? AND s.side = 'A' ORDER BY s.id",
        [run_id],
    )
    return [(r["metric"], float(r["value"])) for r in found]


def noise_floor(db: sqlite_utils.Database, run_id: int) -> float | None:
    found = one(db, "SELECT noise_floor FROM runs WHERE id = ?", [run_id])
    return found["noise_floor"] if found else None


class MeasuredResult(TypedDict):
    """A measured candidate with its latest decision's effect and interval (none without one)."""

    id: int
    hypothesis_id: int | None
    title: str
    status: str
    reason: str | None
    meta: str | None
    effect: float | None
    ci_low: float | None
    ci_high: float | None
    pairs: int | None


def results(db: sqlite_utils.Database, limit: int) -> list[MeasuredResult]:
    """The newest `limit` measured candidates (newest first): id, hypothesis_id, title, status,
    reason, meta and their decision's effect, ci_low, ci_high and pairs (kb/store/decisions.py's rule)."""
    return shaped(
        db,
        MeasuredResult,
        "SELECT e.id, e.hypothesis_id, e.title, e.status, e.reason, e.meta, d.effect, d.ci_low, d.ci_high, "
        "d.pairs FROM experiments e LEFT JOIN decisions d ON d.id = " + latest_decision_id("e.id") + " "
        "WHERE e.kind = 'candidate' AND e.status NOT IN ('queued', 'running', 'cancelled', 'lost') "
        "ORDER BY e.id DESC LIMIT ?",
        [limit],
    )


class RepairCandidate(ExperimentRow):
    """A candidate whose patch failed, with its (still open) hypothesis's status."""

    hypothesis_status: str


def repairable(db: sqlite_utils.Database, run_id: int) -> list[RepairCandidate]:
    """The run's candidates whose hypothesis's latest patch failed its checks, did not apply or did
    not build, and whose hypothesis is still open (every experiment column, and hypothesis_status).
    Their patch_id and hypothesis_id are set (the query joins and compares on them)."""
    return shaped(
        db,
        RepairCandidate,
        "SELECT e.*, h.status AS hypothesis_status FROM experiments e "
        "JOIN hypotheses h ON h.id = e.hypothesis_id "
        "WHERE e.run_id = ? AND e.kind = 'candidate' AND e.patch_id IS NOT NULL "
        "AND (e.status = 'checks_failed' "
        "OR (e.status = 'crashed' AND e.reason IN ('does_not_apply', 'build'))) "
        # only the hypothesis's latest patch: one already repaired has a newer one
        "AND e.patch_id = (SELECT max(id) FROM patches WHERE hypothesis_id = e.hypothesis_id) "
        "AND h.status NOT IN ('rejected', 'unpatchable', 'needs_port') AND h.repeat_of IS NULL "
        "ORDER BY e.id",
        [run_id],
    )


def conflicts_to_port(db: sqlite_utils.Database, run_id: int) -> list[ExperimentRow]:
    """The run's conflicts (every experiment column) whose hypothesis needs a port, of its latest patch
    (their patch_id and hypothesis_id are set: the query joins and compares on them)."""
    return shaped(
        db,
        ExperimentRow,
        "SELECT e.* FROM experiments e JOIN hypotheses h ON h.id = e.hypothesis_id "
        "WHERE e.run_id = ? AND e.status = 'conflict' AND h.status = 'needs_port' "
        "AND e.patch_id = (SELECT max(id) FROM patches WHERE hypothesis_id = e.hypothesis_id) ORDER BY e.id",
        [run_id],
    )


class MeasuredTwin(TypedDict):
    """A candidate measured before whose patch makes the same normalised change, and its hypothesis."""

    hypothesis_id: int
    experiment_id: int
    status: str


def measured_twin(
    db: sqlite_utils.Database, norm_sha: str, patch_id: int, statuses: Sequence[str]
) -> MeasuredTwin | None:
    """The first candidate in one of `statuses` whose patch (another than `patch_id`) makes the same
    normalised change: hypothesis_id, experiment_id, status."""
    return shaped_one(
        db,
        MeasuredTwin,
        f"SELECT p.hypothesis_id, e.id AS experiment_id, e.status FROM patches p "
        f"JOIN experiments e ON e.patch_id = p.id WHERE p.norm_sha = ? AND p.id != ? "
        f"AND e.kind = 'candidate' AND e.status IN ({_marks(statuses)}) ORDER BY e.id LIMIT 1",
        [norm_sha, patch_id, *statuses],
    )


def repair_of(db: sqlite_utils.Database, patch_id: int) -> int | None:
    """The patch this one repairs, if any (None too when there is no such patch)."""
    found = one(db, "SELECT repair_of FROM patches WHERE id = ?", [patch_id])
    return None if found is None or found["repair_of"] is None else int(found["repair_of"])


def patch_diff(db: sqlite_utils.Database, patch_id: int) -> str | None:
    found = one(db, "SELECT diff FROM patches WHERE id = ?", [patch_id])
    return found["diff"] if found else None


class RunBranch(TypedDict):
    """A run's branch and the baseline it started from."""

    branch: str | None
    baseline_commit: str | None


def run_branch(db: sqlite_utils.Database, run_id: int) -> RunBranch | None:
    """A run's branch and baseline_commit."""
    return shaped_one(db, RunBranch, "SELECT branch, baseline_commit FROM runs WHERE id = ?", [run_id])


def run_calls_after(db: sqlite_utils.Database, run_id: int, after_id: int) -> list[tuple[int, float]]:
    """(id, cost) of the run's LLM calls after `after_id`, in order."""
    found = rows(
        db, "SELECT id, cost_usd FROM llm_calls WHERE id > ? AND run_id = ? ORDER BY id", [after_id, run_id]
    )
    return [(int(c["id"]), float(c["cost_usd"] or 0.0)) for c in found]


def last_call_id(db: sqlite_utils.Database) -> int:
    found = one(db, "SELECT coalesce(max(id), 0) AS n FROM llm_calls")
    return int(found["n"]) if found else 0


# --- the knowledge base and the queue ----------------------------------------------------------


def evidence_ids_of_kind(
    db: sqlite_utils.Database, kind: str, limit: int, *, newest: bool = False
) -> list[int]:
    """Up to `limit` evidence ids of this kind, oldest first (newest first with `newest`)."""
    order = "DESC" if newest else ""
    found = rows(db, f"SELECT id FROM evidence WHERE kind = ? ORDER BY id {order} LIMIT ?", [kind, limit])
    return [r["id"] for r in found]


def existing_evidence(db: sqlite_utils.Database, ids: Sequence[int]) -> set[int]:
    """Those of `ids` that are evidence ids."""
    return {r["id"] for r in rows(db, f"SELECT id FROM evidence WHERE id IN ({_marks(ids)})", list(ids))}


def evidence_titles(db: sqlite_utils.Database, ids: Sequence[int]) -> list[str | None]:
    return [
        r["title"] for r in rows(db, f"SELECT title FROM evidence WHERE id IN ({_marks(ids)})", list(ids))
    ]


def commit_paths(db: sqlite_utils.Database, evidence_id: int) -> list[str]:
    """The files a fork commit (by its evidence id) touches, by path."""
    found = rows(db, "SELECT path FROM commit_files WHERE evidence_id = ? ORDER BY path", [evidence_id])
    return [r["path"] for r in found]


class FusionSite(TypedDict):
    """Where a backend fuses its ops: the backend, the file and the line."""

    backend: str
    file: str
    line: int


def fusion_sites(db: sqlite_utils.Database, evidence_ids: Sequence[int], limit: int) -> list[FusionSite]:
    """backend, file and line of the fusions among this evidence, by evidence id."""
    return shaped(
        db,
        FusionSite,
        f"SELECT backend, file, line FROM fusions WHERE evidence_id IN ({_marks(evidence_ids)}) "
        "ORDER BY evidence_id LIMIT ?",
        [*evidence_ids, limit],
    )


def gaps(db: sqlite_utils.Database) -> list[EvidenceRow]:
    """Every backend fusion gap (every evidence column), by id."""
    return shaped(db, EvidenceRow, "SELECT * FROM evidence WHERE kind = 'gap' ORDER BY id")


class BackendFusion(TypedDict):
    """A fusion of some ops in one backend: its evidence id, where it is and its kind (graph, single)."""

    evidence_id: int
    backend: str
    file: str
    line: int
    kind: str


def fusions_in(db: sqlite_utils.Database, ops: str, backends: Sequence[str]) -> list[BackendFusion]:
    """The fusions of these ops in these backends: evidence_id, backend, file, line, kind."""
    return shaped(
        db,
        BackendFusion,
        f"SELECT f.evidence_id, f.backend, f.file, f.line, f.kind FROM fusions f "
        f"WHERE f.ops = ? AND f.backend IN ({_marks(backends)}) "
        "ORDER BY f.backend, f.evidence_id",
        [ops, *backends],
    )


class ForkCommitFacts(TypedDict):
    """A fork commit as the miner reads it: its evidence id, fork name, diff and recorded facts."""

    evidence_id: int
    fork: str | None
    sha: str
    subject: str
    message: str | None
    files: str
    diff: str | None
    diff_truncated: int
    upstreamed: int
    patch_id: str | None
    insertions: int
    deletions: int
    backends: str | None
    areas: str | None
    claims: str | None


def fork_commits(db: sqlite_utils.Database) -> list[ForkCommitFacts]:
    """Every fork commit with its diff and facts, by evidence id; a pull request's commits are
    left to the pull-request miner (one hypothesis per pull request)."""
    return shaped(
        db,
        ForkCommitFacts,
        """
SELECT e.id AS evidence_id, s.name AS fork, c.sha, c.subject, c.message, c.files, c.diff,
       c.diff_truncated, c.upstreamed, c.patch_id, c.insertions, c.deletions,
       c.backends, c.areas, c.claims
FROM commits c
JOIN evidence e ON e.id = c.evidence_id
JOIN sources s ON s.id = e.source_id
WHERE s.kind = 'fork' AND s.id NOT IN (SELECT source_id FROM pull_requests)
ORDER BY e.id
""",
    )


class HypothesisTitle(TypedDict):
    """A hypothesis's id and title."""

    id: int
    title: str


def hypothesis_titles(db: sqlite_utils.Database) -> list[HypothesisTitle]:
    """id and title of every hypothesis, by id (the research phase appends what it adds)."""
    return shaped(db, HypothesisTitle, "SELECT id, title FROM hypotheses ORDER BY id")


class HypothesisHeadline(TypedDict):
    """A hypothesis's id, status and title, as the research prompt lists those in the queue."""

    id: int
    status: str
    title: str


def top_hypotheses(db: sqlite_utils.Database, limit: int) -> list[HypothesisHeadline]:
    """id, status and title of the `limit` hypotheses of highest priority."""
    return shaped(
        db,
        HypothesisHeadline,
        "SELECT id, status, title FROM hypotheses ORDER BY priority DESC, id LIMIT ?",
        [limit],
    )


# --- the post-mortem ---------------------------------------------------------------------------


class WaveWithRun(WaveRow):
    """A wave with its run's name, noise floor and policy."""

    run_name: str
    noise_floor: float | None
    policy: str | None


def wave_with_run(db: sqlite_utils.Database, wave_id: int) -> WaveWithRun | None:
    """Every column of a wave, with its run's name (run_name), noise_floor and policy."""
    return shaped_one(
        db,
        WaveWithRun,
        "SELECT w.*, r.name AS run_name, r.noise_floor, r.policy FROM waves w JOIN runs r ON r.id = w.run_id "
        "WHERE w.id = ?",
        [wave_id],
    )


class WaveOutcome(TypedDict):
    """An experiment of a wave with its hypothesis's title and its latest decision (a post-mortem's
    facts, in the query's column order)."""

    id: int
    title: str
    status: str
    reason: str | None
    kind: str
    hypothesis_id: int | None
    hypothesis: str | None
    verdict: str | None
    metric: str | None
    effect: float | None
    ci_low: float | None
    ci_high: float | None
    pairs: int | None
    noise: float | None
    why: str | None


def wave_outcomes(db: sqlite_utils.Database, wave_id: int) -> list[WaveOutcome]:
    """The wave's experiments with their hypothesis and decision, by id (a post-mortem's facts)."""
    # experiments.hypothesis_id (m003) also links experiments that have no patch row (imports).
    direct = "e.hypothesis_id" if "hypothesis_id" in db["experiments"].columns_dict else "NULL"
    return shaped(
        db,
        WaveOutcome,
        f"""
        SELECT e.id, e.title, e.status, e.reason, e.kind,
               coalesce(p.hypothesis_id, {direct}) AS hypothesis_id, h.title AS hypothesis,
               d.verdict, d.metric, d.effect, d.ci_low, d.ci_high, d.pairs, d.noise, d.reason AS why
        FROM experiments e
        LEFT JOIN patches p ON p.id = e.patch_id
        LEFT JOIN hypotheses h ON h.id = coalesce(p.hypothesis_id, {direct})
        LEFT JOIN decisions d ON d.id = {latest_decision_id("e.id")}
        WHERE e.wave_id = ?
        ORDER BY e.id
        """,
        [wave_id],
    )


def store_note(
    db: sqlite_utils.Database, url: str, ref: str, title: str, body: str, meta: dict[str, Any], at: float
) -> int:
    """The note source at `url` and its one `ref` passage, made or brought up to date; its evidence
    id. The caller's transaction holds it together with what else it writes."""
    from kb.db import insert, update

    source = one(db, "SELECT id FROM sources WHERE kind = 'note' AND canonical_url = ?", [url])
    if source is None:
        source_id = insert(
            db,
            "sources",
            {
                "kind": "note",
                "name": title,
                "title": title,
                "url": url,
                "canonical_url": url,
                "meta": meta,
                "created_at": at,
                "updated_at": at,
            },
        )
    else:
        source_id = source["id"]
        update(db, "sources", source_id, {"meta": meta, "updated_at": at})
    existing = one(
        db, "SELECT id FROM evidence WHERE source_id = ? AND kind = 'note' AND ref = ?", [source_id, ref]
    )
    if existing is not None:
        evidence_id = int(existing["id"])
        update(db, "evidence", evidence_id, {"body": body, "meta": meta, "title": title})
        return evidence_id
    return insert(
        db,
        "evidence",
        {
            "source_id": source_id,
            "kind": "note",
            "ref": ref,
            "title": title,
            "section": "reflection",
            "body": body,
            "meta": meta,
            "created_at": at,
        },
    )
