"""Winners: a kept experiment becomes a commit on the run branch and a `.patch` file, with provenance.

Provenance chain, every link a row (DESIGN.md):
`winner commit -> experiment -> patch -> hypothesis -> evidence -> source (URL, repo@sha, file:line)`.
`provenance()` walks it forwards from an experiment (or a commit sha), `led_to()` backwards from a
source, an evidence id or a free-form source ref to the experiments and winners it led to.

Source refs are short strings used in commit trailers, patch headers and JSON alike:
`https://...` (a paper), `passage:<evidence id>` (a passage of it), `fork:<name>@<sha>` (a fork
commit), `gap:<evidence id>` (a backend fusion gap), `note:<text>`, `evidence:<id>` (anything else).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from kb import gitrepo
from kb.db import insert, log_event, one, rows, transaction, update
from kb.errors import UserError
from runner.harness.patchpaths import ProtectedPath, check_commit, protected_paths
from runner.record.history import FINISHED_STATUSES, latest_decision_rows, parse_json

if TYPE_CHECKING:
    import git

    from kb.workspace import Workspace

AUTHOR_NAME = gitrepo.AUTHOR_NAME
AUTHOR_EMAIL = gitrepo.AUTHOR_EMAIL

TRAILER_RUN = "Autoresearch-Run"
TRAILER_EXPERIMENT = "Autoresearch-Experiment"
TRAILER_HYPOTHESIS = "Autoresearch-Hypothesis"
TRAILER_PATCH = "Autoresearch-Patch"
TRAILER_SOURCE = "Autoresearch-Source"
TRAILER_RESULT = "Result"

# An experiment in one of these states was not kept, whatever decisions it recorded.
_NOT_KEPT = ("queued", *(s for s in FINISHED_STATUSES if s != "kept"))


@dataclass(frozen=True)
class WinnerRecord:
    """A kept experiment as committed on its run branch and exported as a patch file."""

    id: int
    run_id: int
    run_name: str
    experiment_id: int
    hypothesis_id: int | None
    branch: str
    commit_sha: str
    parent_sha: str
    patch_file: Path
    """Absolute path of the exported `patches/NNNN-<slug>.patch`."""
    position: int
    """1 for the run's first winner, 2 for the next, ... (order on the branch)."""
    sources: tuple[str, ...]
    result: dict[str, Any]
    """The `Result:` trailer: metric, direction, effect, ci, pairs, p, q, noise, metrics."""
    created: bool
    """False when the winner already existed (commit_winner is idempotent)."""


