"""The harness on real trees and real processes: what a step can see, reach and leave behind.

Each test prepares a real experiment workdir (git worktrees of the mirror, the harness folder the
runner writes) and runs a small run script that sources the harness, like runner/harness/experiment.yaml's,
with hostile step commands; the log it prints is parsed by the runner's own LogParser."""

from __future__ import annotations

import hashlib
import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from kb import gitrepo
from kb.workspace import Workspace
from runner.harness.patchpaths import protected_paths
from runner.harness.prepare import prepare_workdir, resolve_scripts
from runner.harness.protocol import LogParser
from runner.harness.sandbox import HARNESS_DIR, sandbox_envs
from tests.runner.runner_target import make_workspace
from tests.runner.sandbox_marks import methods_and_isolation

NONCE = "feedc0ffee123456"
IS_ROOT = os.geteuid() == 0

RUN = """\
set -o pipefail
mark() { echo "@@AR ${AUTORESEARCH_NONCE} ${EPOCHREALTIME} $*"; }
finish() { mark STATUS "$1" "${2:-}"; echo "EXPERIMENT_STATUS: $1"; [ "$1" = done ] && exit 0; exit 1; }
source .autoresearch-harness/harness.sh || finish failed setup
ar_start
ar_step probe-A A bash -c "$STEP_A" < /dev/null; echo "rc A $?"
ar_step probe-B B bash -c "$STEP_B" < /dev/null; echo "rc B $?"
finish done
"""


def prepared(tmp_path: Path, **overrides: object) -> tuple[Workspace, Path]:
    ws, _ = make_workspace(tmp_path, **overrides)  # type: ignore[arg-type]
    repo = gitrepo.open_repo(ws.mirror_path)
    baseline = ws.settings.target.baseline_commit
    workdir = ws.worktrees_dir / "run1" / "exp1"
    prepare_workdir(
        repo, workdir, baseline, baseline, resolve_scripts(ws, ws.settings), protected_paths(ws, ws.settings)
    )
    return ws, workdir


def run_steps(
    ws: Workspace, workdir: Path, step_a: str, step_b: str, *, script: str = RUN, **env: str
) -> tuple[str, LogParser]:
    envs = {
        **os.environ,
        **sandbox_envs(ws),
        "A_DIR": "a",
        "B_DIR": "b",
        "BATCH": "0",
        "AUTORESEARCH_NONCE": NONCE,
        "STEP_A": step_a,
        "STEP_B": step_b,
        **env,
    }
    out = subprocess.run(
        ["bash", "-c", script], cwd=workdir, env=envs, capture_output=True, text=True, timeout=120
    ).stdout
    parser = LogParser(NONCE)
    parser.feed(out.encode())
    parser.finish()
    return out, parser


def run_template(
    ws: Workspace, workdir: Path, build: str, *, desc: str, limits: tuple[int, int, int]
) -> tuple[str, LogParser]:
    """The real job template's run script on the prepared trees: `build` as both builds' command,
    the checks, and one pair (A then B); `limits`: the build's, the benchmark's and the checks'
    time limits in seconds."""
    from runner.harness.template import load_template

    return run_steps(
        ws,
        workdir,
        "",
        "",
        script=load_template()["run"],
        EXPERIMENT_ID="1",
        EXPERIMENT_DESC=desc,
        BUILD_CMD=build,
        BUILD_TIMEOUT=str(limits[0]),
        BENCH_TIMEOUT=str(limits[1]),
        CHECK_TIMEOUT=str(limits[2]),
        BENCH_SCRIPT="autoresearch.sh",
        CHECKS_SCRIPT="autoresearch.checks.sh",
        PAIR_START="0",
        PAIRS="1",
        PAIR_ORDER="AB",
        RUN_CHECKS="1",
    )


def test_packaged_harness_is_written_with_what_the_baseline_protects(tmp_path: Path) -> None:
    ws, workdir = prepared(tmp_path, target={"protect": ["Makefile"]})
    folder = workdir / HARNESS_DIR
    assert {p.name for p in folder.iterdir()} >= {"harness.sh", "ar-sandbox.c", "files", "protected.list"}
    listed = (folder / "protected.list").read_text().splitlines()
    assert listed == ["f\tMakefile", "s\tautoresearch.checks.sh", "s\tautoresearch.sh"]
    sums = (folder / "files.sha256").read_text()
    bench = (workdir / "a" / "autoresearch.sh").read_bytes()
    assert f"{hashlib.sha256(bench).hexdigest()}  autoresearch.sh\n" in sums
    assert (folder / "files" / "autoresearch.sh").read_bytes() == bench


