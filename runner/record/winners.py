"""Winners: a kept experiment becomes a commit on the run branch and a `.patch` file, with provenance.

`commit_winner()` writes the commit (its message and trailers from the chain's rows), exports the
patch and records the `winners` row. The chain itself, and the walks along it (`provenance()`,
`led_to()`), are runner.record.provenance's; the source refs in the trailers are
runner.record.sources'. The walks are re-exported here.
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
from kb.db import log_event, transaction
from kb.errors import UserError
from kb.jsoncol import decoded, decoded_dict
from kb.store import run_records
from kb.store import winners as winner_store
from kb.store.tables import WinnerRow
from kb.store.winners import NewWinner
from runner.harness.patchpaths import ProtectedPath, check_commit, protected_paths
from runner.record.model import FINISHED_STATUSES
from runner.record.provenance import Chain, gather_chain, keep_decision

# The walks live in runner/record/provenance.py; re-exported for the callers that know them from here.
from runner.record.provenance import experiment_for_commit as experiment_for_commit
from runner.record.provenance import led_to as led_to
from runner.record.provenance import provenance as provenance
from runner.record.sources import one_line, source_details, source_refs

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


def _result(chain: Chain) -> dict[str, Any]:
    d = chain.decision
    policy = decoded(d["policy"] if d else None) or decoded_dict(chain.run["policy"])

    def num(x: Any) -> float | None:
        return float(x) if isinstance(x, int | float) and math.isfinite(x) else None

    return {
        "metric": d["metric"] if d else None,
        "direction": policy.get("direction") if isinstance(policy, dict) else None,
        "effect": num(d["effect"]) if d else None,
        "ci": [num(d["ci_low"]), num(d["ci_high"])] if d else [None, None],
        "pairs": d["pairs"] if d else None,
        "p": num(d["p_value"]) if d else None,
        "q": num(d["q_value"]) if d else None,
        "noise": num(d["noise"]) if d else None,
        "metrics": (decoded(d["metrics"]) if d else None) or {},
    }


def _decided_at(chain: Chain) -> float | None:
    """When the chain's decision was recorded, if it has one (a winner's date)."""
    return chain.decision["created_at"] if chain.decision else None


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x:+.2%}"


def _measured_line(chain: Chain, result: dict[str, Any]) -> str:
    low, high = result["ci"]
    wave = f" wave {chain.wave['number']}" if chain.wave else ""
    noise = f", noise {result['noise']:.1%}" if result["noise"] is not None else ""
    return (
        f"Measured: {result['metric']} {_pct(result['effect'])} (CI {_pct(low)} .. {_pct(high)}), "
        f"{result['pairs']} pairs{noise}; run {chain.run['name']}{wave}"
    )


def _message(
    chain: Chain, parent: str, sources: list[str], details: list[str], result: dict[str, Any]
) -> str:
    exp, run, hyp = chain.experiment, chain.run, chain.hypothesis
    lines = [one_line(exp["title"]), ""]
    if hyp:
        lines.append(f"Hypothesis {hyp['id']}: {one_line(hyp['title'])}")
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
    lines.append(f"{TRAILER_RUN}: {one_line(run['name'])}")
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
    for sha, message in gitrepo.commit_messages(repo, base, head):
        trailers = gitrepo.parse_trailers(message)
        if (TRAILER_EXPERIMENT, str(experiment_id)) in trailers and (TRAILER_RUN, run_name) in trailers:
            return sha
    return None


def _position(repo: git.Repo, base: str | None, sha: str) -> int:
    """1-based order of a winner commit among the run branch's winner commits."""
    return sum(
        1
        for _, message in gitrepo.commit_messages(repo, base, sha)
        if any(key == TRAILER_EXPERIMENT for key, _ in gitrepo.parse_trailers(message))
    )


def _export_patch(ws: Workspace, repo: git.Repo, sha: str, title: str) -> Path:
    """Write `patches/NNNN-<slug>.patch` for a commit, or find the one written before."""
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


def _commit_env(chain: Chain) -> dict[str, str]:
    """Author, committer and date fixed by the decision, so the commit is reproducible."""
    stamp = _decided_at(chain) or chain.experiment["ended_at"] or chain.experiment["created_at"]
    date = f"@{int(stamp)} +0000"
    return gitrepo.identity_env(date)


def _record(
    ws: Workspace,
    row: WinnerRow,
    chain: Chain,
    sources: list[str],
    result: dict[str, Any],
    parent: str,
    created: bool,
) -> WinnerRecord:
    hyp = chain.hypothesis
    assert row["patch_file"] is not None  # commit_winner records every winner with its patch file
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
    chain = gather_chain(db, experiment_id, keep=True)
    exp, run = chain.experiment, chain.run
    sources = source_refs(db, chain.hypothesis["id"] if chain.hypothesis else None)
    result = _result(chain)
    repo = gitrepo.open_repo(ws.mirror_path)
    branch = run["branch"] or f"autoresearch/{run['name']}"
    base = run["baseline_commit"] or None

    existing = winner_store.of_experiment(db, experiment_id)
    if existing is not None:
        path = ws.root / existing["patch_file"] if existing["patch_file"] else None
        if path is None or not path.exists():
            path = _export_patch(ws, repo, existing["commit_sha"], exp["title"])
            with transaction(db):
                winner_store.set_patch_file(db, existing["id"], str(path.relative_to(ws.root)))
            existing["patch_file"] = str(path.relative_to(ws.root))
        parent = gitrepo.run(repo, "rev-parse", f"{existing['commit_sha']}^").strip()
        return _record(ws, existing, chain, sources, result, parent, created=False)

    if exp["kind"] != "candidate" or chain.patch is None:
        raise UserError(
            f"experiment {experiment_id}: a {exp['kind']} experiment without a patch cannot become a winner"
        )
    if exp["status"] in _NOT_KEPT or keep_decision(db, experiment_id) is None:
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
        existing = winner_store.of_experiment(db, experiment_id)
        if existing is None:
            new: NewWinner = {
                "run_id": run["id"],
                "experiment_id": experiment_id,
                "commit_sha": sha,
                "patch_file": str(path.relative_to(ws.root)),
                "position": position,
                "created_at": _decided_at(chain) or exp["created_at"],
            }
            row: WinnerRow = {**new, "id": winner_store.create(db, new)}
            head_now = gitrepo.branch_head(repo, branch)
            run_records.update(db, run["id"], {"head_commit": head_now, "branch": branch})
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
