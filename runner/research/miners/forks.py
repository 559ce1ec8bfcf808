"""The fork-commit miner: each fork-only commit that touches the target's paths of interest and is
not upstream becomes a hypothesis whose patch is the commit's diff, checked against the baseline
(`git apply --check`). One that does not apply is tried with a three-way merge whose base is the
commit's parent in the fork (kb.gitrepo.three_way): merged cleanly, the hypothesis gets the rebased
diff (author still the fork commit, a note says how); still conflicting, it waits as `needs_port`
(the patch apply_status `conflict`, the error text) until the patch writer ports it with a model.

Left out of mining (still browsable as fork commits, `kb commits`, the TUI's Knowledge pane): a
commit whose backend files are all another backend's and that changes no core, model or app code
(`hypotheses.skip_other_backends`), and one touching only `hypotheses.skip_areas` (docs, web UI,
server, build, CI by default), decided from the commit's recorded backends and areas. Its expected
effect is the gain its message claims for the primary metric (kb.commit_facts: a `pp` claim is no
claim about `tg`); then every hypothesis is ranked (runner/rank.py).

Re-running adds nothing twice: every mined hypothesis has a dedupe key (`fork:<patch-id or sha>`),
checked before any git work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlite_utils

from kb.commit_facts import (
    CAPPED_EFFECT,
    Claim,
    claims_from_json,
    commit_facts,
    expected_effect,
    metric_kind,
    parse_claims,
)
from kb.db import transaction
from kb.errors import UserError
from kb.jsoncol import decoded
from kb.store import hypotheses as hypothesis_store
from kb.store import research as store
from kb.store.research import ForkCommitFacts
from runner.harness.patchpaths import SYMLINK, check, check_commit
from runner.harness.prepare import protected_paths, refusal
from runner.hypotheses import add_hypothesis, add_note, add_patch, diff_files
from runner.research.miners.base import Mined
from runner.research.priority import priority

if TYPE_CHECKING:
    import git

    from kb.config import Settings
    from kb.gitrepo import ThreeWay
    from kb.inventory.layout import HistoryBackends
    from kb.workspace import Workspace

FORK_EFFECT, FORK_CONFIDENCE, FORK_COST, CONFLICT_COST = 0.02, 0.5, 1.0, 2.0
MAX_CLAIMED_EFFECT = CAPPED_EFFECT
NO_CORE_CODE = frozenset({"backend", "tests", "python", "docs", "build", "ci", "web", "server"})
"""Areas a commit may touch besides other backends' files and still be left out as theirs alone."""


class ForkMiner:
    name = "fork"
    label = "fork-commit"
    reasons = {
        "already_mined": "already a hypothesis (see `hypotheses list`)",
        "outside_paths_of_interest": "fork commits outside target.paths_of_interest (widen it in the config)",
        "upstreamed": "fork commits the target already has (same patch-id)",
        "already_in_baseline": "fork commits whose change the baseline already contains",
        "protected_path": "fork commits that touch a protected path (the benchmark, checks, target.protect)",
        "truncated_diff": "fork commits whose diff was cut at kb.max_commit_diff_bytes",
        "empty_diff": "fork commits with no diff (merges)",
        "not_target_backend": "fork commits that touch only other backends' files "
        "(hypotheses.skip_other_backends)",
        "skipped_area": "fork commits that touch only hypotheses.skip_areas "
        "(docs, web UI, server, build, ...)",
    }

    def mine(self, ws: Workspace, db: sqlite_utils.Database, *, queue_protected: bool = False) -> Mined:
        mined = mine_forks(ws, db, queue_protected=queue_protected)
        conflicts = mined.details["conflicts"]
        if conflicts:
            waiting = len(mined.details["needs_port"])
            mined.note = (
                f"{len(conflicts)} fork patches do not apply to the baseline as they are: "
                f"{len(mined.details['rebased'])} rebased by a three-way merge, {waiting} "
                f"{'waits' if waiting == 1 else 'wait'} as needs_port"
            )
        return mined


def _matches(path: str, prefixes: list[str]) -> bool:
    import fnmatch

    for prefix in prefixes:
        clean = prefix.rstrip("/")
        if path == clean or path.startswith(clean + "/") or fnmatch.fnmatch(path, prefix):
            return True
    return False


def claimed_effect(message: str, primary: str | None = None) -> float | None:
    """The gain of the primary metric (`pp`, `tg` or None: any) a commit message claims, capped; None
    if it claims none. The claim rule is kb.commit_facts's (parse_claims, expected_effect)."""
    return expected_effect(parse_claims(message or ""), primary)