# --- source refs -------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _evidence_rows(db: sqlite_utils.Database, hypothesis_id: int) -> list[dict[str, Any]]:
    return rows(
        db,
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


def _evidence_refs(ev: dict[str, Any]) -> list[str]:
    kind = ev["kind"]
    if kind == "passage":
        url = ev["canonical_url"] or ev["source_url"]
        return [*([url] if url else []), f"passage:{ev['id']}"]
    if kind == "commit":
        name = ev["source_name"] or ev["canonical_url"] or ev["source_url"] or f"source{ev['source_id']}"
        return [f"fork:{name}@{ev['commit_sha'] or ev['ref']}"]
    if kind in ("fusion", "gap", "single_op"):
        return [f"gap:{ev['id']}"]
    return [f"evidence:{ev['id']}"]


def _location(ev: dict[str, Any]) -> str:
    """Where to look: URL with section, repo@sha with files, or file:line@sha."""
    meta = parse_json(ev["meta"]) or {}
    if ev["kind"] == "passage":
        url = ev["canonical_url"] or ev["source_url"] or ""
        where = f" section {ev['section']!r}" if ev["section"] else ""
        return f"{url}{where} passage {ev['ref']}".strip()
    if ev["kind"] == "commit":
        repo = ev["canonical_url"] or ev["source_url"] or ev["source_name"] or ""
        files = parse_json(ev["commit_files"]) or []
        shown = f" ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''})" if files else ""
        return f"{repo}@{ev['commit_sha'] or ev['ref']}{shown}"
    if ev["fusion_file"]:
        at = f"@{ev['fusion_commit'][:12]}" if ev["fusion_commit"] else ""
        return f"{ev['fusion_file']}:{ev['fusion_line']}{at}"
    if isinstance(meta, dict) and meta.get("file"):
        line = f":{meta['line']}" if meta.get("line") else ""
        return f"{meta['file']}{line}"
    return ev["canonical_url"] or ev["source_url"] or ev["source_name"] or ""


def source_refs(db: sqlite_utils.Database, hypothesis_id: int | None) -> list[str]:
    """Every source ref of a hypothesis: the free-form ones as given, then those of its evidence."""
    if hypothesis_id is None:
        return []
    found: dict[str, None] = {}
    for row in rows(
        db, "SELECT ref FROM hypothesis_sources WHERE hypothesis_id = ? ORDER BY rowid", [hypothesis_id]
    ):
        found.setdefault(_one_line(row["ref"]), None)
    for ev in _evidence_rows(db, hypothesis_id):
        for ref in _evidence_refs(ev):
            found.setdefault(ref, None)
    return list(found)


def source_details(db: sqlite_utils.Database, hypothesis_id: int | None) -> list[str]:
    """Human-readable source lines: each free-form ref, then each evidence with what and where."""
    if hypothesis_id is None:
        return []
    found: dict[str, None] = {}
    for row in rows(
        db, "SELECT ref FROM hypothesis_sources WHERE hypothesis_id = ? ORDER BY rowid", [hypothesis_id]
    ):
        found.setdefault(_one_line(row["ref"]), None)
    for ev in _evidence_rows(db, hypothesis_id):
        what = _one_line(ev["commit_subject"] or ev["title"] or ev["source_title"] or "")
        where = _location(ev)
        detail = " - ".join(part for part in (what, where) if part)
        found.setdefault(f"{' '.join(_evidence_refs(ev))}{'  ' + detail if detail else ''}", None)
    return list(found)


def _resolve_ref(db: sqlite_utils.Database, ref: str) -> dict[str, Any]:
    """What a free-form ref points at in the knowledge base, when it does."""
    out: dict[str, Any] = {"ref": ref}
    match = re.fullmatch(r"(gap|passage|evidence):(\d+)", ref)
    if match:
        ev = one(db, "SELECT id, kind, title, source_id FROM evidence WHERE id = ?", [int(match[2])])
        out["evidence_id"] = ev["id"] if ev else None
        out["source_id"] = ev["source_id"] if ev else None
        return out
    match = re.fullmatch(r"fork:([^@]+)@(\S+)", ref)
    if match:
        src = one(
            db, "SELECT id, url, canonical_url FROM sources WHERE kind = 'fork' AND name = ?", [match[1]]
        )
        out.update(fork=match[1], sha=match[2], source_id=src["id"] if src else None)
        if src:
            out["repo"] = src["canonical_url"] or src["url"]
        return out
    if re.match(r"https?://", ref):
        src = one(
            db, "SELECT id FROM sources WHERE canonical_url = ? OR url = ? ORDER BY id LIMIT 1", [ref, ref]
        )
        out.update(url=ref, source_id=src["id"] if src else None)
    return out


# --- gathering the chain -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Chain:
    experiment: dict[str, Any]
    run: dict[str, Any]
    wave: dict[str, Any] | None
    patch: dict[str, Any] | None
    hypothesis: dict[str, Any] | None
    decision: dict[str, Any] | None


def _keep_decision(db: sqlite_utils.Database, experiment_id: int) -> dict[str, Any] | None:
    return one(
        db,
        """SELECT * FROM decisions WHERE experiment_id = ? AND origin = 'runner' AND verdict = 'keep'
           ORDER BY is_final DESC, id DESC LIMIT 1""",
        [experiment_id],
    )


def _final_decision(db: sqlite_utils.Database, experiment_id: int) -> dict[str, Any] | None:
    """The runner's last word on an experiment: its final decision, else its latest one."""
    return latest_decision_rows(db, [experiment_id]).get(experiment_id)


def _chain(db: sqlite_utils.Database, experiment_id: int, *, keep: bool = False) -> _Chain:
    """Rows along the chain; `keep` picks the keep decision (what a winner commit reports)."""
    exp = one(db, "SELECT * FROM experiments WHERE id = ?", [experiment_id])
    if exp is None:
        raise UserError(f"experiment {experiment_id}: no such experiment")
    run = one(db, "SELECT * FROM runs WHERE id = ?", [exp["run_id"]])
    assert run is not None  # foreign key
    wave = one(db, "SELECT * FROM waves WHERE id = ?", [exp["wave_id"]]) if exp["wave_id"] else None
    patch = one(db, "SELECT * FROM patches WHERE id = ?", [exp["patch_id"]]) if exp["patch_id"] else None
    hid = exp.get("hypothesis_id") or (patch["hypothesis_id"] if patch else None)
    hyp = one(db, "SELECT * FROM hypotheses WHERE id = ?", [hid]) if hid else None
    decision = (keep and _keep_decision(db, experiment_id)) or _final_decision(db, experiment_id)
    return _Chain(exp, run, wave, patch, hyp, decision)


def _result(chain: _Chain) -> dict[str, Any]:
    d = chain.decision or {}
    policy = parse_json(d.get("policy")) or parse_json(chain.run["policy"]) or {}

    def num(x: Any) -> float | None:
        return float(x) if isinstance(x, int | float) and math.isfinite(x) else None

    return {
        "metric": d.get("metric"),
        "direction": policy.get("direction") if isinstance(policy, dict) else None,
        "effect": num(d.get("effect")),
        "ci": [num(d.get("ci_low")), num(d.get("ci_high"))],
        "pairs": d.get("pairs"),
        "p": num(d.get("p_value")),
        "q": num(d.get("q_value")),
        "noise": num(d.get("noise")),
        "metrics": parse_json(d.get("metrics")) or {},
    }


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x:+.2%}"


