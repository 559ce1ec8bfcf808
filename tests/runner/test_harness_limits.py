"""What a hostile step can do to the machine, the runner, the time limits and the steps after it:
real trees, real processes, the harness's own sandbox (test_harness.py's run scripts). Every attack
here is bounded even without the fix it checks (a fork loop of 100, a tracer that gives up after a
minute)."""

from __future__ import annotations

import ctypes
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.runner.runner_target import live_processes_under
from tests.runner.sandbox_marks import methods
from tests.runner.test_harness import NONCE, RUN, prepared, run_steps, run_template

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


@pytest.mark.skipif(not HAS_PYTHON, reason="the probe is python3")
@pytest.mark.parametrize("method", methods())
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


# Seizes the step's PID 1 (the run script's `timeout`) with ptrace and holds it stopped, so that its
# alarm never fires: the step's own time limit no longer ends it.
TRACER = """\
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
seized = libc.ptrace(0x4206, 1, None, None) == 0 and libc.ptrace(0x4207, 1, None, None) == 0
print("tracer: PID 1", "held" if seized else "out of reach", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not HAS_PYTHON, reason="the tracer is python3")
def test_a_step_that_stops_its_own_timeout_is_ended_from_outside(tmp_path: Path) -> None:
    """The template's `timeout` runs inside the step (its PID 1), as the step's user: the step can
    ptrace it and hold it stopped. The harness ends the step from outside the sandbox too, a few
    seconds after its limit, so the job goes on (`timeout`) instead of hanging until its deadline."""
    ws, workdir = prepared(tmp_path)
    # The candidate's build (tree b) holds its timeout; the baseline's builds at once.
    build = f"if [ \"${{PWD##*/}}\" = b ]; then python3 - <<'EOF'\n{TRACER}EOF\nfi\n"
    started = time.monotonic()
    out, parser = run_template(ws, workdir, build, desc="tracer", limits=(1, 1, 1))
    took = time.monotonic() - started
    assert "\ntracer: PID 1 held\n" in out, out  # the attack itself works here
    assert parser.state.builds == {"A": 0, "B": 124}, out
    assert parser.state.status == "failed" and parser.state.reason == "timeout", out
    assert took < 40, (took, out)  # the tracer holds on for a minute
    assert live_processes_under(tmp_path) == []
    assert NONCE in out  # the log is the harness's (markers with the job's nonce)


# Kernel keyrings are no file: no mount hides them. `@s` is the session keyring, `@u` and `@us` the
# user's keyrings (one set per user: under the uid method, every step's).
KEYRINGS = "{'s': -3, 'u': -4, 'us': -5}"
ADD_KEYS = f"""\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, ring in {KEYRINGS}.items():
    libc.syscall(248, b"user", b"ar-" + name.encode(), b"left", 4, ring)
"""
FIND_KEYS = f"""\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, ring in {KEYRINGS}.items():
    for key in ("ar-" + name, "ar-harness"):
        if libc.syscall(250, 10, ring, b"user", key.encode(), 0) >= 0:
            print("FOUND", key, "in @" + name)
print("searched")
"""


@pytest.mark.skipif(not HAS_PYTHON, reason="the probe is python3")
@pytest.mark.parametrize("method", methods())
def test_no_key_a_step_leaves_in_a_keyring_reaches_the_next(tmp_path: Path, method: str) -> None:
    """The candidate's step adds keys to its session keyring and its user's keyrings; the baseline's
    step after it finds none of them, nor the key the harness's own session keyring holds (a login
    session's, say, that every step inherited)."""
    libc = ctypes.CDLL(None, use_errno=True)
    # This test process (and so the harness it starts) gets a session keyring holding a key.
    assert libc.syscall(250, 1, b"ar-test-session") >= 0, ctypes.get_errno()
    assert libc.syscall(248, b"user", b"ar-harness", b"secret", 6, -3) >= 0, ctypes.get_errno()
    ws, workdir = prepared(tmp_path, sandbox={"method": method})
    b_first = RUN.replace(
        'ar_step probe-A A bash -c "$STEP_A" < /dev/null; echo "rc A $?"\n'
        'ar_step probe-B B bash -c "$STEP_B" < /dev/null; echo "rc B $?"\n',
        'ar_step probe-B B bash -c "$STEP_B" < /dev/null; echo "rc B $?"\n'
        'ar_step probe-A A bash -c "$STEP_A" < /dev/null; echo "rc A $?"\n',
    )
    assert b_first != RUN
    leave = f"python3 - <<'EOF'\n{FIND_KEYS}EOF\npython3 - <<'EOF'\n{ADD_KEYS}EOF\n"
    find = f"python3 - <<'EOF'\n{FIND_KEYS}EOF\n"
    out, parser = run_steps(ws, workdir, find, leave, script=b_first)
    assert out.count("searched") == 2 and parser.state.status == "done", out
    assert "FOUND" not in out, out


@pytest.mark.skipif(not IS_ROOT, reason="the uid method needs root")
def test_the_trees_are_out_of_reach_of_the_steps_user_outside_the_steps() -> None:
    """Under the uid method both trees belong to `sandbox.user`. Any process of that user outside
    a step (a daemon running as nobody, a job a scheduler runs for it, one the candidate's step got
    started that way) could rewrite the baseline's tree between its steps: the folder holding the
    trees is closed to everyone but the harness."""
    import subprocess
    import tempfile

    # A folder every user may enter, as a workspace usually is (pytest's own is closed to others).
    root = Path(tempfile.mkdtemp(prefix="ar-open-"))
    try:
        root.chmod(0o755)
        ws, workdir = prepared(root)
        out, parser = run_steps(ws, workdir, "true", "true")
        assert parser.state.isolation == "uid+pid+mount" and parser.state.status == "done", out
        prog = workdir / "a" / "prog.c"
        assert prog.stat().st_uid != 0  # the steps' user owns the tree
        outside = subprocess.run(
            ["sh", "-c", f"echo 'int slow;' >> {prog} && echo WROTE"],
            user="nobody",
            capture_output=True,
            text=True,
        )
        assert "WROTE" not in outside.stdout, outside
        assert "int slow" not in prog.read_text()
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
