"""What a person or an agent submits to the queue: a hypothesis that cites its evidence, a patch.

The one path behind `autoresearch queue add`, `autoresearch hypotheses add` and the MCP server's
`queue_patch` and `add_hypothesis` tools, so they make the same checks and refuse in the same words:

- a patch is checked at once, not at the next run: one that touches a protected path is refused
  (runner/harness/patchpaths.py, the rule the runner applies before it builds), one git cannot read
  is refused, one that does not apply to the baseline is refused unless `unchecked`;
- the same change waiting in the queue twice is refused (kb/patchnorm.py);
- provenance refs are checked for shape and resolved against the knowledge base (runner/cite.py):
  `evidence:ID` and the like become evidence links, so the chain winner -> experiment -> patch ->
  hypothesis -> evidence -> source holds for a patch written by hand or by an agent.

`label` names the input in every refusal: the patch file for the CLI, `patch` or the worktree for an
agent; the words after it are the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from kb.config import MAX_INT
from kb.db import transaction
from kb.errors import UserError
from kb.store.hypotheses import SameChange
from kb.vocabulary import SOURCE_FORMS
from kb.workspace import Workspace
from runner.cite import Citation, resolve
from runner.hypotheses import add_hypothesis, add_patch, approve_or_reject, get


def check_source(ref: str) -> str:
    """One provenance ref as the user typed it, checked for shape (one-line error otherwise)."""
    ref = ref.strip()
    if re.fullmatch(r"(https?|file)://\S+", ref):
        return ref
    if re.fullmatch(r"fork:[\w.-]+@[0-9a-fA-F]{7,40}", ref):
        return ref
    if re.fullmatch(r"(gap|evidence|passage|paper):[0-9]+", ref):
        if int(ref.split(":", 1)[1]) > MAX_INT:
            raise UserError(f"--source {ref}: no such evidence id (ids are at most {MAX_INT})")
        return ref
    if ref.startswith("note:") and ref[5:].strip():
        return "note:" + " ".join(ref[5:].split())
    raise UserError(f"--source {ref!r}: must be {SOURCE_FORMS}")


def _cite(db: sqlite_utils.Database, sources: Iterable[str]) -> tuple[list[Citation], list[str], list[int]]:
    """The refs resolved (their checks' errors as they are), the refs to store, the evidence ids."""
    cited = [resolve(db, check_source(s)) for s in sources]
    refs = list(dict.fromkeys(c.ref for c in cited))
    evidence = list(dict.fromkeys(e for c in cited for e in c.evidence_ids))
    return cited, refs, evidence


def _same_change(db: sqlite_utils.Database, label: str, diff: str) -> SameChange | None:
    """Refuse a patch whose change waits in the queue already (a second `queue add` of the same
    file); the hypothesis that measured it before, if any (it is measured again: a note)."""
    from kb.patchnorm import normalized_sha
    from kb.store.hypotheses import same_change

    measured = None
    for twin in same_change(db, normalized_sha(diff)):
        if twin["status"] == "rejected":
            continue
        if twin["outcome"] in (None, "queued", "running", "lost"):
            raise UserError(
                f"{label}: the same change as hypothesis {twin['id']} ({twin['title']!r}), which is "
                f"still in the queue; nothing queued (`autoresearch hypotheses reject {twin['id']}` "
                "first to replace it)"
            )
        measured = measured or twin
    return measured


@dataclass(frozen=True)
class Queued:
    """A patch in the queue, with what it cites."""

    hypothesis: int
    patch: int
    title: str
    files: list[str]
    sources: list[str]
    evidence: list[int]
    applies: bool
    baseline: str
    """The baseline commit it was checked against."""
    measured_twin: SameChange | None = None
    cited: list[Citation] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """`queue add --json`."""
        return {
            "hypothesis": self.hypothesis,
            "patch": self.patch,
            "title": self.title,
            "files": self.files,
            "sources": self.sources,
            "evidence": self.evidence,
            "applies": self.applies,
            "measured_before": self.measured_twin["id"] if self.measured_twin else None,
        }


def queue_patch(
    ws: Workspace,
    diff: str,
    *,
    label: str,
    title: str | None = None,
    sources: Sequence[str] = (),
    rationale: str = "",
    priority: float = 0.0,
    unchecked: bool = False,
    hypothesis_id: int | None = None,
    origin: str = "manual",
    author: str | None = None,
    by: str = "cli",
) -> Queued:
    """Queue `diff` (a unified diff against the target) with a new hypothesis titled `title`, or for
    the existing `hypothesis_id` (which it approves, as queueing a patch of one's own does). Nothing
    is written when a check refuses it."""
    from kb import gitrepo
    from kb.store.hypotheses import patch as stored_patch
    from runner.harness.patchpaths import PatchUnreadable, baseline_of, workspace_check
    from runner.rank import rerank

    if hypothesis_id is None and title is None:
        raise UserError("--title: required (or --hypothesis ID, to queue it for an existing hypothesis)")
    if hypothesis_id is None and not (title or "").strip():
        raise UserError("--title: must not be empty")
    for ref in sources:
        check_source(ref)
    try:
        refused = workspace_check(ws, diff)
    except PatchUnreadable as exc:
        raise UserError(f"{label}: not a unified diff git can read ({exc})") from None
    if refused:
        raise UserError(f"{label}: refused: the patch {refused}")
    repo, base = baseline_of(ws)
    apply_error = gitrepo.apply_check(repo, base, diff)
    if apply_error is not None and not unchecked:
        why = apply_error.splitlines()[0]
        raise UserError(
            f"{label}: does not apply to the baseline {base[:12]} ({why}); "
            "rebase it, or queue it anyway with --unchecked"
        )
    db = ws.db()
    with transaction(db):
        cited, refs, evidence = _cite(db, sources)
        measured_twin = _same_change(db, label, diff)
        if hypothesis_id is None:
            title = " ".join((title or "").split())
            hid = add_hypothesis(
                db,
                title,
                rationale=rationale,
                origin=origin,
                status="approved",
                priority=priority,
                evidence_ids=evidence,
                source_refs=refs,
            )
            assert hid is not None
        else:
            hid, title = _existing(db, hypothesis_id, evidence, refs)
        try:
            pid = add_patch(
                db,
                hid,
                diff,
                author_kind="manual",
                author=author,
                # queued anyway with --unchecked: still runnable, the error kept for the record
                apply_status="ok" if apply_error is None else "unchecked",
                apply_error=apply_error,
            )
        except UserError as exc:
            raise UserError(f"{label}: {str(exc).split(': ', 1)[-1]}") from None
        if hypothesis_id is not None:
            approve_or_reject(db, hid, "approve", by=by)
        patch = stored_patch(db, pid)
    rerank(ws, db, ids=[hid])  # its place in the queue (runner/rank.py)
    return Queued(
        hid,
        pid,
        title,
        patch.files if patch else [],
        refs,
        evidence,
        apply_error is None,
        base,
        measured_twin,
        cited,
    )


def _existing(
    db: sqlite_utils.Database, hypothesis_id: int, evidence: list[int], refs: list[str]
) -> tuple[int, str]:
    """An existing hypothesis a patch is queued for, with the new citations linked to it."""
    from runner.hypotheses import link_evidence

    hyp = get(db, hypothesis_id)
    if hyp.status == "rejected":
        raise UserError(
            f"hypothesis {hypothesis_id}: rejected; nothing queued (`autoresearch hypotheses approve "
            f"{hypothesis_id}` first)"
        )
    link_evidence(db, hypothesis_id, evidence)
    from kb.store import hypotheses as store

    for ref in refs:
        store.link_source_ref(db, hypothesis_id, ref)
    return hyp.id, hyp.title


@dataclass(frozen=True)
class Proposed:
    """A hypothesis added by hand or by an agent, with what it cites."""

    hypothesis: int
    title: str
    status: str
    evidence: list[int]
    sources: list[str]
    cited: list[Citation] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "hypothesis": self.hypothesis,
            "title": self.title,
            "status": self.status,
            "evidence": self.evidence,
            "sources": self.sources,
        }