def _measured_line(chain: _Chain, result: dict[str, Any]) -> str:
    low, high = result["ci"]
    wave = f" wave {chain.wave['number']}" if chain.wave else ""
    noise = f", noise {result['noise']:.1%}" if result["noise"] is not None else ""
    return (
        f"Measured: {result['metric']} {_pct(result['effect'])} (CI {_pct(low)} .. {_pct(high)}), "
        f"{result['pairs']} pairs{noise}; run {chain.run['name']}{wave}"
    )


def _message(
    chain: _Chain, parent: str, sources: list[str], details: list[str], result: dict[str, Any]
) -> str:
    exp, run, hyp = chain.experiment, chain.run, chain.hypothesis
    lines = [_one_line(exp["title"]), ""]
    if hyp:
        lines.append(f"Hypothesis {hyp['id']}: {_one_line(hyp['title'])}")
        rationale = (hyp["rationale"] or "").strip()
        if rationale:
            # Blank lines would split the body; the trailer block must stay the last paragraph.
            lines.extend(["", *[line.rstrip() for line in rationale.splitlines() if line.strip()]])
        lines.append("")
    lines.append(_measured_line(chain, result))
    lines.append(f"Baseline: {run['baseline_commit'] or '?'} (the run's original baseline)")
    lines.append(f"Parent: {parent}")
    if exp["baseline_commit"] and exp["baseline_commit"] != parent:
        lines.append(f"Measured against: {exp['baseline_commit']}")
    if details:
        lines.extend(["Sources:", *[f"  {line}" for line in details]])
    lines.append("")
    lines.append(f"{TRAILER_RUN}: {_one_line(run['name'])}")
    lines.append(f"{TRAILER_EXPERIMENT}: {exp['id']}")
    if hyp:
        lines.append(f"{TRAILER_HYPOTHESIS}: {hyp['id']}")
    if chain.patch:
        lines.append(f"{TRAILER_PATCH}: {chain.patch['id']}")
    lines.extend(f"{TRAILER_SOURCE}: {ref}" for ref in sources)
    lines.append(f"{TRAILER_RESULT}: {json.dumps(result, sort_keys=True, separators=(',', ':'))}")
    return "\n".join(lines) + "\n"