def left_out(backends: list[str], areas: list[str], settings: Settings) -> tuple[str, str] | None:
    """(reason, what it touches) when a fork commit is not worth queueing for this target: its
    backend files are all other backends' and it changes no core, model or app code, or it touches
    only the areas `hypotheses.skip_areas` names. None: mine it."""
    target = settings.kb.inventory.target_backend
    if (
        settings.hypotheses.skip_other_backends
        and backends
        and target not in backends
        and set(areas) <= NO_CORE_CODE
    ):
        return "not_target_backend", "+".join(backends)
    skip = set(settings.hypotheses.skip_areas)
    if areas and set(areas) <= skip:
        return "skipped_area", "+".join(areas)
    return None


class _Facts:
    """A commit's recorded backends, areas and claims; computed with the baseline tree's backend
    rules for rows mined before they were recorded."""

    def __init__(self, ws: Workspace, repo: git.Repo, baseline: str) -> None:
        self.ws, self.repo, self.baseline = ws, repo, baseline
        self._rules: HistoryBackends | None = None

    def of(self, commit: ForkCommitFacts, files: list[str]) -> tuple[list[str], list[str], list[Claim]]:
        backends, areas = decoded(commit["backends"]), decoded(commit["areas"])
        if isinstance(backends, list) and isinstance(areas, list):
            claims = claims_from_json(commit["claims"])
            return [str(b) for b in backends], [str(a) for a in areas], claims
        if self._rules is None:
            from kb import gitrepo
            from kb.inventory.layout import HistoryBackends

            paths = gitrepo.list_files(self.repo, self.baseline)
            self._rules = HistoryBackends.for_paths(paths, self.ws.settings.kb.inventory)
        facts = commit_facts(files, commit["message"] or commit["subject"], self._rules)
        return facts.backends, facts.areas, facts.claims


CHUNK = 500
"""Fork commits checked against the baseline together (their diffs are held in memory meanwhile)."""


def mine_forks(ws: Workspace, db: sqlite_utils.Database, *, queue_protected: bool = False) -> Mined:
    """One hypothesis per fork-only commit in the paths of interest, its diff as the patch.

    A commit touching a protected path (the benchmark, the checks, ...) is skipped, or with
    `queue_protected` mined like the others so that the runner refuses it on the record (status
    `refused`, with the path): the demo shows that refusal."""
    from kb import gitrepo

    settings = ws.settings
    interest = settings.target.paths_of_interest
    protected = protected_paths(ws, settings)
    baseline = settings.target.baseline_commit or settings.target.baseline
    primary = metric_kind(settings.metric.primary)
    report = Mined(details={"conflicts": [], "rebased": [], "needs_port": []})
    repo = gitrepo.open_repo(ws.mirror_path)
    facts = _Facts(ws, repo, baseline)
    chunk: list[_Candidate] = []
    for commit in store.fork_commits(db):
        if commit["upstreamed"]:
            report.skip("upstreamed")
            continue
        key = f"fork:{commit['patch_id'] or commit['sha']}"
        if hypothesis_store.by_dedupe_key(db, key) is not None or any(c.key == key for c in chunk):
            report.skip("already_mined")
            continue
        diff = commit["diff"] or ""
        if commit["diff_truncated"]:
            report.skip("truncated_diff")
            continue
        files = diff_files(diff)
        if not files:
            report.skip("empty_diff")
            continue
        if interest and not any(_matches(path, interest) for path in files):
            report.skip("outside_paths_of_interest")
            continue
        backends, areas, claims = facts.of(commit, files)
        out = left_out(backends, areas, settings)
        if out is not None:
            report.leave_out(*out)
            continue
        # The names git reads (diff_files): any spelling of a protected path is skipped here, and
        # so is a symlink the commit adds onto one (or out of the tree), read from the commit itself.
        if not queue_protected and (
            refusal(files, protected) or _symlink_refusal(repo, commit["sha"], diff, protected, baseline)
        ):
            report.skip("protected_path")
            continue
        chunk.append(_Candidate(key, commit, files, diff, claims))
        if len(chunk) >= CHUNK:
            _check_and_add(db, repo, baseline, chunk, primary, report)
            chunk = []
    _check_and_add(db, repo, baseline, chunk, primary, report)
    return report


def _symlink_refusal(
    repo: git.Repo, sha: str, diff: str, protected: list[tuple[str, str]], baseline: str
) -> str | None:
    """Why a fork commit that adds or changes a symlink is refused (a link onto the benchmark, the
    checks, a protected path, or out of the tree), from the commit's own tree change: its names
    alone do not show where a link points. Only diffs holding a symlink's mode pay for git."""
    if SYMLINK not in diff:
        return None
    try:
        return check_commit(repo, f"{sha}^", sha, protected)
    except UserError:  # a root commit, or one the mirror lost: the diff onto the baseline instead
        try:
            return check(diff, protected, repo, baseline)
        except UserError:
            return None


