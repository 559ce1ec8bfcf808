"""One research phase of the autopilot: what the loop calls when it needs candidates.

In order, each step on its own (a failure is reported and the next step runs):
1. the miners refresh (new fork commits, gaps): idempotent, so a phase done again adds nothing twice;
2. with a model: repairs of this run's patches that did not apply, build or pass the checks (up to
   `autopilot.repairs` attempts a hypothesis, each linked to the one it repairs), ports of patches a
   winner made conflict, then new hypotheses from what the run has learnt (the results table, the
   directions that failed, the steering notes, the post-mortems, the knowledge base), then patches
   for those (and any hypothesis still waiting for one);
3. novelty: a runnable patch that makes the same change as one measured before in this workspace
   (kb/patchnorm.py) is marked a repeat and not run.

Every model call carries a step key (`run<R>:...`): a phase cut short by a kill is done again on
resume, and a call whose answer was stored is not made again (runner/llm.py). Hypotheses dedupe by
their key, so none is generated twice either. Without a model, only the miners run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kb import gitrepo
from kb.errors import UserError
from kb.jsoncol import decoded_dict
from kb.store import research as store
from kb.store.tables import ExperimentRow
from kb.textsafe import quoted
from kb.vocabulary import EXPERIMENT_FINAL
from runner.hypotheses import mark_repeat, runnable
from runner.research_io import ResearchReport, ResearchRequest

if TYPE_CHECKING:
    import sqlite_utils

    from kb.workspace import Workspace
    from runner.llm import LLMClient

RESULTS_SHOWN = 40
"""Rows of the results table in the research prompt (the newest)."""
EXCERPT_LINES = 40
"""The last lines of a failing build or check handed to the repair."""
EXCERPT_BYTES = 256 * 1024
"""The most of a step log's end read for that excerpt."""
REPAIRABLE: dict[tuple[str, str | None], str] = {
    ("crashed", "does_not_apply"): "does_not_apply",
    ("crashed", "build"): "build",
}


@dataclass(frozen=True)
class _Phase:
    """What every model step of a phase works with."""

    ws: Workspace
    db: sqlite_utils.Database
    client: LLMClient
    req: ResearchRequest
    head: str
    """The baseline the next wave measures against (the run branch's head)."""
    report: ResearchReport
    say: Callable[[str], None]

    def ready(self) -> int:
        """Candidates ready to run, counted up to what the phase wants."""
        return len(runnable(self.db, require_approval=self.req.require_approval, limit=self.req.want))


def research_phase(
    ws: Workspace, db: sqlite_utils.Database, req: ResearchRequest, *, queue_protected: bool = False
) -> ResearchReport:
    """`queue_protected`: the miners also queue fork commits that touch a protected path (for the
    runner to refuse on the record: the demo)."""
    report = ResearchReport()
    say = req.progress or (lambda _line: None)
    first_call = _last_call_id(db)
    if req.explore:
        _mine(ws, db, report, queue_protected=queue_protected)
    settings = ws.settings
    if req.model or settings.llm.model:
        from runner.llm import LLMError, client_for

        try:  # a bad model setting fails this phase's model steps, not what the miners found
            client = client_for(db, settings.llm, model=req.model, api_base=req.api_base, run_id=req.run_id)
            head = _run_head(ws, db, req.run_id)
        except (LLMError, UserError) as exc:
            report.failures.append(f"model: {exc}")
        else:
            phase = _Phase(ws, db, client, req, head, report, say)
            steps: tuple[Callable[[_Phase], None], ...] = (
                (_repairs, _ports, _generate, _patches) if req.explore else (_repairs, _ports)
            )
            for step in steps:
                if req.on_phase is not None:
                    req.on_phase("researching" if step is _generate else "patching")
                try:
                    step(phase)
                except (LLMError, UserError) as exc:  # BudgetExceeded too: the later steps need the model
                    report.failures.append(f"{step.__name__.strip('_')}: {exc}")
                    if type(exc).__name__ == "BudgetExceeded":
                        break
    report.repeats += _mark_repeats(db, req)
    calls = store.run_calls_after(db, req.run_id, first_call)
    report.call_ids = [call_id for call_id, _ in calls]
    report.cost_usd = sum(cost for _, cost in calls)
    return report


def _last_call_id(db: sqlite_utils.Database) -> int:
    return store.last_call_id(db)


