"""Miners that need no LLM: knowledge in the KB becomes hypotheses that cite it.

- Backend gaps: each inventory gap (ops fused in some backends, not in the target backend) becomes a
  hypothesis citing the gap row and the fusion rows of the backends that already have it.
- Fork commits: each fork-only commit that touches the target's paths of interest and is not upstream
  becomes a hypothesis whose patch is the commit's diff, checked against the baseline (`git apply
  --check`). One that does not apply is tried with a three-way merge whose base is the commit's
  parent in the fork (kb.gitrepo.three_way): merged cleanly, the hypothesis gets the rebased diff
  (author still the fork commit, a note says how); still conflicting, it waits as `needs_port` (the
  patch apply_status `conflict`, the error text) until the patch writer ports it with a model.
- Left out of mining (still browsable as fork commits, `kb commits`, the TUI's Knowledge pane): a
  commit whose backend files are all another backend's and that changes no core, model or app code
  (`hypotheses.skip_other_backends`), and one touching only `hypotheses.skip_areas` (docs, web UI,
  server, build, CI by default), decided from the commit's recorded backends and areas.
- Its expected effect is the gain its message claims for the primary metric (kb.commit_facts: a
  `pp` claim is no claim about `tg`); then every hypothesis is ranked (runner/rank.py).

Re-running adds nothing twice: every mined hypothesis has a dedupe key (`gap:<backend>:<ops>`,
`fork:<patch-id or sha>`), checked before any git work.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

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
from kb.db import log_event, transaction
from kb.errors import UserError
from kb.store import hypotheses as hypothesis_store
from kb.store import research as store
from kb.store.research import ForkCommitFacts
from runner.harness.patchpaths import SYMLINK, check, check_commit
from runner.harness.prepare import protected_paths, refusal
from runner.hypotheses import add_hypothesis, add_note, add_patch, diff_files
from runner.research.priority import priority

if TYPE_CHECKING:
    import git

    from kb.config import Settings
    from kb.gitrepo import ThreeWay
    from kb.inventory.layout import HistoryBackends
    from kb.workspace import Workspace

# A fusion saves one write and one re-read of the intermediate tensor per fused op; on a memory-bound
# path that is a few percent (the published llama.cpp run: RMS_NORM+MUL and softmax fusions).
GAP_EFFECT, GAP_CONFIDENCE, GAP_COST = 0.02, 0.6, 1.5
FORK_EFFECT, FORK_CONFIDENCE, FORK_COST, CONFLICT_COST = 0.02, 0.5, 1.0, 2.0
MAX_CLAIMED_EFFECT = CAPPED_EFFECT
NO_CORE_CODE = frozenset({"backend", "tests", "python", "docs", "build", "ci", "web", "server"})
"""Areas a commit may touch besides other backends' files and still be left out as theirs alone."""


@dataclass
class MineReport:
    gap_added: list[int] = field(default_factory=list)
    fork_added: list[int] = field(default_factory=list)
    conflicts: list[int] = field(default_factory=list)
    """Hypotheses whose fork patch does not apply to the baseline as it is."""
    rebased: list[int] = field(default_factory=list)
    """Of those, the ones a three-way merge rebased onto the baseline (their patch applies)."""
    needs_port: list[int] = field(default_factory=list)
    """Of those, the ones that still conflict: they wait as `needs_port`."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Reason -> count: already_mined, not_missing_in_target, outside_paths_of_interest, upstreamed,
    already_in_baseline, protected_path, truncated_diff, empty_diff, not_target_backend (only other
    backends' files), skipped_area (only `hypotheses.skip_areas`)."""
    left_out: dict[str, int] = field(default_factory=dict)
    """The commits not_target_backend and skipped_area left out, by what they touch (`cuda`,
    `docs+build`): browsable as fork commits, not queued."""
    ranked: dict[str, Any] = field(default_factory=dict)
    """What ranking the queue afterwards did (runner.rank.RankReport)."""

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def leave_out(self, reason: str, what: str) -> None:
        self.skip(reason)
        self.left_out[what] = self.left_out.get(what, 0) + 1

    def merge(self, other: MineReport) -> MineReport:
        for reason, count in other.skipped.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + count
        for what, count in other.left_out.items():
            self.left_out[what] = self.left_out.get(what, 0) + count
        self.gap_added += other.gap_added
        self.fork_added += other.fork_added
        self.conflicts += other.conflicts
        self.rebased += other.rebased
        self.needs_port += other.needs_port
        return self

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _ops_key(ops: Any) -> str:
    """Inventory ops as one key: a list ["RMS_NORM", "MUL"] or a string "RMS_NORM+MUL"."""
    if isinstance(ops, list | tuple):
        return "+".join(str(op) for op in ops)
    return str(ops or "").strip()


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return []