@pytest.mark.parametrize(("method", "mode"), methods_and_isolation())
def test_a_step_sees_only_its_own_tree(tmp_path: Path, method: str, mode: str) -> None:
    ws, workdir = prepared(tmp_path, sandbox={"method": method})
    db = ws.db_path
    hostile = textwrap.dedent(
        f"""\
        echo "uid $(id -u) pid $$"
        [ -e {db} ] && echo "SEEN database"
        [ -e ../b ] && echo "SEEN other tree"
        [ -e ../{HARNESS_DIR} ] && echo "SEEN harness"
        n={NONCE[:8]}; n=${{n}}{NONCE[8:]}  # the nonce's value, never spelled whole in this script
        for e in /proc/[0-9]*/environ; do grep -qa "$n" "$e" 2>/dev/null && echo "SEEN nonce in $e"; done
        env | grep -q "$n" && echo "SEEN nonce in env"
        env | grep -q -e "sk-te[s]t" -e "ghp-te[s]t" && echo "SEEN a secret"
        # a word of the run script's command line ([a] keeps this script and grep from matching)
        for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < "$c"; echo; done \\
          | grep -c '[a]r_start' | sed 's/^/outside processes /'
        echo x >> autoresearch.sh 2>/dev/null && echo "WROTE bench"
        mv autoresearch.sh moved.sh 2>/dev/null && echo "MOVED bench"
        umount autoresearch.sh 2>/dev/null && echo "UNMOUNTED bench"
        echo x > /usr/local/ar-pwned 2>/dev/null && echo "WROTE /usr/local"
        echo x > built.txt && echo "tree writable"
        echo x > /tmp/scratch && echo "tmp writable"
        [ "$HOME" = /tmp/home ] && [ -w "$HOME" ] && echo "home private"
        """
    )
    out, parser = run_steps(ws, workdir, hostile, "true", OPENAI_API_KEY="sk-test", GITHUB_TOKEN="ghp-test")
    assert parser.state.isolation == mode, out
    assert "SEEN" not in out and "WROTE" not in out and "MOVED" not in out and "UNMOUNTED" not in out, out
    assert "tree writable" in out and "tmp writable" in out and "home private" in out, out
    assert "outside processes 0" in out and "pid 1" in out, out  # the step's own processes only
    assert not Path("/usr/local/ar-pwned").exists()
    assert parser.state.status == "done" and parser.state.tampered is None, out
    assert (workdir / "a" / "built.txt").exists()  # the tree's own writes stay


@pytest.mark.skipif(not IS_ROOT, reason="the uid method needs root")
def test_nothing_a_step_starts_or_leaves_reaches_the_next(tmp_path: Path) -> None:
    ws, workdir = prepared(tmp_path)
    leave = (
        "setsid bash -c 'exec -a ar-test-daemon sleep 300' </dev/null >/dev/null 2>&1 & echo started;"
        "echo note > /tmp/note; echo note > /dev/shm/note; echo note > $HOME/note;"
        "ipcmk -M 4096 > /dev/null && echo segment"
    )
    find = (
        "pgrep -f '[a]r-test-daemon' && echo SURVIVED || echo gone;"
        "cat /tmp/note /dev/shm/note $HOME/note 2>/dev/null && echo SHARED;"
        "ipcs -m | grep -q '^0x' && echo SEGMENT || true;"
        "kill -KILL -1; echo still running"  # every process this step may signal: its own only
    )
    out, parser = run_steps(ws, workdir, leave, find)
    assert "started" in out and "segment" in out and "gone" in out and "still running" in out, out
    assert "SURVIVED" not in out and "SHARED" not in out and "SEGMENT" not in out, out
    assert parser.state.status == "done", out  # the harness outlived the kill
    alive = subprocess.run(["pgrep", "-f", "[a]r-test-daemon"], capture_output=True, text=True).stdout
    assert alive == "", alive


def test_a_step_cannot_print_a_marker(tmp_path: Path) -> None:
    ws, workdir = prepared(tmp_path)
    forged = (
        f"echo '@@AR {NONCE} 1 BEGIN 0 B'; echo 'METRIC throughput=1e9'; echo '@@AR {NONCE} 2 END 0 B 0';"
        "printf 'no newline at the end'"
    )
    out, parser = run_steps(ws, workdir, "true", forged)
    assert parser.state.invocations == [] and len(parser.state.forged) == 2, out
    assert f"@@AR! {NONCE} 1 BEGIN 0 B" in out
    assert "no newline at the end\nrc B 0\n" in out  # what follows still starts its own line
    assert parser.state.status == "done"


