"""Whole runs with hostile candidates on the local fleet: real builds, real processes, real git.

Each wave holds candidates whose build runs hostile code (tests/runner/attacks.py: rewrite the
benchmark, forge markers with a nonce read from /proc, write the database and the logs, replace
the baseline's binary, leave a daemon behind, edit the runner's own code) and one honest speedup.
The first look is the only look (min_pairs = batch_pairs = max_pairs = 16), as in the reported
+999999900% keep. With the sandbox none of them is kept and the honest patch is; without it
(sandbox.mode = off) the hash checks and the marker checks refuse them and name why.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import runner.stats
from kb import gitrepo
from kb.db import one, rows
from kb.workspace import Workspace
from runner.measure.common import RunSummary
from runner.measure.jobs import MAX_JOB_WARNINGS
from runner.measure.run import RunOptions, start_run
from tests.runner.attacks import RUNTIME, runner_code_attack, runtime_diff
from tests.runner.runner_target import ITERS, git, live_processes_under, make_diff, make_workspace, must
from tests.runner.sandbox_marks import methods_and_isolation

# alpha 0.01: the wave holds up to nine no-ops whose attack the sandbox stopped; at 0.05 one of them
# came out kept now and then on a loaded machine (false keeps stay below alpha / 2 each).
ONE_LOOK = {"min_pairs": 16, "batch_pairs": 16, "max_pairs": 16, "min_effect": 0.05, "alpha": 0.01}
IS_ROOT = os.geteuid() == 0
RUNNER_FILE = Path(runner.stats.__file__)


def measure(
    ws: Workspace, candidates: list[tuple[str, str]], *, title: str = "{}"
) -> tuple[dict[str, dict[str, Any]], list[str], RunSummary]:
    """Queue each (name, diff) as an approved hypothesis, first one first, and run them (no
    self-test, no final stage): name -> experiment row, the run's progress lines, its summary."""
    from runner.hypotheses import add_hypothesis, add_patch

    db = ws.db()
    ids: dict[str, int] = {}
    for i, (name, diff) in enumerate(candidates):
        hid = add_hypothesis(db, title.format(name), status="approved", priority=100 - i)
        assert hid is not None
        ids[name] = add_patch(db, hid, diff, author_kind="manual", author=f"{name}.patch")
    lines: list[str] = []
    summary = start_run(ws, RunOptions(self_test=False, final=False), progress=lines.append).execute()
    exps = {n: must(one(db, "SELECT * FROM experiments WHERE patch_id = ?", [p])) for n, p in ids.items()}
    return exps, lines, summary


def run_wave(
    tmp_path: Path, attacks: dict[str, str], **overrides: Any
) -> tuple[Workspace, dict[str, dict[str, Any]], list[str]]:
    """One wave: the honest speedup and the attacks; name -> experiment row."""
    # One worker: two CPU-bound batches side by side on a 2-core machine interfere in step with each
    # other, and a no-op then comes out "kept" now and then (seen in 1 of 4 to 2 of 3 waves here).
    # This test is about what a candidate can reach, not about measuring under contention.
    fleet = {"wave_size": 16, "parallel": 1, **overrides.pop("fleet", {})}
    ws, target = make_workspace(tmp_path, policy=ONE_LOOK, fleet=fleet, **overrides)
    candidates = [("honest", make_diff(target, "speedup"))]
    candidates += [(n, runtime_diff(target, script)) for n, script in attacks.items()]
    exps, lines, summary = measure(ws, candidates, title="Candidate {}")
    assert summary.status == "finished", lines
    return ws, exps, lines


def log_of(exp: dict[str, Any]) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(Path(exp["log_dir"]).glob("batch-*.log")))


def assert_branch_carries_only_the_honest_change(ws: Workspace) -> None:
    db = ws.db()
    run = must(one(db, "SELECT * FROM runs ORDER BY id DESC LIMIT 1"))
    repo = gitrepo.open_repo(ws.mirror_path)
    changed = gitrepo.diff_trees(repo, run["baseline_commit"], f"refs/heads/{run['branch']}")
    assert [c.path for c in changed] == ["prog.c"]
    exported = sorted(ws.patches_dir.glob("*.patch"))
    assert [gitrepo.patch_names(p.read_text()) for p in exported] == [["prog.c"]]