@dataclass
class _Candidate:
    key: str
    commit: ForkCommitFacts
    files: list[str]
    diff: str
    claims: list[Claim]


def _check_and_add(
    db: sqlite_utils.Database,
    repo: git.Repo,
    baseline: str,
    chunk: list[_Candidate],
    primary: str | None,
    report: Mined,
) -> None:
    """Check a chunk of fork commits against the baseline (together: kb.gitrepo.apply_check_many),
    try a three-way merge for those that do not apply, and add their hypotheses."""
    from kb import gitrepo

    if not chunk:
        return
    errors = gitrepo.apply_check_many(repo, baseline, [(c.diff, c.files) for c in chunk])
    for c, error in zip(chunk, errors, strict=True):
        merged = None
        if error is not None:
            if gitrepo.apply_check(repo, baseline, c.diff, reverse=True) is None:
                report.skip("already_in_baseline")  # upstream took it under another patch-id
                continue
            merged = gitrepo.three_way(repo, baseline, c.diff, commit=c.commit["sha"])
            if merged.diff is None and "changes nothing" in merged.error:
                report.skip("already_in_baseline")
                continue
            if merged.diff is not None and gitrepo.apply_check(repo, baseline, merged.diff) is not None:
                merged = None  # a merge result that does not apply back is no rebase
        _add_fork_hypothesis(db, report, c.commit, c.files, c.diff, error, merged, c.claims, primary)


def _add_fork_hypothesis(
    db: sqlite_utils.Database,
    report: Mined,
    commit: ForkCommitFacts,
    files: list[str],
    diff: str,
    error: str | None,
    merged: ThreeWay | None,
    claims: list[Claim],
    primary: str | None,
) -> None:
    message = commit["message"] or commit["subject"]
    effect = expected_effect(claims, primary) or FORK_EFFECT
    rebased = merged is not None and merged.diff is not None
    conflict = error is not None and not rebased
    cost = CONFLICT_COST if conflict else FORK_COST
    rationale = (
        f"Fork {commit['fork']} commit {commit['sha'][:12]} changes {', '.join(files[:8])}"
        f"{' ...' if len(files) > 8 else ''} (+{commit['insertions']} -{commit['deletions']}) and is "
        f"not upstream. Its message:\n{message.strip()[:1500]}"
    )
    if conflict:
        risk: str | None = "does not apply to the baseline, even with a three-way merge: needs a port"
    elif rebased:
        risk = "rebased onto the baseline by a three-way merge: review the merged hunks"
    else:
        risk = None
    with transaction(db):
        hid = add_hypothesis(
            db,
            f"Port {commit['fork']}@{commit['sha'][:10]}: {commit['subject']}",
            rationale=rationale,
            origin="miner:fork",
            status="needs_port" if conflict else "proposed",
            expected_effect=effect,
            confidence=FORK_CONFIDENCE,
            cost=cost,
            priority=priority(effect, FORK_CONFIDENCE, cost),
            risk=risk,
            dedupe_key=f"fork:{commit['patch_id'] or commit['sha']}",
            evidence_ids=[commit["evidence_id"]],
            source_refs=[f"fork:{commit['fork']}@{commit['sha']}"],
        )
        if hid is None:
            return
        add_patch(
            db,
            hid,
            merged.diff if merged is not None and merged.diff is not None else diff,
            author_kind="fork_commit",
            author=commit["sha"],
            apply_status="conflict" if conflict else "ok",
            apply_error=_conflict_text(error, merged) if conflict else None,
        )
        if rebased:
            add_note(
                db,
                hid,
                f"rebased onto the baseline by a three-way merge (base: the fork parent of "
                f"{commit['sha'][:12]}); `git apply` alone failed: {(error or '').splitlines()[0][:200]}",
            )
    report.added.append(hid)
    if error is not None:
        report.details["conflicts"].append(hid)
        report.details["rebased" if rebased else "needs_port"].append(hid)


def _conflict_text(error: str | None, merged: ThreeWay | None) -> str:
    text = error or ""
    if merged is not None and merged.diff is None:
        where = f" in {', '.join(merged.conflicts[:8])}" if merged.conflicts else ""
        text += f"\nthree-way merge with the fork parent as base: conflicts{where}\n{merged.error[:2000]}"
    return text