def _slug(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return (slug[:50].rstrip("-")) or "patch"


# --- commit_winner -----------------------------------------------------------------------------


def _find_committed(
    repo: git.Repo, base: str | None, head: str, run_name: str, experiment_id: int
) -> str | None:
    """A commit for this experiment already on the branch (a call interrupted before recording it)."""
    from kb import gitrepo

    for sha, message in gitrepo.commit_messages(repo, base, head):
        trailers = gitrepo.parse_trailers(message)
        if (TRAILER_EXPERIMENT, str(experiment_id)) in trailers and (TRAILER_RUN, run_name) in trailers:
            return sha
    return None


def _position(repo: git.Repo, base: str | None, sha: str) -> int:
    """1-based order of a winner commit among the run branch's winner commits."""
    from kb import gitrepo

    return sum(
        1
        for _, message in gitrepo.commit_messages(repo, base, sha)
        if any(key == TRAILER_EXPERIMENT for key, _ in gitrepo.parse_trailers(message))
    )


def _export_patch(ws: Workspace, repo: git.Repo, sha: str, title: str) -> Path:
    """Write `patches/NNNN-<slug>.patch` for a commit, or find the one written before."""
    from kb import gitrepo

    folder = ws.patches_dir
    folder.mkdir(parents=True, exist_ok=True)
    first_line = f"From {sha} "
    numbers = [0]
    for path in sorted(folder.glob("*.patch")):
        with path.open(encoding="utf-8", errors="replace") as fh:
            if fh.readline().startswith(first_line):
                return path
        match = re.match(r"(\d+)-", path.name)
        if match:
            numbers.append(int(match[1]))
    text = gitrepo.format_patch(repo, sha)
    tmp = folder / f".tmp-{os.getpid()}-{sha[:12]}.patch"
    tmp.write_text(text, encoding="utf-8")
    try:
        number = max(numbers) + 1
        while True:
            path = folder / f"{number:04d}-{_slug(title)}.patch"
            try:
                os.link(tmp, path)  # fails if the name is taken (another process exported at once)
                return path
            except FileExistsError:
                number += 1
    finally:
        tmp.unlink(missing_ok=True)


def _commit_env(chain: _Chain) -> dict[str, str]:
    """Author, committer and date fixed by the decision, so the commit is reproducible."""
    stamp = (
        (chain.decision or {}).get("created_at")
        or chain.experiment["ended_at"]
        or chain.experiment["created_at"]
    )
    date = f"@{int(stamp)} +0000"
    return gitrepo.identity_env(date)


def _record(
    ws: Workspace,
    row: dict[str, Any],
    chain: _Chain,
    sources: list[str],
    result: dict[str, Any],
    parent: str,
    created: bool,
) -> WinnerRecord:
    hyp = chain.hypothesis
    return WinnerRecord(
        id=row["id"],
        run_id=row["run_id"],
        run_name=chain.run["name"],
        experiment_id=row["experiment_id"],
        hypothesis_id=hyp["id"] if hyp else None,
        branch=chain.run["branch"] or f"autoresearch/{chain.run['name']}",
        commit_sha=row["commit_sha"],
        parent_sha=parent,
        patch_file=ws.root / row["patch_file"],
        position=row["position"],
        sources=tuple(sources),
        result=result,
        created=created,
    )


def commit_winner(ws: Workspace, db: sqlite_utils.Database, experiment_id: int) -> WinnerRecord:
    """Make a kept experiment a winner: a commit on the run branch, a patch file, a `winners` row.

    Call it once the experiment is decided `keep` (status `kept`, or still `running` with a keep
    decision recorded by the runner). It:

    1. applies the experiment's patch onto the head of `autoresearch/<run name>` in the workspace's
       bare mirror (the branch is created at the run's head/baseline commit if missing) and commits
       it with the experiment title as subject, the hypothesis and measured effect in the body, and
       the trailers `Autoresearch-Run`, `Autoresearch-Experiment`, `Autoresearch-Hypothesis`,
       `Autoresearch-Patch`, one `Autoresearch-Source` per source ref, and `Result:` (one line of
       JSON: metric, direction, effect, ci, pairs, p, q, noise, metrics). Author, committer and date
       come from the decision, so the same experiment always gives the same commit;
    2. exports that commit (`git format-patch`, whose header carries the title, hypothesis, sources,
       effect with CI, baseline commit and date) to `patches/NNNN-<slug>.patch`, numbering on from
       the highest NNNN in the folder;
    3. records the `winners` row (position = order on the branch), sets `runs.head_commit` to the
       branch head, and logs a `winner` event, in one transaction.

    Idempotent and crash-safe: a second call (e.g. after `run --resume`) returns the existing record
    with `created=False`; a call interrupted after step 1 or 2 finds the commit on the branch (by its
    trailers) and the patch file (by its first line) instead of making them again.

    Raises ProtectedPath (a UserError) when the commit would change a protected path, whatever the
    patch's headers say; UserError when the experiment does not exist, has no patch, was not kept, or
    its patch no longer applies onto the branch head (possible when two winners of one wave touch the same
    lines: the loop should then re-queue the later one against the new baseline). The branch only
    moves by compare-and-swap, so concurrent callers cannot lose each other's commit.
    """
    from kb import gitrepo

    chain = _chain(db, experiment_id, keep=True)
    exp, run = chain.experiment, chain.run
    sources = source_refs(db, chain.hypothesis["id"] if chain.hypothesis else None)
    result = _result(chain)
    repo = gitrepo.open_repo(ws.mirror_path)
    branch = run["branch"] or f"autoresearch/{run['name']}"
    base = run["baseline_commit"] or None

    existing = one(db, "SELECT * FROM winners WHERE experiment_id = ?", [experiment_id])
    if existing is not None:
        path = ws.root / existing["patch_file"] if existing["patch_file"] else None
        if path is None or not path.exists():
            path = _export_patch(ws, repo, existing["commit_sha"], exp["title"])
            with transaction(db):
                update(db, "winners", existing["id"], {"patch_file": str(path.relative_to(ws.root))})
            existing["patch_file"] = str(path.relative_to(ws.root))
        parent = gitrepo.run(repo, "rev-parse", f"{existing['commit_sha']}^").strip()
        return _record(ws, existing, chain, sources, result, parent, created=False)

    if exp["kind"] != "candidate" or chain.patch is None:
        raise UserError(
            f"experiment {experiment_id}: a {exp['kind']} experiment without a patch cannot become a winner"
        )
    if exp["status"] in _NOT_KEPT or _keep_decision(db, experiment_id) is None:
        raise UserError(
            f"experiment {experiment_id}: status {exp['status']} without a keep decision; "
            "only kept experiments become winners"
        )

    for _attempt in range(5):
        head = gitrepo.branch_head(repo, branch)
        start = head or run["head_commit"] or run["baseline_commit"]
        if not start:
            raise UserError(f"run {run['name']}: no baseline commit to put winners on")
        sha = _find_committed(repo, base, head, run["name"], experiment_id) if head else None
        if sha is not None:
            break
        details = source_details(db, chain.hypothesis["id"] if chain.hypothesis else None)
        message = _message(chain, start, sources, details, result)
        sha = gitrepo.commit_patch(repo, start, chain.patch["diff"], message, env=_commit_env(chain))
        # The last gate before the run branch and patches/: what this commit really changes.
        refused = check_commit(repo, start, sha, protected_paths(ws, ws.settings))
        if refused:
            raise ProtectedPath(f"experiment {experiment_id}: not committed, the patch {refused}")
        try:
            gitrepo.set_branch(repo, branch, sha, head)
            break
        except UserError:
            continue  # the branch moved under us: look again
    else:
        raise UserError(f"{branch}: the branch kept moving while committing experiment {experiment_id}")

    parent = gitrepo.run(repo, "rev-parse", f"{sha}^").strip()
    path = _export_patch(ws, repo, sha, exp["title"])
    position = _position(repo, base, sha)
    with transaction(db):
        existing = one(db, "SELECT * FROM winners WHERE experiment_id = ?", [experiment_id])
        if existing is None:
            row = {
                "run_id": run["id"],
                "experiment_id": experiment_id,
                "commit_sha": sha,
                "patch_file": str(path.relative_to(ws.root)),
                "position": position,
                "created_at": (chain.decision or {}).get("created_at") or exp["created_at"],
            }
            row["id"] = insert(db, "winners", row)
            head_now = gitrepo.branch_head(repo, branch)
            update(db, "runs", run["id"], {"head_commit": head_now, "branch": branch})
            log_event(
                db,
                "winner",
                f"experiment {experiment_id} committed as {sha[:12]} on {branch} "
                f"({_pct(result['effect'])}); patch {path.name}",
                run_id=run["id"],
                experiment_id=experiment_id,
                data={"commit": sha, "patch_file": row["patch_file"], "sources": sources},
            )
            created = True
        else:
            row, created = existing, False
    return _record(ws, row, chain, sources, result, parent, created)


# --- provenance --------------------------------------------------------------------------------


def _evidence_json(ev: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": ev["id"],
        "kind": ev["kind"],
        "ref": ev["ref"],
        "title": ev["title"],
        "section": ev["section"],
        "note": ev["note"],
        "refs": _evidence_refs(ev),
        "location": _location(ev),
        "source": {
            "id": ev["source_id"],
            "kind": ev["source_kind"],
            "name": ev["source_name"],
            "title": ev["source_title"],
            "url": ev["canonical_url"] or ev["source_url"],
            "commit": ev["commit_sha"] or ev["fusion_commit"] or ev["source_commit"],
        },
        **(
            {"file": ev["fusion_file"], "line": ev["fusion_line"], "backend": ev["backend"], "ops": ev["ops"]}
            if ev["fusion_file"]
            else {}
        ),
        **({"sha": ev["commit_sha"], "subject": ev["commit_subject"]} if ev["commit_sha"] else {}),
    }


def provenance(db: sqlite_utils.Database, experiment_id: int) -> dict[str, Any]:
    """The chain of one experiment: winner commit, experiment, decision, patch, hypothesis, evidence
    (each with its source: URL, repo@sha, file:line) and free-form source refs, as JSON-ready data."""
    chain = _chain(db, experiment_id)
    exp, run, hyp, patch = chain.experiment, chain.run, chain.hypothesis, chain.patch
    winner = one(db, "SELECT * FROM winners WHERE experiment_id = ?", [experiment_id])
    d = chain.decision
    hid = hyp["id"] if hyp else None
    free = rows(db, "SELECT ref FROM hypothesis_sources WHERE hypothesis_id = ? ORDER BY rowid", [hid])
    return {
        "experiment": {
            "id": exp["id"],
            "title": exp["title"],
            "kind": exp["kind"],
            "status": exp["status"],
            "reason": exp["reason"],
            "run_id": run["id"],
            "run": run["name"],
            "wave": chain.wave["number"] if chain.wave else None,
            "baseline_commit": exp["baseline_commit"],
            "candidate_commit": exp["candidate_commit"],
            "log_dir": exp["log_dir"],
        },
        "decision": None
        if d is None
        else {
            "id": d["id"],
            "verdict": d["verdict"],
            "metric": d["metric"],
            "effect": d["effect"],
            "ci": [d["ci_low"], d["ci_high"]],
            "pairs": d["pairs"],
            "p_value": d["p_value"],
            "q_value": d["q_value"],
            "noise": d["noise"],
            "reason": d["reason"],
        },
        "winner": None
        if winner is None
        else {
            "id": winner["id"],
            "commit": winner["commit_sha"],
            "branch": run["branch"] or f"autoresearch/{run['name']}",
            "patch_file": winner["patch_file"],
            "position": winner["position"],
        },
        "patch": None
        if patch is None
        else {
            "id": patch["id"],
            "files": parse_json(patch["files"]) or [],
            "author_kind": patch["author_kind"],
            "author": patch["author"],
            "diff_sha": patch["diff_sha"],
            "llm_call_id": patch["llm_call_id"],
        },
        "hypothesis": None
        if hyp is None
        else {
            "id": hyp["id"],
            "title": hyp["title"],
            "rationale": hyp["rationale"],
            "origin": hyp["origin"],
            "status": hyp["status"],
            "llm_call_id": hyp["llm_call_id"],
        },
        "evidence": [_evidence_json(ev) for ev in _evidence_rows(db, hid)] if hid else [],
        "source_refs": [_resolve_ref(db, r["ref"]) for r in free],
        "sources": source_refs(db, hid),
    }


def experiment_for_commit(db: sqlite_utils.Database, sha: str) -> int:
    """The experiment a winner commit came from (a unique prefix of the sha is enough)."""
    if not re.fullmatch(r"[0-9a-fA-F]{4,40}", sha):
        raise UserError(f"{sha}: not a commit sha")
    found = rows(db, "SELECT experiment_id FROM winners WHERE commit_sha LIKE ?", [sha.lower() + "%"])
    if not found:
        raise UserError(f"{sha}: no winner commit with this sha")
    if len(found) > 1:
        raise UserError(f"{sha}: ambiguous, {len(found)} winner commits start with it")
    return int(found[0]["experiment_id"])


def led_to(
    db: sqlite_utils.Database,
    *,
    source_id: int | None = None,
    evidence_id: int | None = None,
    ref: str | None = None,
) -> dict[str, Any]:
    """The reverse walk: from a source, an evidence id or a free-form ref to the hypotheses,
    experiments and winners it led to. Exactly one of the three must be given."""
    if sum(x is not None for x in (source_id, evidence_id, ref)) != 1:
        raise UserError("led_to: give exactly one of source_id, evidence_id, ref")
    evidence_ids: list[int] = []
    refs: list[str] = []
    like: list[str] = []
    if evidence_id is not None:
        if not one(db, "SELECT id FROM evidence WHERE id = ?", [evidence_id]):
            raise UserError(f"evidence {evidence_id}: no such evidence id")
        evidence_ids = [evidence_id]
    elif source_id is not None:
        src = one(db, "SELECT * FROM sources WHERE id = ?", [source_id])
        if src is None:
            raise UserError(f"source {source_id}: no such source")
        evidence_ids = [r["id"] for r in rows(db, "SELECT id FROM evidence WHERE source_id = ?", [source_id])]
        refs = [u for u in (src["url"], src["canonical_url"]) if u]
        if src["kind"] == "fork" and src["name"]:
            like.append(f"fork:{src['name']}@%")
    else:
        assert ref is not None
        refs = [ref]
        resolved = _resolve_ref(db, ref)
        if resolved.get("evidence_id"):
            evidence_ids = [resolved["evidence_id"]]
    for eid in evidence_ids:
        refs.extend([f"gap:{eid}", f"passage:{eid}", f"evidence:{eid}"])

    hyp_ids: set[int] = set()
    if evidence_ids:
        marks = ", ".join("?" for _ in evidence_ids)
        hyp_ids |= {
            r["hypothesis_id"]
            for r in rows(
                db,
                f"SELECT hypothesis_id FROM hypothesis_evidence WHERE evidence_id IN ({marks})",
                evidence_ids,
            )
        }
    if refs:
        marks = ", ".join("?" for _ in refs)
        hyp_ids |= {
            r["hypothesis_id"]
            for r in rows(db, f"SELECT hypothesis_id FROM hypothesis_sources WHERE ref IN ({marks})", refs)
        }
    for pattern in like:
        hyp_ids |= {
            r["hypothesis_id"]
            for r in rows(db, "SELECT hypothesis_id FROM hypothesis_sources WHERE ref LIKE ?", [pattern])
        }
    if not hyp_ids:
        return {"hypotheses": [], "experiments": []}
    ordered = sorted(hyp_ids)
    marks = ", ".join("?" for _ in ordered)
    hypotheses = rows(
        db, f"SELECT id, title, status, origin FROM hypotheses WHERE id IN ({marks}) ORDER BY id", ordered
    )
    experiments = rows(
        db,
        f"""
        SELECT e.id, e.title, e.status, e.kind, e.run_id, r.name AS run,
               COALESCE(e.hypothesis_id, p.hypothesis_id) AS hypothesis_id,
               w.commit_sha AS winner_commit, w.patch_file AS winner_patch_file
        FROM experiments e
        JOIN runs r ON r.id = e.run_id
        LEFT JOIN patches p ON p.id = e.patch_id
        LEFT JOIN winners w ON w.experiment_id = e.id
        WHERE COALESCE(e.hypothesis_id, p.hypothesis_id) IN ({marks})
        ORDER BY e.id
        """,
        ordered,
    )
    for exp in experiments:
        d = _final_decision(db, exp["id"])
        exp["effect"] = d["effect"] if d else None
        exp["ci"] = [d["ci_low"], d["ci_high"]] if d else [None, None]
        exp["pairs"] = d["pairs"] if d else 0
    return {"hypotheses": hypotheses, "experiments": experiments}