def cli(ws: Workspace, *args: str) -> str:
    from click.testing import CliRunner

    from tui.cli import main

    result = CliRunner().invoke(main, ["--workspace", str(ws.root), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def wait_until_gone(root: Path, seconds: float = 20) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := live_processes_under(root)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.slow
@pytest.mark.parametrize(("method", "isolation"), methods_and_isolation())
def test_in_the_sandbox_no_attack_is_kept_and_the_honest_patch_is(
    tmp_path: Path, method: str, isolation: str
) -> None:
    before = hashlib.sha256(RUNNER_FILE.read_bytes()).hexdigest()
    attacks = {**RUNTIME, "runner_code": runner_code_attack(RUNNER_FILE)}
    ws, exps, lines = run_wave(tmp_path, attacks, sandbox={"method": method})
    assert exps["honest"]["status"] == "kept", lines
    for name in attacks:
        assert exps[name]["status"] in ("discarded", "inconclusive"), (name, exps[name], lines)
    for name, exp in exps.items():
        assert json.loads(exp["meta"])["isolation"] == isolation, name
    logs = {name: log_of(exp) for name, exp in exps.items()}
    assert "evil: autoresearch.sh is read-only" in logs["rewrite_bench"]
    assert "evil: nonce=unknown log=unknown" in logs["forge_proc"]
    assert "evil: no database" in logs["workspace"] and "evil: wrote" not in logs["workspace"]
    assert "evil: the baseline tree is out of reach" in logs["baseline_tree"]
    assert "evil: the runner is out of reach" in logs["runner_code"]
    # The forged lines reached the log escaped, as warnings, never as samples: BEGIN and END of both
    # sides of 80 pairs, of which the first MAX_JOB_WARNINGS are listed one by one, then one event
    # says the rest are not.
    db = ws.db()
    forged = rows(
        db,
        "SELECT * FROM events WHERE kind = 'forged_marker' AND experiment_id = ?",
        [exps["forge_proc"]["id"]],
    )
    assert MAX_JOB_WARNINGS < 80 * 2 * 2 and len(forged) == MAX_JOB_WARNINGS
    more = rows(
        db,
        "SELECT * FROM events WHERE kind = 'forged_marker_more' AND experiment_id = ?",
        [exps["forge_proc"]["id"]],
    )
    assert len(more) == 1 and "are not listed one by one" in more[0]["message"]
    pairs = must(
        one(db, "SELECT max(pair) AS top FROM samples WHERE experiment_id = ?", [exps["forge_proc"]["id"]])
    )
    assert pairs["top"] == 15
    assert not rows(db, "SELECT id FROM hypotheses WHERE title = 'pwned'")
    assert hashlib.sha256(RUNNER_FILE.read_bytes()).hexdigest() == before
    assert wait_until_gone(ws.root) == []  # the daemon died with its build step
    assert_branch_carries_only_the_honest_change(ws)
    # The isolation is on the record: history and the report say it.
    name = str(must(one(db, "SELECT name FROM runs"))["name"])
    shown = cli(ws, "history", "--run", name)
    assert f"  isolation {isolation} ({len(exps)})" in shown, shown
    report = ws.root / "report.md"
    cli(ws, "report", name, "--format", "md", "--output", str(report))
    assert (
        f"Isolation of the build, benchmark and checks steps: {isolation} ({len(exps)})."
        in report.read_text()
    )


@pytest.mark.slow
def test_without_a_sandbox_tampering_and_forgery_are_refused_and_named(tmp_path: Path) -> None:
    attacks = {name: RUNTIME[name] for name in ("rewrite_bench", "forge_proc", "baseline_tree", "daemon")}
    ws, exps, lines = run_wave(tmp_path, attacks, sandbox={"mode": "off"}, fleet={"parallel": 1})
    try:
        assert exps["honest"]["status"] == "kept", lines
        reasons = {name: (exps[name]["status"], exps[name]["reason"]) for name in attacks}
        assert reasons["rewrite_bench"] == ("refused", "tampered: autoresearch.sh changed during build-B")
        assert reasons["baseline_tree"] == ("refused", "tampered: prog changed during build-B (in tree A)")
        status, reason = reasons["forge_proc"]
        assert status == "refused" and reason.startswith("forged: log line "), reasons
        assert "evil: forged into the log" in log_of(exps["forge_proc"])  # the forgery did reach the log
        status, reason = reasons["daemon"]
        if status == "refused":  # caught at the first step boundary after its change
            assert reason.startswith("tampered: prog changed "), reasons
            # Named for the step it followed: a B step (then the tree is named), or an A step when
            # an earlier write landed while the baseline's own step ran (taken for its own, as below).
            assert reason.endswith("(in tree A)") or re.search(r"after bench-\d+-A$", reason), reason
        else:
            # Its write landed while the baseline's own benchmark ran (without isolation the harness
            # cannot tell that change from the baseline's own) and broke it: the job is named for
            # the baseline's failed step, and nothing of it is judged.
            assert (status, reason) == ("crashed", "benchmark"), reasons
            detail = json.loads(exps["daemon"]["meta"])["detail"]
            assert "-A exited " in detail and "(the baseline's tree)" in detail, detail
            assert "without isolation the candidate's processes can reach that tree" in detail
        for name, exp in exps.items():
            meta = json.loads(exp["meta"])
            assert meta["isolation"] == "none" and meta["isolation_detail"] == "sandbox.mode = off", name
        db = ws.db()
        # The forged experiment keeps no sample and no decision: nothing of it can be judged again.
        forged = exps["forge_proc"]["id"]
        assert not rows(db, "SELECT id FROM samples WHERE experiment_id = ?", [forged])
        assert not rows(db, "SELECT id FROM decisions WHERE experiment_id = ?", [forged])
        assert_branch_carries_only_the_honest_change(ws)
    finally:
        wait_until_gone(ws.root)


@pytest.mark.slow
@pytest.mark.parametrize("guard", [False, True])
def test_a_binary_that_fakes_its_clock_and_the_wall_clock_guard(tmp_path: Path, guard: bool) -> None:
    """The benchmarked binary is the candidate's and times itself: one that reports ten times its
    speed is kept (the limit the README's threat model names), unless the benchmark runs fixed work
    and `metric.wall_clock_guard` asks the harness's own clock to confirm the win."""
    # Four times the usual work, so that the harness's own cost per invocation (a few ms, more on a
    # loaded machine) does not hide the honest speedup from the wall clock.
    ws, target = make_workspace(
        tmp_path, iters=4 * ITERS, policy=ONE_LOOK, fleet={"wave_size": 4}, metric={"wall_clock_guard": guard}
    )
    db = ws.db()
    exps, lines, _ = measure(ws, [(name, make_diff(target, name)) for name in ["speedup", "fake_clock"]])
    assert exps["speedup"]["status"] == "kept", lines
    fake = exps["fake_clock"]
    decision = must(one(db, "SELECT * FROM decisions WHERE experiment_id = ? AND is_final = 1", [fake["id"]]))
    wall = json.loads(decision["metrics"])["harness.wall_s"]
    # The harness's clock, recorded next to the decision: the fake one ran no faster.
    assert wall["pairs"] == 16 and wall["ratio"] > 0.75, wall  # no faster (slower is the load's)
    honest = must(
        one(db, "SELECT * FROM decisions WHERE experiment_id = ? AND is_final = 1", [exps["speedup"]["id"]])
    )
    # The honest speedup shows on the wall clock too (with room for the harness's cost under load).
    assert json.loads(honest["metrics"])["harness.wall_s"]["ratio"] < 0.8
    if guard:
        assert fake["status"] == "inconclusive", lines
        assert decision["reason"].startswith("the harness's wall clock does not confirm it"), decision[
            "reason"
        ]
    else:
        assert fake["status"] == "kept", lines


GUARDED_BENCH = """\
#!/usr/bin/env bash
set -euo pipefail
out=$(./prog)
printf '%s\\n' "$out" | sed -n 's/^throughput=/METRIC throughput=/p; s/^speed=/METRIC speed=/p'
"""
SPEED_LINE = '    printf("speed=%.4f\\n", 1.0 / (t1 - t0));\n'


@pytest.mark.slow
def test_a_candidate_that_leaves_out_a_guard_metric_is_not_kept(tmp_path: Path) -> None:
    """The binary is the candidate's: one that no longer prints a guarded metric (its benchmark
    script, protected, finds nothing to report) gave the guard nothing to veto with. The same
    speedup that still prints it is kept; the one that leaves it out is inconclusive."""
    from kb.init import TargetSpec, create_workspace
    from tests.runner.runner_target import git, make_target, workspace_settings

    target = make_target(tmp_path / "target", bench=GUARDED_BENCH)
    prog = target / "prog.c"
    anchor = '    printf("throughput=%.4f\\n", 1.0 / (t1 - t0));\n'
    prog.write_text(prog.read_text().replace(anchor, anchor + SPEED_LINE))
    git(target, "commit", "-q", "-am", "print the speed too")
    guards = [{"metric": "speed", "max_regression": 0.02}]
    ws = create_workspace(
        tmp_path / "ws",
        TargetSpec(
            location=str(target),
            extra=workspace_settings(policy=ONE_LOOK, fleet={"wave_size": 4}, metric={"guards": guards}),
        ),
    )
    speedup = make_diff(target, "speedup")
    original = prog.read_text()
    prog.write_text(original.replace("    return 9 * n_iter;\n", "    return 0;\n").replace(SPEED_LINE, ""))
    try:
        silent = git(target, "diff")
    finally:
        prog.write_text(original)
    db = ws.db()
    exps, lines, _ = measure(ws, [("speedup", speedup), ("silent", silent)])
    assert exps["speedup"]["status"] == "kept", lines
    silent_exp = exps["silent"]
    assert silent_exp["status"] == "inconclusive", (silent_exp, lines)
    decision = must(
        one(db, "SELECT * FROM decisions WHERE experiment_id = ? AND is_final = 1", [silent_exp["id"]])
    )
    assert decision["reason"].startswith("guard speed: measured on 0 of the 16 pairs"), decision["reason"]


@pytest.mark.slow
@pytest.mark.skipif(not IS_ROOT, reason="a small file system of its own (tmpfs) needs root")
def test_a_candidate_that_fills_the_disk_is_crashed_and_the_run_goes_on(tmp_path: Path) -> None:
    """The trees share the workspace's file system with the database and the logs: a build that
    writes until the disk is full made the runner's next write fail (`database or disk is full`),
    and the run stopped, again on every resume. Now the runner stops the job, removes its trees
    and ends it `crashed`; the honest speedup after it is kept."""
    import subprocess

    from tests.runner.attacks import _staged_diff

    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(small)], check=True)
    try:
        ws, target = make_workspace(small, policy=ONE_LOOK, fleet={"parallel": 1, "wave_size": 2})
        fill = _staged_diff(
            target,
            "printf 'fill:\\n\\t-@dd if=/dev/zero of=big bs=1M 2>&1 | tail -n 1\\n' >> Makefile"
            " && sed -i 's/^prog: prog.c$/prog: prog.c fill/' Makefile",
        )
        exps, lines, summary = measure(ws, [("fill", fill), ("honest", make_diff(target, "speedup"))])
        assert summary.status == "finished", lines
        assert (exps["fill"]["status"], exps["fill"]["reason"]) == ("crashed", "build"), lines
        assert "the disk filled up while it ran" in json.loads(exps["fill"]["meta"])["detail"]
        assert exps["honest"]["status"] == "kept", lines
        assert not (ws.worktrees_dir / f"run{summary.run_id}" / f"exp{exps['fill']['id']}").exists()
    finally:
        wait_until_gone(small)
        subprocess.run(["umount", "-l", str(small)], check=False)