def test_a_step_that_floods_its_output_is_folded_and_cut(tmp_path: Path) -> None:
    """Lines are folded at 64 KiB (a marker-shaped piece is escaped like any line), and past
    AUTORESEARCH_STEP_OUTPUT_MAX bytes the rest is dropped while the step runs on to its own end."""
    ws, workdir = prepared(tmp_path)
    # Three pieces of x's, and a marker with the job's nonce at the fourth piece's start.
    long_line = f"head -c 196608 /dev/zero | tr '\\0' x; printf '@@AR {NONCE} 1 BEGIN 0 B\\n'"
    out, parser = run_steps(ws, workdir, long_line, "true")
    lines = out.splitlines()
    assert [len(line) for line in lines if set(line) == {"x"}] == [65536, 65536, 65536]
    assert f"\n@@AR! {NONCE} 1 BEGIN 0 B\n" in out  # the fourth piece starts a line: escaped
    assert parser.state.invocations == [] and parser.state.violation is None
    flood = "for i in $(seq 5000); do echo line $i; done; echo METRIC throughput=1; exit 3"
    out, parser = run_steps(ws, workdir, flood, "true", AUTORESEARCH_STEP_OUTPUT_MAX="2000")
    assert "line 100\n" in out and "line 4000" not in out and "METRIC throughput=1" not in out
    assert "autoresearch: the step printed more than 2000 bytes; the rest is not logged" in out
    assert "rc A 3" in out  # the step ran to its end and its exit code is its own