def _run_head(ws: Workspace, db: sqlite_utils.Database, run_id: int) -> str:
    """The baseline the next wave measures against: the run branch's head (winners included)."""
    run = store.run_branch(db, run_id)
    if run is None:
        raise UserError(f"run {run_id}: no such run")
    repo = gitrepo.open_repo(ws.mirror_path)
    branch = run["branch"]
    head = gitrepo.branch_head(repo, branch) if branch is not None else None
    return head or str(run["baseline_commit"])


def _mine(ws: Workspace, db: sqlite_utils.Database, report: ResearchReport, *, queue_protected: bool) -> None:
    from runner.research.miners import mine

    try:
        mined = mine(ws, db, queue_protected=queue_protected)
    except UserError as exc:
        report.failures.append(f"miners: {exc}")
        return
    report.mined = len(mined.all_added)


# --- repairs and ports ------------------------------------------------------------------------------


def _attempts(db: sqlite_utils.Database, patch_id: int) -> int:
    """How many repairs led to this patch (the repair_of chain's length)."""
    depth, cursor = 0, patch_id
    while True:
        previous = store.repair_of(db, cursor)
        if previous is None:
            return depth
        depth, cursor = depth + 1, previous


def _tail(path: str | None, lines: int = EXCERPT_LINES, *, max_bytes: int = EXCERPT_BYTES) -> str:
    """The last `lines` lines of a step log, read from its last `max_bytes` only: the candidate's
    build log may be 64 MiB of one-byte lines."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - max_bytes))
            found = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    if size > max_bytes and found:
        found = found[1:]  # cut at the start
    return "\n".join(found[-lines:])


def failure_excerpt(exp: ExperimentRow, stage: str) -> str:
    """What the model needs to repair: git's apply error, the candidate's build log's last lines,
    or the checks' last lines (the step logs the runner split out of the batch log)."""

    meta = decoded_dict(exp["meta"])
    logs = meta.get("logs") or {}
    detail = str(meta.get("detail") or "")
    if stage == "does_not_apply":
        return detail
    wanted = ("build-B", "build-A") if stage == "build" else ("checks",)
    for name in wanted:
        text = _tail(logs.get(name))
        if text:
            return text
    batch = sorted(k for k in logs if k.startswith("batch-"))
    return _tail(logs[batch[-1]]) if batch else detail


def _repairable(
    db: sqlite_utils.Database, req: ResearchRequest
) -> list[tuple[store.RepairCandidate, int, int, str]]:
    """(experiment, its patch, its hypothesis, the stage that failed) of each candidate to repair."""
    found = []
    for exp in store.repairable(db, req.run_id):
        patch_id, hypothesis_id = exp["patch_id"], exp["hypothesis_id"]
        assert patch_id is not None and hypothesis_id is not None  # store.repairable joins on both
        stage = "checks" if exp["status"] == "checks_failed" else REPAIRABLE[(exp["status"], exp["reason"])]
        if _attempts(db, patch_id) < req.repairs:
            found.append((exp, patch_id, hypothesis_id, stage))
    return found


def _repairs(ph: _Phase) -> None:
    from runner.research.patch_writer import Repair, write_patch

    for exp, patch_id, hypothesis_id, stage in _repairable(ph.db, ph.req):
        repair = Repair(patch_id, exp["id"], stage, failure_excerpt(exp, stage))
        outcome = write_patch(
            ph.ws,
            ph.db,
            ph.client,
            hypothesis_id,
            baseline=ph.head,
            repair=repair,
            step=f"run{ph.req.run_id}:repair:e{exp['id']}",
        )
        if outcome.status == "patched":
            ph.report.repaired += 1
            ph.say(f"  repaired exp {exp['id']} ({stage}) as patch {outcome.patch_id}")
        else:
            ph.report.failures.append(f"repair of exp {exp['id']} ({stage}): {outcome.reason}")


def _ports(ph: _Phase) -> None:
    """Candidates a winner made conflict (the runner's `conflict`): the same change, ported onto
    the new baseline, as a new patch linked to the experiment."""
    from runner.research.patch_writer import write_patch

    for exp in store.conflicts_to_port(ph.db, ph.req.run_id):
        hypothesis_id = exp["hypothesis_id"]
        assert hypothesis_id is not None  # store.conflicts_to_port joins on it
        outcome = write_patch(
            ph.ws,
            ph.db,
            ph.client,
            hypothesis_id,
            baseline=ph.head,
            from_experiment=exp["id"],
            step=f"run{ph.req.run_id}:port:e{exp['id']}",
        )
        if outcome.status == "patched":
            ph.report.ported += 1
            ph.say(f"  ported exp {exp['id']} onto {ph.head[:12]} as patch {outcome.patch_id}")
        else:
            ph.report.failures.append(f"port of exp {exp['id']}: {outcome.reason or outcome.status}")