def mine_gaps(ws: Workspace, db: sqlite_utils.Database) -> MineReport:
    """One hypothesis per inventory gap missing in the target backend (kb.inventory.target_backend)."""
    target = ws.settings.kb.inventory.target_backend
    report = MineReport()
    for gap in store.gaps(db):
        meta = _json(gap["meta"]) or {}
        if not isinstance(meta, dict):
            meta = {}
        ops = _ops_key(meta.get("ops") or gap["title"])
        missing = _names(meta.get("missing"))
        present = _names(meta.get("present"))
        if not ops or target not in missing:
            report.skip("not_missing_in_target")
            continue
        key = f"gap:{target}:{ops}"
        if hypothesis_store.by_dedupe_key(db, key) is not None:
            report.skip("already_mined")
            continue
        fusions = store.fusions_in(db, ops, present)
        where = ", ".join(f"{f['backend']} ({f['file']}:{f['line']})" for f in fusions) or ", ".join(present)
        n_ops = max(len(ops.split("+")), 2)
        rationale = (
            f"{ops} is fused in {where} but not in the {target} backend. There the ops run as "
            f"{n_ops} separate passes, each writing an intermediate tensor that the next one reads "
            f"back; a fused kernel makes one pass over memory. The other backends' kernels show the "
            f"pattern and the graph condition under which it is safe to fuse (e.g. the intermediate "
            f"result has no other consumer)."
        )
        hid = add_hypothesis(
            db,
            f"Fuse {ops} in the {target} backend",
            rationale=rationale,
            origin="miner:gap",
            expected_effect=GAP_EFFECT,
            confidence=GAP_CONFIDENCE,
            cost=GAP_COST,
            priority=priority(GAP_EFFECT, GAP_CONFIDENCE, GAP_COST),
            risk="correctness: the fused path must match the unfused result within tolerance",
            dedupe_key=key,
            evidence_ids=[gap["id"], *(f["evidence_id"] for f in fusions)],
        )
        if hid is not None:
            report.gap_added.append(hid)
    return report


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
        backends, areas = _json(commit["backends"]), _json(commit["areas"])
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


def mine_forks(ws: Workspace, db: sqlite_utils.Database, *, queue_protected: bool = False) -> MineReport:
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
    report = MineReport()
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
    report: MineReport,
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
    report: MineReport,
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
    report.fork_added.append(hid)
    if error is not None:
        report.conflicts.append(hid)
        (report.rebased if rebased else report.needs_port).append(hid)


def _conflict_text(error: str | None, merged: ThreeWay | None) -> str:
    text = error or ""
    if merged is not None and merged.diff is None:
        where = f" in {', '.join(merged.conflicts[:8])}" if merged.conflicts else ""
        text += f"\nthree-way merge with the fork parent as base: conflicts{where}\n{merged.error[:2000]}"
    return text


def mine(ws: Workspace, db: sqlite_utils.Database, *, queue_protected: bool = False) -> MineReport:
    """Both miners, then the whole queue ranked; logs one event with what was added."""
    from runner.rank import rerank

    report = mine_gaps(ws, db).merge(mine_forks(ws, db, queue_protected=queue_protected))
    if report.gap_added or report.fork_added:
        report.ranked = rerank(ws, db).to_json()
    with transaction(db):
        log_event(
            db,
            "hypotheses.mine",
            f"mined {len(report.gap_added)} gap and {len(report.fork_added)} fork hypotheses "
            f"({len(report.conflicts)} fork patches do not apply as they are: {len(report.rebased)} "
            f"rebased by a three-way merge, {len(report.needs_port)} need a port)",
            data=report.to_json(),
        )
    return report