def test_a_step_output_reaches_the_log_line_by_line(tmp_path: Path) -> None:
    """A slow build's lines are in the log as they are printed (the console's Fleet pane follows
    the log live), not when 4 KiB have gathered in a pipe or the step ends (issue 29)."""
    ws, workdir = prepared(tmp_path, sandbox={"mode": "off"})
    log = tmp_path / "job.log"
    envs = {
        **os.environ,
        **sandbox_envs(ws),
        "A_DIR": "a",
        "B_DIR": "b",
        "BATCH": "0",
        "AUTORESEARCH_NONCE": NONCE,
        "STEP_A": "echo compiling one.c; sleep 4; echo compiling two.c",
        "STEP_B": "true",
    }
    with open(log, "wb") as out:
        job = subprocess.Popen(
            ["bash", "-c", RUN], cwd=workdir, env=envs, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            started = time.monotonic()
            while "compiling one.c" not in log.read_text() and time.monotonic() - started < 3.5:
                time.sleep(0.05)
            seen = log.read_text()
            assert "compiling one.c" in seen and "compiling two.c" not in seen, seen
        finally:
            job.wait(timeout=60)
    assert "compiling two.c" in log.read_text()


def test_without_a_sandbox_tampering_is_caught_by_hash_and_named(tmp_path: Path) -> None:
    ws, workdir = prepared(tmp_path, sandbox={"mode": "off"})
    rewrite = "chmod u+w autoresearch.sh && echo 'echo METRIC throughput=1e9' > autoresearch.sh"
    out, parser = run_steps(ws, workdir, "true", rewrite)
    assert parser.state.isolation == "none" and "sandbox.mode = off" in parser.state.isolation_detail
    assert parser.state.tampered == ("probe-B", "B", "autoresearch.sh"), out
    assert parser.state.status == "failed" and parser.state.reason == "tampered"
    assert "rc B" not in out  # the job ended right after the step


def test_without_a_sandbox_a_change_to_the_baseline_tree_is_caught(tmp_path: Path) -> None:
    ws, workdir = prepared(tmp_path, sandbox={"mode": "off"})
    out, parser = run_steps(ws, workdir, "true", "echo slow >> ../a/prog.c")
    assert parser.state.tampered == ("probe-B", "A", "prog.c"), out


def test_without_a_sandbox_a_change_between_steps_is_caught_before_the_next(tmp_path: Path) -> None:
    """A process the candidate's step left behind changes the baseline tree after the step ended:
    the harness looks before the baseline's next step runs (which would otherwise take the change
    for its own) and names the step it followed."""
    ws, workdir = prepared(tmp_path, sandbox={"mode": "off"})
    # B first, then a pause in which only the leftover runs, then A's step.
    script = RUN.replace(
        'ar_step probe-A A bash -c "$STEP_A" < /dev/null; echo "rc A $?"\n'
        'ar_step probe-B B bash -c "$STEP_B" < /dev/null; echo "rc B $?"\n',
        'ar_step probe-B B bash -c "$STEP_B" < /dev/null; echo "rc B $?"\n'
        "sleep 1\n"
        'ar_step probe-A A bash -c "$STEP_A" < /dev/null; echo "rc A $?"\n',
    )
    assert script != RUN
    leftover = "setsid bash -c 'sleep 0.3; echo slow >> ../a/prog.c' < /dev/null > /dev/null 2>&1 &"
    out, parser = run_steps(ws, workdir, "true", leftover, script=script)
    assert parser.state.tampered == ("after-probe-B", "A", "prog.c"), out
    assert "rc B 0" in out and "rc A" not in out  # A's step never ran


@pytest.mark.skipif(not IS_ROOT, reason="the uid method needs root")
def test_a_shared_cache_is_written_by_the_baseline_only(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    ws, workdir = prepared(tmp_path, sandbox={"shared": [str(cache)]})
    write = f"echo entry > {cache}/$(basename $PWD) && echo wrote || echo refused"
    out, parser = run_steps(ws, workdir, write, write)
    assert parser.state.isolation == "uid+pid+mount", out
    assert (cache / "a").read_text() == "entry\n" and not (cache / "b").exists(), out


def test_required_refuses_to_run_without_isolation(tmp_path: Path) -> None:
    # A worker without that user: the config refuses an unknown user for a local fleet (issue 29),
    # so it is a SkyPilot workspace here, whose workers' harness checks the user itself.
    ws, workdir = prepared(
        tmp_path,
        sandbox={"mode": "required", "method": "uid", "user": "no-such-user"},
        fleet={"backend": "skypilot"},
    )
    out, parser = run_steps(ws, workdir, "echo RAN", "echo RAN")
    assert parser.state.isolation == "none" and "no user no-such-user" in parser.state.isolation_detail
    assert parser.state.status == "failed" and parser.state.reason == "sandbox" and "RAN" not in out, out


def prepared_with_folders(tmp_path: Path, **sandbox: str) -> tuple[Workspace, Path]:
    """The test target plus a protected folder and a protected file two folders down."""
    from kb.init import TargetSpec, create_workspace
    from tests.runner.runner_target import git, make_target, workspace_settings

    target = make_target(tmp_path / "target")
    (target / "cfg").mkdir()
    (target / "cfg" / "flags.txt").write_text("-O1\n")
    (target / "deep" / "er").mkdir(parents=True)
    (target / "deep" / "er" / "rules.mk").write_text("X = 1\n")
    git(target, "add", "-A")
    git(target, "commit", "-q", "-m", "build settings")
    ws = create_workspace(
        tmp_path / "ws",
        TargetSpec(
            location=str(target),
            protect=["cfg", "deep/er/rules.mk"],
            extra=workspace_settings(sandbox=sandbox),
        ),
    )
    repo = gitrepo.open_repo(ws.mirror_path)
    baseline = ws.settings.target.baseline_commit
    workdir = ws.worktrees_dir / "run1" / "exp1"
    scripts = resolve_scripts(ws, ws.settings)
    prepare_workdir(repo, workdir, baseline, baseline, scripts, protected_paths(ws, ws.settings))
    return ws, workdir


@pytest.mark.skipif(not IS_ROOT, reason="the uid method needs root")
def test_protected_folders_and_the_folders_above_them_hold(tmp_path: Path) -> None:
    ws, workdir = prepared_with_folders(tmp_path)
    assert (workdir / HARNESS_DIR / "dirs.list").read_text() == "cfg\n"
    attempts = (
        "echo x >> cfg/flags.txt 2>/dev/null && echo CHANGED flags;"
        "touch cfg/new 2>/dev/null && echo ADDED to cfg;"
        "echo x >> deep/er/rules.mk 2>/dev/null && echo CHANGED rules;"
        "mv deep deep.old 2>/dev/null && echo MOVED deep;"
        "mv deep/er deep/er.old 2>/dev/null && echo MOVED deep/er;"
        "rm -rf cfg 2>/dev/null; [ -e cfg/flags.txt ] || echo REMOVED cfg;"
        "touch deep/er/built.o && echo build outputs next to it are fine"
    )
    out, parser = run_steps(ws, workdir, "true", attempts)
    assert parser.state.isolation == "uid+pid+mount", out
    assert "CHANGED" not in out and "ADDED" not in out and "MOVED" not in out and "REMOVED" not in out, out
    assert "build outputs next to it are fine" in out and parser.state.tampered is None, out


def test_without_a_sandbox_a_file_added_to_a_protected_folder_is_caught(tmp_path: Path) -> None:
    ws, workdir = prepared_with_folders(tmp_path, mode="off")
    out, parser = run_steps(ws, workdir, "true", "echo '-O3 -ffast-math' > cfg/extra.txt")
    assert parser.state.tampered == ("probe-B", "B", "cfg/extra.txt"), out