# --- new hypotheses ----------------------------------------------------------------------------------


def results_table(db: sqlite_utils.Database, limit: int = RESULTS_SHOWN) -> str:
    """Everything measured in this workspace (the newest `limit`): effect, interval, status, why."""

    found = store.results(db, limit)
    if not found:
        return "Results so far: nothing measured yet."
    lines = ["Results so far (hypothesis, experiment, status, effect [95% interval], why):"]
    for r in reversed(found):
        effect = (
            f"{r['effect']:+.1%} [{r['ci_low']:+.1%}, {r['ci_high']:+.1%}] over {r['pairs']} pairs"
            if r["effect"] is not None and r["ci_low"] is not None and r["ci_high"] is not None
            else "no effect measured"
        )
        detail = str((decoded_dict(r["meta"])).get("detail") or "")
        why = "; ".join(x for x in (r["reason"] or "", detail[:160]) if x)
        lines.append(
            f"  #{r['hypothesis_id']} exp {r['id']} {quoted(r['title'])}: {r['status']}, {effect}"
            + (f" ({why})" if why else "")
        )
    return "\n".join(lines)


def learnt(db: sqlite_utils.Database, req: ResearchRequest) -> str:
    parts = [results_table(db)]
    if req.avoid:
        parts.append("The engineer asks to avoid: " + "; ".join(req.avoid))
    parts.append(
        "Directions whose ideas were discarded or stayed within the noise floor are exhausted: say so "
        "in the rationale and change direction (e.g. from compute micro-tuning to cutting memory "
        "traffic when the post-mortems say the workload is memory-bound)."
    )
    return "\n\n".join(parts)


def _generate(ph: _Phase) -> None:
    from runner.hypotheses import set_status
    from runner.research.generate import generate

    req = ph.req
    if ph.ready() >= req.want:
        return  # the miners, repairs and ports found enough
    made = generate(
        ph.ws,
        ph.db,
        ph.client,
        n=min(20, max(2, 2 * req.want)),
        focus="; ".join(req.focus) or None,
        learnt=learnt(ph.db, req),
        step=f"run{req.run_id}:research{req.phase}",
        wave_id=req.last_wave_id,
    )
    ph.report.generated += len(made.added)
    ph.report.repeats += len(made.repeats)
    if not req.require_approval:
        for hid in made.added:  # the autopilot approves its own ideas unless a person must
            set_status(ph.db, hid, "approved")
    ph.say(
        f"  generated {len(made.added)} hypotheses"
        + (f" ({len(made.repeats)} repeats of ideas tried)" if made.repeats else "")
        + (f", {len(made.rejected)} rejected" if made.rejected else "")
    )


def _patches(ph: _Phase) -> None:
    """Patches for hypotheses waiting for one, in queue order, until enough candidates are ready
    (a queue of thousands of mined hypotheses is not patched in one phase)."""
    from runner.research.patch_writer import pending, write_patch

    waiting = pending(ph.db, ph.ws.settings, require_approval=ph.req.require_approval)
    for hid in waiting[: ph.req.want + 2]:
        if ph.ready() >= ph.req.want:
            return
        step = f"run{ph.req.run_id}:patch:h{hid}"
        outcome = write_patch(ph.ws, ph.db, ph.client, hid, baseline=ph.head, step=step)
        if outcome.status == "patched":
            ph.report.patched += 1
        elif outcome.status != "skipped":
            ph.report.failures.append(f"patch for #{hid}: {outcome.reason or outcome.status}")


# --- novelty -----------------------------------------------------------------------------------------


def _mark_repeats(db: sqlite_utils.Database, req: ResearchRequest) -> int:
    """Runnable patches that make a change measured before here are not run again."""
    measured = tuple(s for s in EXPERIMENT_FINAL if s not in ("cancelled", "lost"))
    count = 0
    for patch in runnable(db, require_approval=req.require_approval):
        if not patch["norm_sha"]:
            continue
        twin = store.measured_twin(db, patch["norm_sha"], patch["id"], measured)
        if twin is None:
            continue
        mark_repeat(
            db,
            int(patch["hypothesis_id"]),
            int(twin["hypothesis_id"]),
            f"patch {patch['id']} makes the change experiment {twin['experiment_id']} measured "
            f"({twin['status']})",
        )
        count += 1
    return count
