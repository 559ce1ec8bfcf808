"""Miners that need no LLM: knowledge in the KB becomes hypotheses that cite it.

- Backend gaps: each inventory gap (ops fused in some backends, not in the target backend) becomes a
  hypothesis citing the gap row and the fusion rows of the backends that already have it.
- Fork commits: each fork-only commit that touches the target's paths of interest and is not upstream
  becomes a hypothesis whose patch is the commit's diff, checked against the baseline (`git apply
  --check`); a conflict is recorded on the patch (apply_status `conflict`, the error text), and the
  patch writer can rebase it when a model is configured.

Re-running adds nothing twice: every mined hypothesis has a dedupe key (`gap:<backend>:<ops>`,
`fork:<patch-id or sha>`), checked before any git work.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import sqlite_utils

from kb.db import log_event, one, rows, transaction
from runner.harness.prepare import protected_paths, refusal
from runner.hypotheses import add_hypothesis, add_patch, diff_files
from runner.research.priority import priority

if TYPE_CHECKING:
    from kb.workspace import Workspace

# A fusion saves one write and one re-read of the intermediate tensor per fused op; on a memory-bound
# path that is a few percent (the published llama.cpp run: RMS_NORM+MUL and softmax fusions).
GAP_EFFECT, GAP_CONFIDENCE, GAP_COST = 0.02, 0.6, 1.5
FORK_EFFECT, FORK_CONFIDENCE, FORK_COST, CONFLICT_COST = 0.02, 0.5, 1.0, 2.0
MAX_CLAIMED_EFFECT = 0.3
_CLAIM = re.compile(
    r"(\d+(?:\.\d+)?)\s*%\s*(?:faster|speed-?up|improvement|better|gain|more|higher|increase)"
    r"|(?:speed-?up|faster|improve\w*|gain)\D{0,20}?(\d+(?:\.\d+)?)\s*%",
    re.IGNORECASE,
)


@dataclass
class MineReport:
    gap_added: list[int] = field(default_factory=list)
    fork_added: list[int] = field(default_factory=list)
    conflicts: list[int] = field(default_factory=list)
    """Hypotheses whose fork patch does not apply to the baseline (patch apply_status `conflict`)."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Reason -> count: already_mined, not_missing_in_target, outside_paths_of_interest, upstreamed,
    already_in_baseline, protected_path, truncated_diff, empty_diff."""

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def merge(self, other: MineReport) -> MineReport:
        for reason, count in other.skipped.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + count
        self.gap_added += other.gap_added
        self.fork_added += other.fork_added
        self.conflicts += other.conflicts
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
    for gap in rows(db, "SELECT * FROM evidence WHERE kind = 'gap' ORDER BY id"):
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
        if one(db, "SELECT id FROM hypotheses WHERE dedupe_key = ?", [key]):
            report.skip("already_mined")
            continue
        fusions = rows(
            db,
            f"SELECT f.evidence_id, f.backend, f.file, f.line, f.kind FROM fusions f "
            f"WHERE f.ops = ? AND f.backend IN ({', '.join('?' for _ in present) or 'NULL'}) "
            "ORDER BY f.backend, f.evidence_id",
            [ops, *present],
        )
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


def claimed_effect(message: str) -> float | None:
    """A speed-up the commit message claims ("12% faster", "speedup of 5%"), capped; None if none."""
    claims = []
    for match in _CLAIM.finditer(message or ""):
        number = match.group(1) or match.group(2)
        if number:
            claims.append(float(number) / 100)
    if not claims:
        return None
    return min(max(claims), MAX_CLAIMED_EFFECT)


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
    report = MineReport()
    repo = None
    commits = rows(
        db,
        """
        SELECT e.id AS evidence_id, s.name AS fork, c.sha, c.subject, c.message, c.files, c.diff,
               c.diff_truncated, c.upstreamed, c.patch_id, c.insertions, c.deletions
        FROM commits c
        JOIN evidence e ON e.id = c.evidence_id
        JOIN sources s ON s.id = e.source_id
        WHERE s.kind = 'fork'
        ORDER BY e.id
        """,
    )
    for commit in commits:
        if commit["upstreamed"]:
            report.skip("upstreamed")
            continue
        key = f"fork:{commit['patch_id'] or commit['sha']}"
        if one(db, "SELECT id FROM hypotheses WHERE dedupe_key = ?", [key]):
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
        # The names git reads (diff_files): any spelling of a protected path is skipped here; what
        # only applying it shows (a symlink out of the tree) the runner refuses before it runs.
        if not queue_protected and refusal(files, protected):
            report.skip("protected_path")
            continue
        if repo is None:
            repo = gitrepo.open_repo(ws.mirror_path)
        error = gitrepo.apply_check(repo, baseline, diff)
        if error is not None and gitrepo.apply_check(repo, baseline, diff, reverse=True) is None:
            report.skip("already_in_baseline")  # upstream took it under another patch-id
            continue
        message = commit["message"] or commit["subject"]
        effect = claimed_effect(message) or FORK_EFFECT
        cost = FORK_COST if error is None else CONFLICT_COST
        rationale = (
            f"Fork {commit['fork']} commit {commit['sha'][:12]} changes {', '.join(files[:8])}"
            f"{' ...' if len(files) > 8 else ''} (+{commit['insertions']} -{commit['deletions']}) and is "
            f"not upstream. Its message:\n{message.strip()[:1500]}"
        )
        with transaction(db):
            hid = add_hypothesis(
                db,
                f"Port {commit['fork']}@{commit['sha'][:10]}: {commit['subject']}",
                rationale=rationale,
                origin="miner:fork",
                expected_effect=effect,
                confidence=FORK_CONFIDENCE,
                cost=cost,
                priority=priority(effect, FORK_CONFIDENCE, cost),
                risk=None if error is None else "does not apply to the baseline as is: needs a rebase",
                dedupe_key=key,
                evidence_ids=[commit["evidence_id"]],
                source_refs=[f"fork:{commit['fork']}@{commit['sha']}"],
            )
            if hid is None:
                continue
            add_patch(
                db,
                hid,
                diff,
                author_kind="fork_commit",
                author=commit["sha"],
                apply_status="ok" if error is None else "conflict",
                apply_error=error,
            )
        report.fork_added.append(hid)
        if error is not None:
            report.conflicts.append(hid)
    return report


def mine(ws: Workspace, db: sqlite_utils.Database, *, queue_protected: bool = False) -> MineReport:
    """Both miners; logs one event with what was added."""
    report = mine_gaps(ws, db).merge(mine_forks(ws, db, queue_protected=queue_protected))
    with transaction(db):
        log_event(
            db,
            "hypotheses.mine",
            f"mined {len(report.gap_added)} gap and {len(report.fork_added)} fork hypotheses "
            f"({len(report.conflicts)} fork patches conflict with the baseline)",
            data=report.to_json(),
        )
    return report
