"""The last hostile inputs of issue 29, each through the real command line: refused with one line
naming the input (and the database as it was), or handled as a user would expect."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kb.workspace import Workspace
from tests.cli.test_bad_input import EXE, assert_one_line, real_cli, state
from tests.conftest import git
from tests.kb.helpers import LoopbackServer, build_fork_repos

NEW_FILE = (
    "diff --git a/speed.txt b/speed.txt\nnew file mode 100644\n--- /dev/null\n+++ b/speed.txt\n"
    "@@ -0,0 +1 @@\n+fast\n"
)


def set_config(ws: Workspace, pattern: str, replacement: str) -> None:
    text = ws.config_path.read_text()
    changed, n = re.subn(pattern, replacement, text, count=1, flags=re.MULTILINE)
    assert n == 1, pattern
    ws.config_path.write_text(changed)


# --- settings that were accepted without a word ----------------------------------------------------


def test_a_protected_path_written_with_dot_slash_protects_it(workspace: Workspace, tmp_path: Path) -> None:
    set_config(workspace, r"^protect = \[\]$", 'protect = ["./speed.txt"]')
    patch = tmp_path / "speed.diff"
    patch.write_text(NEW_FILE)
    before = state(workspace)
    done = real_cli(workspace, "queue", "add", str(patch), "-t", "write the speed file")
    assert_one_line(done.returncode, done.stdout, done.stderr, 1, "speed.txt", "target.protect")
    assert state(workspace) == before


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ('"speed.txt "', "spaces around a path"),
        ('"."', "names the whole tree"),
        ('""', "names the whole tree"),
        ('"/etc/passwd"', "relative to its top"),
        ('"../x"', "leaves the target tree"),
    ],
)
def test_a_protected_path_that_names_nothing_is_refused(
    workspace: Workspace, entry: str, reason: str
) -> None:
    set_config(workspace, r"^protect = \[\]$", f"protect = [{entry}]")
    before = state(workspace)
    done = real_cli(workspace, "queue", "list")
    assert_one_line(done.returncode, done.stdout, done.stderr, 1, "target.protect", reason)
    assert state(workspace) == before


@pytest.mark.parametrize(
    ("user", "reason"),
    [("root", "must run as an unprivileged user"), ("no-such-user-here", "no such user on this machine")],
)
def test_a_sandbox_user_that_is_root_or_unknown_is_refused(
    workspace: Workspace, user: str, reason: str
) -> None:
    set_config(workspace, r'^user = "nobody"$', f'user = "{user}"')
    done = real_cli(workspace, "validate", "--json")
    assert_one_line(done.returncode, done.stdout, done.stderr, 1, "sandbox.user", reason)


def test_min_pairs_above_max_pairs_is_refused_by_the_config(workspace: Workspace) -> None:
    set_config(workspace, r"^max_pairs = 80$", "max_pairs = 4")
    for args in (["validate"], ["history"], ["queue", "list"]):
        done = real_cli(workspace, *args)
        line = "max_pairs 4: must be at least min_pairs (8)"
        assert_one_line(done.returncode, done.stdout, done.stderr, 1, line)


def test_deeply_nested_toml_is_one_line(workspace: Workspace) -> None:
    workspace.config_path.write_text(
        workspace.config_path.read_text() + "deep = " + "[" * 50_000 + "]" * 50_000
    )
    done = real_cli(workspace, "history")
    assert_one_line(done.returncode, done.stdout, done.stderr, 1, "malformed TOML", "nested too deeply")


def test_a_fork_source_not_in_the_knowledge_base_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    patch = tmp_path / "readme.diff"
    patch.write_text(
        "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
        "@@ -1 +1 @@\n-target\n+faster\n"
    )
    before = state(workspace)
    done = real_cli(workspace, "queue", "add", str(patch), "-t", "t", "--source", "fork:nowhere@0123abcd")
    assert_one_line(
        done.returncode, done.stdout, done.stderr, 1, "fork:nowhere@0123abcd", "no fork 'nowhere'"
    )
    assert state(workspace) == before


# --- init of a local repository runs none of its commands ------------------------------------------


def test_init_of_a_local_repository_runs_none_of_its_hooks_or_fsmonitor(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    git(target, "init", "-q", "-b", "main")
    (target / "a.c").write_text("int a;\n")
    git(target, "add", "a.c")
    git(target, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    marks = tmp_path / "marks"
    marks.mkdir()
    hooks = target / ".git" / "hooks"
    for hook in ("post-index-change", "post-checkout", "reference-transaction", "pre-auto-gc", "post-merge"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marks}/{hook}\n")
        (hooks / hook).chmod(0o755)
    git(target, "config", "core.fsmonitor", f"touch {marks}/fsmonitor; false")
    git(target, "config", "filter.evil.clean", f"touch {marks}/filter; cat")
    (target / ".git" / "info" / "attributes").write_text("* filter=evil\n")
    (target / "a.c").write_text("int a, b;\n")  # an uncommitted edit: init reports it
    done = subprocess.run(
        [*EXE, "init", str(tmp_path / "ws"), "--target", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "1 tracked file(s) of the target differ from its HEAD (a.c)" in done.stdout + done.stderr
    assert sorted(os.listdir(marks)) == []


# --- a redirect to a URL no parser reads -----------------------------------------------------------


@pytest.mark.parametrize("location", ["http://exa]mple.invalid/paper", "http://[::1/paper"])
def test_a_redirect_to_an_unreadable_url_is_one_line(workspace: Workspace, location: str) -> None:
    with LoopbackServer() as server:
        url = server.add("/moved", redirect=location)
        before = state(workspace)
        done = real_cli(workspace, "kb", "add-paper", url)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert url in line and "redirected to an invalid URL" in line and "Invalid IPv6 URL" in line
    assert state(workspace) == before


# --- two add-fork of one fork at once --------------------------------------------------------------


def test_two_add_fork_of_one_fork_started_together_both_end_well(tmp_path: Path) -> None:
    from kb.init import TargetSpec, create_workspace

    repos = build_fork_repos(tmp_path / "repos")
    ws = create_workspace(tmp_path / "ws", TargetSpec(location=str(repos.upstream.path)))
    argv = [*EXE, "--workspace", str(ws.root), "kb", "add-fork", "ik", str(repos.fork.path)]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert all("Traceback" not in err for _, err in outs)
    said = sorted(out.splitlines()[0] for out, _ in outs)
    assert sum("added 5 new commits" in line for line in said) == 1, said
    assert sum("up to date" in line for line in said) == 2, said
    listed = real_cli(ws, "kb", "forks", "--json")
    assert listed.returncode == 0 and listed.stdout.count('"name": "ik"') == 1
