"""Prepare an experiment's workdir: the baseline tree (A) and the candidate tree (B).

Before anything runs, a patch that touches a protected path (the benchmark script, the checks
script, the experiment template, the workspace config, or a path listed in `target.protect`) is
refused with the reason. A patch that does not apply onto the current baseline is
`crashed: does_not_apply`. Otherwise the candidate is committed onto the baseline in the mirror
(plumbing, no branch moves), both trees are checked out as worktrees of the mirror under the
workspace's worktrees dir, the benchmark and checks scripts are placed into both, read-only, and the
harness folder is written next to them (runner/harness/sandbox.py).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from kb import gitrepo
from kb.errors import UserError

# The policy lives in runner/harness/patchpaths.py and the scripts' resolution in
# runner/harness/scripts.py (below both, so neither imports this module); re-exported for the
# callers that know them from here.
from runner.harness.patchpaths import protected_paths as protected_paths
from runner.harness.patchpaths import refusal as refusal
from runner.harness.sandbox import protected_entries, write_harness
from runner.harness.scripts import Script as Script
from runner.harness.scripts import Scripts as Scripts
from runner.harness.scripts import resolve_scripts as resolve_scripts
from runner.harness.scripts import template_path as template_path

if TYPE_CHECKING:
    import git

A_DIR = "a"
B_DIR = "b"
AUTHOR = gitrepo.identity_env()


class Refused(Exception):
    """The patch touches a protected path (status `refused`)."""


class DoesNotApply(Exception):
    """The patch does not apply onto the baseline (status `crashed`, reason `does_not_apply`)."""


# The mark prepare_workdir leaves when it has finished (under the folder it clears first).
PREPARED = ".autoresearch/prepared"


def commit_candidate(repo: git.Repo, baseline: str, diff: str, title: str) -> str:
    """The candidate as a commit on top of the baseline (no branch moves); DoesNotApply if it fails."""
    env = {key: value for key, value in AUTHOR.items() if key not in os.environ}
    try:
        return gitrepo.commit_patch(repo, baseline, diff, f"candidate: {title}\n", env=env)
    except UserError as exc:
        raise DoesNotApply(str(exc)) from None


def prepare_workdir(
    repo: git.Repo,
    workdir: Path,
    baseline: str,
    candidate: str,
    scripts: Scripts,
    protected: list[tuple[str, str]] | None = None,
) -> None:
    """Check out both trees (replacing stale ones), place the scripts, read-only, into both, and
    write the harness folder (runner/harness/sandbox.py) from the fresh baseline tree: what every
    protected path (`protected`, plus the two scripts) holds before anything has run."""
    workdir.mkdir(parents=True, exist_ok=True)
    # Build stamps of a dead attempt go, and with them the mark that this folder was ready.
    shutil.rmtree(workdir / ".autoresearch", ignore_errors=True)
    trees = {A_DIR: baseline, B_DIR: candidate}
    for name, commit in trees.items():
        gitrepo.worktree_add(repo, workdir / name, commit)
    for script in (scripts.bench, scripts.checks):
        source = script.source or workdir / A_DIR / script.path
        if not source.is_file():
            raise UserError(
                f"{script.role} script {script.path!r}: not in the workspace nor in the target tree"
            )
        content = source.read_bytes()
        for name in trees:
            target = workdir / name / script.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                target.chmod(stat.S_IWUSR | stat.S_IRUSR)
            target.write_bytes(content)
            target.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH)
    entries = protected_entries(repo, baseline, workdir / A_DIR, scripts, protected or [])
    write_harness(workdir, workdir / A_DIR, entries, scripts)
    # Written last: a runner killed anywhere above leaves no mark, and a resume prepares again
    # rather than measure half-checked-out trees or trees without their scripts or harness.
    (workdir / PREPARED).parent.mkdir(exist_ok=True)
    (workdir / PREPARED).write_text(f"{baseline} {candidate}\n", encoding="utf-8")


def is_prepared(workdir: Path) -> bool:
    """Whether `prepare_workdir` finished in this folder (both trees, scripts and harness)."""
    return (workdir / PREPARED).is_file() and (workdir / A_DIR).is_dir() and (workdir / B_DIR).is_dir()


def remove_workdir(repo: git.Repo, workdir: Path) -> None:
    """Remove both worktrees and the folder (logs live elsewhere and are kept)."""
    for name in (A_DIR, B_DIR):
        if (workdir / name).exists():
            gitrepo.worktree_remove(repo, workdir / name)
    shutil.rmtree(workdir, ignore_errors=True)