def propose(
    ws: Workspace,
    title: str,
    *,
    evidence_ids: Sequence[int] = (),
    sources: Sequence[str] = (),
    rationale: str = "",
    expected_effect: float | None = None,
    origin: str = "manual",
) -> Proposed:
    """Add a hypothesis (`proposed`) that cites at least one piece of evidence or source: an idea
    without a citation is not one this loop accepts (read the knowledge base first)."""
    if not title.strip():
        raise UserError("--title: must not be empty")
    if not evidence_ids and not sources:
        raise UserError(
            "a hypothesis must cite its evidence: give --evidence ID (autoresearch kb search finds it) "
            f"or --source ({SOURCE_FORMS})"
        )
    for ref in sources:
        check_source(ref)
    db = ws.db()
    with transaction(db):
        cited, refs, evidence = _cite(db, sources)
        evidence = list(dict.fromkeys([*evidence_ids, *evidence]))
        hid = add_hypothesis(
            db,
            " ".join(title.split()),
            rationale=rationale,
            origin=origin,
            status="proposed",
            expected_effect=expected_effect,
            evidence_ids=evidence,
            source_refs=refs,
        )
        assert hid is not None
    from runner.rank import rerank

    rerank(ws, db, ids=[hid])
    return Proposed(hid, " ".join(title.split()), "proposed", evidence, refs, cited)