@pytest.mark.slow
def test_a_candidate_printing_zero_does_not_crash_its_wave_mates(tmp_path: Path) -> None:
    """A value of 0 has no log ratio: the experiment that printed it ends `crashed`. The wave is
    judged as one (false discoveries across it), and an honest experiment decided while that one
    still ran was crashed with it. The zero here prints its first zeros at once, then from pair 2
    on waits (at most a second an invocation) for a gate file the test puts in its tree once the
    honest experiment is decided; the two workers do not take turns (no machine lock): the honest
    batch is decided while the zero's first pairs are stored and its job runs on."""
    fleet = {"parallel": 2, "wave_size": 2, "exclusive_pairs": False}
    ws, target = make_workspace(tmp_path, policy=ONE_LOOK, fleet=fleet)
    prog = target / "prog.c"
    original = prog.read_text()
    line = 'printf("throughput=%.4f\\n", 1.0 / (t1 - t0));'
    slow_zero = (
        'printf("throughput=0\\n"); fflush(stdout); const char *p = getenv("AUTORESEARCH_PAIR");'
        " if (p && atoi(p) >= 2) { struct timespec z = {0, 10000000};"
        ' for (int i = 0; i < 100 && access("ar-gate", F_OK) != 0; i++) nanosleep(&z, 0); }'
    )
    prog.write_text(original.replace("#include <time.h>", "#include <time.h>\n#include <unistd.h>", 1)
                    .replace(line, slow_zero))  # fmt: skip
    try:
        zero = git(target, "diff")
    finally:
        prog.write_text(original)

    def open_the_gate_once_honest_is_decided() -> None:
        db = ws.db()  # this thread's own connection
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = {e["title"]: e for e in rows(db, "SELECT id, run_id, title, ended_at FROM experiments")}
            if "honest" in found and "zero" in found and found["honest"]["ended_at"] is not None:
                zero_exp = found["zero"]
                tree = ws.worktrees_dir / f"run{zero_exp['run_id']}" / f"exp{zero_exp['id']}" / "b"
                if tree.is_dir():
                    (tree / "ar-gate").write_text("open\n")
                return
            time.sleep(0.05)

    gate = threading.Thread(target=open_the_gate_once_honest_is_decided, daemon=True)
    gate.start()
    exps, lines, _ = measure(ws, [("zero", zero), ("honest", make_diff(target, "speedup"))])
    gate.join(5)
    assert exps["honest"]["status"] == "kept", (exps["honest"], lines)
    assert exps["zero"]["ended_at"] > exps["honest"]["ended_at"], lines  # it ran on past the decision
    assert (exps["zero"]["status"], exps["zero"]["reason"]) == ("crashed", "benchmark"), lines
    assert "values must be positive" in json.loads(exps["zero"]["meta"])["detail"]
