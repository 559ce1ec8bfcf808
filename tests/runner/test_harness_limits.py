"""What a hostile step can do to the machine, the runner and the time limits: real trees, real
processes, the harness's own sandbox (test_harness.py's run scripts). Every attack here is bounded
even without the fix it checks (a fork loop of 100)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.runner.runner_target import live_processes_under
from tests.runner.test_harness import prepared, run_steps

IS_ROOT = os.geteuid() == 0
HAS_PYTHON = shutil.which("python3") is not None

# Forks up to 100 children that sleep (they die with the step's PID namespace), says how many it got.
FORKS = """\
import os, time
n = 0
for _ in range(100):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print("forked", n, flush=True)
"""


@pytest.mark.skipif(not IS_ROOT or not HAS_PYTHON, reason="the uid method needs root; the probe python3")
@pytest.mark.parametrize("method", ["auto", "userns"])
def test_a_step_is_the_oom_killers_first_choice_and_forks_within_a_limit(tmp_path: Path, method: str) -> None:
    """A memory hog spread over many processes, each smaller than the runner, would have the kernel's
    OOM killer pick the runner: every process of a step scores 1000 and cannot lower it. Under the
    uid method a fork bomb stops at AUTORESEARCH_STEP_NPROC processes of the steps' user."""
    ws, workdir = prepared(tmp_path, sandbox={"method": method})
    step = (
        'echo "adj $(cat /proc/self/oom_score_adj)"\n'
        "echo 0 > /proc/self/oom_score_adj 2>/dev/null && echo LOWERED\n"
        f"python3 - <<'EOF'\n{FORKS}EOF\n"
    )
    out, parser = run_steps(ws, workdir, "true", step, AUTORESEARCH_STEP_NPROC="40")
    assert parser.state.isolation == f"{'uid' if method == 'auto' else 'userns'}+pid+mount", out
    assert "adj 1000" in out and "LOWERED" not in out, out
    forked = int(out.split("forked ", 1)[1].split()[0])
    if method == "auto":  # nobody's processes: this step's bash and python, and what they forked
        assert forked < 40, out
    else:  # a user namespace: the limit would count the runner's own user (not applied)
        assert forked == 100, out
    assert parser.state.status == "done", out
    assert live_processes_under(tmp_path) == []  # every child died with its step
