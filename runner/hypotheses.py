"""The hypothesis queue: typed access to hypotheses, their evidence and their patches.

Everything that adds to or steers the queue (the CLI's `queue add`, the miners, the LLM research
phase, the TUI through commands) goes through these functions, so statuses and provenance stay
consistent. Statuses are those of DESIGN.md: proposed -> approved | rejected; an approved
hypothesis without a patch goes to the patch writer -> patched | unpatchable; a fork commit that
conflicts with the baseline even with a three-way merge waits as `needs_port` until the patch writer
ports it (then it is `proposed`, like a mined commit that applies).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sqlite_utils

from kb.db import log_event, now, transaction
from kb.errors import UserError
from kb.patchnorm import normalized_sha
from kb.store import hypotheses as store
from kb.store.hypotheses import RunnablePatch
from kb.store.tables import HypothesisRow, PatchRow
from kb.vocabulary import HYPOTHESIS_STATUSES

HypothesisStatus = Literal["proposed", "approved", "rejected", "patched", "unpatchable", "needs_port"]
STATUSES: tuple[str, ...] = HYPOTHESIS_STATUSES
PatchAuthor = Literal["manual", "fork_commit", "llm"]

_DIFF_PATH = re.compile(r"^(?:\+\+\+|---) (?:[ab]/)?(.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Hypothesis:
    id: int
    title: str
    rationale: str
    status: str
    priority: float
    origin: str
    expected_effect: float | None
    risk: str | None
    created_at: float
    rank: float | None = None
    priority_set: bool = False
    """A person set the priority (it orders the queue before the rank)."""

    @classmethod
    def from_row(cls, row: HypothesisRow) -> Hypothesis:
        return cls(
            id=row["id"],
            title=row["title"],
            rationale=row["rationale"],
            status=row["status"],
            priority=row["priority"],
            origin=row["origin"],
            expected_effect=row["expected_effect"],
            risk=row["risk"],
            created_at=row["created_at"],
            rank=row["rank"],
            priority_set=bool(row["priority_set"]),
        )


def diff_files(diff: str) -> list[str]:
    """Paths a patch touches as git reads it (both sides of a rename), in order.

    Text git cannot read as a patch (a model's diff with miscounted hunks, before recount) falls back
    to the names its headers give: for display and shape checks only, since such a patch never
    applies. What the runner refuses is decided by runner/harness/patchpaths.py, from git alone."""
    from kb import gitrepo

    try:
        return gitrepo.patch_names(diff)
    except UserError:
        return header_names(diff)


def header_names(diff: str) -> list[str]:
    """The names a diff's `---`/`+++` and `diff --git` headers spell, without /dev/null."""
    seen: dict[str, None] = {}
    for path in _DIFF_PATH.findall(diff):
        if path != "/dev/null":
            seen.setdefault(path, None)
    for match in re.finditer(r"^diff --git a/(\S+) b/(\S+)$", diff, re.MULTILINE):
        seen.setdefault(match.group(1), None)
        seen.setdefault(match.group(2), None)
    return list(seen)


def add_hypothesis(
    db: sqlite_utils.Database,
    title: str,
    *,
    rationale: str = "",
    origin: str = "manual",
    status: HypothesisStatus = "proposed",
    priority: float = 0.0,
    expected_effect: float | None = None,
    risk: str | None = None,
    confidence: float | None = None,
    cost: float | None = None,
    dedupe_key: str | None = None,
    llm_call_id: int | None = None,
    evidence_ids: Iterable[int] = (),
    source_refs: Iterable[str] = (),
    wave_id: int | None = None,
) -> int | None:
    """Add a hypothesis with its evidence links. With a dedupe_key already present, adds nothing
    and returns None (miners re-run idempotently)."""
    if not title.strip():
        raise UserError("hypothesis title: must not be empty")
    with transaction(db):
        if dedupe_key is not None and store.by_dedupe_key(db, dedupe_key) is not None:
            return None
        stamp = now()
        hid = store.create(
            db,
            {
                "title": title.strip(),
                "rationale": rationale,
                "origin": origin,
                "status": status,
                "priority": priority,
                "expected_effect": expected_effect,
                "risk": risk,
                "confidence": confidence,
                "cost": cost,
                "dedupe_key": dedupe_key,
                "llm_call_id": llm_call_id,
                "wave_id": wave_id,
                "created_at": stamp,
                "updated_at": stamp,
            },
        )
        for evidence_id in evidence_ids:
            if not store.evidence_exists(db, evidence_id):
                raise UserError(f"evidence {evidence_id}: no such evidence id")
            store.link_evidence(db, hid, evidence_id)
        for ref in source_refs:
            store.link_source_ref(db, hid, ref)
    return hid


def add_patch(
    db: sqlite_utils.Database,
    hypothesis_id: int,
    diff: str,
    *,
    author_kind: PatchAuthor,
    author: str | None = None,
    llm_call_id: int | None = None,
    apply_status: str = "unchecked",
    apply_error: str | None = None,
    base_commit: str | None = None,
    repair_of: int | None = None,
    from_experiment: int | None = None,
) -> int:
    """Attach a unified diff to a hypothesis (which becomes `patched`). `base_commit` is the tree
    it was written against (the runner's three-way rebase starts there); `repair_of` and
    `from_experiment` link a repair or a port to the patch and the experiment it answers."""
    files = diff_files(diff)
    if not files:
        raise UserError(f"patch for hypothesis {hypothesis_id}: not a unified diff (no file headers)")
    with transaction(db):
        pid = store.create_patch(
            db,
            {
                "hypothesis_id": hypothesis_id,
                "diff": diff,
                "diff_sha": hashlib.sha256(diff.encode()).hexdigest(),
                "files": files,
                "author_kind": author_kind,
                "author": author,
                "llm_call_id": llm_call_id,
                "apply_status": apply_status,
                "apply_error": apply_error,
                "base_commit": base_commit,
                "repair_of": repair_of,
                "from_experiment": from_experiment,
                "norm_sha": normalized_sha(diff),
                "created_at": now(),
            },
        )
        hyp = get(db, hypothesis_id)
        # A patch moves an approved hypothesis on; a proposed one stays proposed until approved.
        if hyp.status in ("approved", "unpatchable"):
            set_status(db, hypothesis_id, "patched")
        elif hyp.status == "needs_port" and apply_status == "ok":
            set_status(db, hypothesis_id, "proposed")  # ported: as a fork commit that applies
    return pid


def get(db: sqlite_utils.Database, hypothesis_id: int) -> Hypothesis:
    row = store.stored(db, hypothesis_id)
    if row is None:
        raise UserError(f"hypothesis {hypothesis_id}: no such hypothesis")
    return Hypothesis.from_row(row)


def set_status(db: sqlite_utils.Database, hypothesis_id: int, status: HypothesisStatus) -> None:
    if status not in STATUSES:
        raise UserError(f"status {status!r}: must be one of {', '.join(STATUSES)}")
    get(db, hypothesis_id)
    store.update(db, hypothesis_id, {"status": status, "updated_at": now()})


def approval_status(db: sqlite_utils.Database, hypothesis_id: int) -> HypothesisStatus:
    """What approving a hypothesis makes it: `patched` when its latest patch applies, else `approved`
    (the runner takes both into its next wave)."""
    patch = latest_patch(db, hypothesis_id)
    return "patched" if patch is not None and patch["apply_status"] != "conflict" else "approved"


def approve_or_reject(db: sqlite_utils.Database, hypothesis_id: int, action: str, *, by: str) -> str:
    """A person's approve or reject, the one rule for the CLI, the console and the runner's commands:
    approving makes a hypothesis what `approval_status` says (so one whose patch conflicts is
    `approved`, left to the patch writer, never `patched`); rejecting makes it `rejected`. Logged
    with who asked (`by`); returns the new status. One transaction (a savepoint in the caller's)."""
    if action not in ("approve", "reject"):
        raise UserError(f"{action!r}: must be approve or reject")
    with transaction(db):
        hyp = get(db, hypothesis_id)
        new: HypothesisStatus = "rejected" if action == "reject" else approval_status(db, hypothesis_id)
        if hyp.status != new:
            set_status(db, hypothesis_id, new)
            log_event(db, f"hypothesis.{action}", f"hypothesis {hypothesis_id}: {hyp.status} -> {new} ({by})")
    return new


def set_priority(db: sqlite_utils.Database, hypothesis_id: int, priority: float) -> None:
    """A person's priority: above 0 the hypothesis goes before the ranked queue, at 0 or below after
    it (kb/store/queue.py)."""
    get(db, hypothesis_id)
    store.update(db, hypothesis_id, {"priority": priority, "priority_set": 1, "updated_at": now()})


def clear_priority(db: sqlite_utils.Database, hypothesis_id: int) -> None:
    """Drop a person's priority: the hypothesis goes back to its place by rank."""
    get(db, hypothesis_id)
    store.update(db, hypothesis_id, {"priority_set": 0, "updated_at": now()})


def stepped_priority(hyp: Hypothesis, delta: float) -> float:
    """The TUI's `+`/`-` on a hypothesis: a step from a person's priority, or for one no person set,
    a step from 0, so `+` puts it before the ranked queue and `-` after it."""
    start = (
        hyp.priority
        if hyp.priority_set
        else (max(hyp.priority, 0.0) if delta > 0 else min(hyp.priority, 0.0))
    )
    return round(start + delta, 6)


def latest_patch(db: sqlite_utils.Database, hypothesis_id: int) -> PatchRow | None:
    return store.latest_patch_row(db, hypothesis_id)


def runnable(
    db: sqlite_utils.Database, *, require_approval: bool, limit: int | None = None
) -> list[RunnablePatch]:
    """Patches ready for a wave, in the queue order (a person's priority first, then the rank, a
    family's leader before the members waiting behind it: kb/store/queue.py): the latest patch of
    each hypothesis that may run and has no finished or live experiment for that patch yet. A
    hypothesis waiting as `needs_port`, or marked a repeat of one measured before, never runs.
    `limit`: only the first so many (what a wave or a count needs)."""
    allowed: Sequence[str] = (
        ("approved", "patched") if require_approval else ("proposed", "approved", "patched")
    )
    return store.runnable(db, allowed, limit=limit)


def mark_repeat(db: sqlite_utils.Database, hypothesis_id: int, of: int, why: str) -> None:
    """An idea already measured here (novelty): it stays in the queue's history, never runs."""
    with transaction(db):
        store.update(db, hypothesis_id, {"repeat_of": of, "updated_at": now()})
        add_note(db, hypothesis_id, f"repeat of #{of}: {why}")
        log_event(db, "hypothesis.repeat", f"hypothesis {hypothesis_id}: a repeat of #{of} ({why})")


def mark_conflict(db: sqlite_utils.Database, patch_id: int, error: str) -> None:
    """A patch that no longer applies after a winner, even three-way: it waits for a port, and its
    hypothesis as `needs_port` (the patch writer ports it, as a fork commit's)."""
    with transaction(db):
        patch = store.patch_row(db, patch_id)
        if patch is None:
            raise UserError(f"patch {patch_id}: no such patch")
        store.update_patch(db, patch_id, {"apply_status": "conflict", "apply_error": error[:4000]})
        set_status(db, patch["hypothesis_id"], "needs_port")


def add_note(db: sqlite_utils.Database, hypothesis_id: int, text: str) -> None:
    """Append a line to a hypothesis's notes (why it is unpatchable, what was merged into it)."""
    hyp = store.stored(db, hypothesis_id)
    if hyp is None:
        raise UserError(f"hypothesis {hypothesis_id}: no such hypothesis")
    notes = f"{hyp['notes']}\n{text}" if hyp["notes"] else text
    store.update(db, hypothesis_id, {"notes": notes, "updated_at": now()})


def link_evidence(db: sqlite_utils.Database, hypothesis_id: int, evidence_ids: Iterable[int]) -> int:
    """Cite more evidence from an existing hypothesis; returns how many links were new."""
    get(db, hypothesis_id)
    added = 0
    with transaction(db):
        for evidence_id in evidence_ids:
            if not store.evidence_exists(db, evidence_id):
                raise UserError(f"evidence {evidence_id}: no such evidence id")
            added += store.link_evidence(db, hypothesis_id, evidence_id)
    return added


def evidence_of(db: sqlite_utils.Database, hypothesis_id: int) -> list[int]:
    return store.evidence_ids(db, hypothesis_id)


def details(db: sqlite_utils.Database, hypothesis_id: int) -> dict[str, Any]:
    """One hypothesis as `hypotheses show --json` prints it: its row, the evidence it cites with
    their sources, its free-form refs, its patches, its place and rank in the queue, its family."""
    from dataclasses import asdict

    from kb.store.queue import queue_row

    stored = store.stored(db, hypothesis_id)
    if stored is None:
        raise UserError(f"hypothesis {hypothesis_id}: no such hypothesis")
    family = stored["family"]
    row: dict[str, Any] = dict(stored)
    row["evidence"] = [asdict(e) for e in store.cited_sources(db, hypothesis_id)]
    row["sources"] = store.source_refs(db, hypothesis_id)
    row["patches"] = [asdict(p) for p in store.patches(db, hypothesis_id)]
    queued = queue_row(db, hypothesis_id)
    row["rank_why"] = queued.rank_why
    row["priority_set"] = queued.priority_set
    row["outcome"] = queued.outcome
    row["waits_behind"] = queued.waits_behind
    row["family_members"] = [asdict(m) for m in store.family(db, family)] if family is not None else []
    return row
