"""What a finished job means for its experiment (refused, crashed, checks_failed, or decide)."""

from __future__ import annotations

from runner.fleet import JobStatus
from runner.harness.protocol import Invocation, LogState
from runner.measure.common import Outcome


def tree_of(step: str) -> str:
    """The tree a step runs in: build-A and bench-3-A in A's; build-B, bench-3-B and the checks in B's."""
    return "B" if step == "checks" else step.rsplit("-", 1)[-1]


def tampered_reason(step: str, side: str, path: str) -> str:
    """The refusal's words for a TAMPERED marker: the path, the step, and the tree when it is not
    the step's own. Without isolation the harness also looks before each step: `after-<step>` is
    a change made between two steps, by a process the candidate left running."""
    when, step = ("after", step[len("after-") :]) if step.startswith("after-") else ("during", step)
    where = "" if tree_of(step) == side else f" (in tree {side})"  # the other tree's change is named
    return f"tampered: {path} changed {when} {step}{where}"


def failed_step(state: LogState) -> str | None:
    """Which step ended the job, and whose tree it ran in: a baseline step that fails inside a
    candidate's job is worth a look (without isolation, the candidate's processes reach it)."""
    failed = next((s for s in reversed(state.steps) if s.rc not in (None, 0)), None)
    if failed is None:
        return None
    side = tree_of(failed.name)
    whose = {"A": "the baseline's", "B": "the candidate's"}.get(side, "")
    said = f"{failed.name} exited {failed.rc}" + (f" ({whose} tree)" if whose else "")
    if side == "A" and (state.isolation or "none") == "none":
        said += "; without isolation the candidate's processes can reach that tree"
    return said


def classify(
    state: LogState, status: JobStatus, *, stopped: str | None, metric: str, sandbox_mode: str
) -> Outcome | None:
    """What a finished job means for its experiment: a final status, or Outcome(None) to decide
    from the samples; None: the job was lost (its batch runs again). A pure function of the job's
    parsed log, its end as the fleet saw it, why the runner stopped it (`stopped`: cancel, timeout,
    no_metric, stop), the primary metric and `sandbox.mode`."""
    # A forgery or a tampered protected path outweighs whatever else the job did.
    if state.violation:
        return Outcome("refused", f"forged: {state.violation}", "the job's markers cannot be trusted")
    if state.tampered:
        return Outcome("refused", tampered_reason(*state.tampered))
    if stopped == "timeout":
        return Outcome("crashed", "timeout", "the whole job ran past its deadline")
    if stopped == "no_metric" or no_metric(state.invocations, metric):
        return Outcome("crashed", "no_metric", f"a benchmark run printed no valid METRIC {metric}")
    if status.detail == "setup failed":
        return Outcome("crashed", "setup", f"the worker's setup exited {status.exit_code}")
    if unsandboxed(state, sandbox_mode):
        why = state.isolation_detail or "the job ran no harness"
        return Outcome("crashed", "setup", f"sandbox.mode = required: {why}")
    if state.status == "failed":
        reason = state.reason or "benchmark"
        if state.checks_rc is not None and state.checks_rc != 0:
            return Outcome(
                "checks_failed",
                "timeout" if reason == "timeout" else None,
                f"the checks exited {state.checks_rc}",
            )
        if reason in ("protected", "tampered"):
            return Outcome("refused", "tampered: a protected path differs from the baseline's")
        if reason not in ("build", "benchmark", "timeout"):
            reason = "benchmark"
        return Outcome("crashed", reason, failed_step(state) or f"exit {status.exit_code}")
    if state.status == "done" and status.state == "succeeded":
        return Outcome(None)
    if status.state == "lost":
        return None
    # Ended without the run script's final word: name the step it died in.
    phase = state.phase or "setup"
    reason = {"build": "build", "checks": "benchmark"}.get(phase, "benchmark")
    if phase == "checks":
        return Outcome("checks_failed", None, f"the job ended during the checks (exit {status.exit_code})")
    if phase == "setup":
        reason = "setup"
    return Outcome("crashed", reason, f"the job ended without a status (exit {status.exit_code})")


def unsandboxed(state: LogState, sandbox_mode: str) -> bool:
    """sandbox.mode = required, and this job ran (or would have run) its steps without isolation."""
    if sandbox_mode != "required":
        return False
    if state.status == "failed" and state.reason == "sandbox":
        return True
    return state.phase is not None and (state.isolation or "none") == "none"


def no_metric(found: list[Invocation], metric: str) -> bool:
    """A benchmark call that succeeded without printing the primary metric."""
    return any(inv.rc == 0 and not any(s.metric == metric for s in inv.samples) for inv in found)
