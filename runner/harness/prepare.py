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
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from kb import gitrepo
from kb.config import Settings
from kb.errors import UserError
from kb.workspace import Workspace

# The policy lives in runner/harness/patchpaths.py; re-exported for the callers that know it from here.
from runner.harness.patchpaths import protected_paths as protected_paths
from runner.harness.patchpaths import refusal as refusal

if TYPE_CHECKING:
    import git

A_DIR = "a"
B_DIR = "b"
AUTHOR = gitrepo.identity_env()


class Refused(Exception):
    """The patch touches a protected path (status `refused`)."""


class DoesNotApply(Exception):
    """The patch does not apply onto the baseline (status `crashed`, reason `does_not_apply`)."""


@dataclass(frozen=True)
class Script:
    path: str
    """Where it sits inside each tree (relative, POSIX)."""
    source: Path | None
    """A workspace file copied into both trees; None when it comes with the target tree."""
    role: str


@dataclass(frozen=True)
class Scripts:
    bench: Script
    checks: Script


def _tree_path(configured: str, role: str) -> str:
    path = PurePosixPath(configured)
    if path.is_absolute():
        return path.name
    if ".." in path.parts:
        raise UserError(f"{role} script {configured!r}: must not leave the tree (no '..')")
    return str(path)


def resolve_scripts(ws: Workspace, settings: Settings) -> Scripts:
    """A script named in the config is a workspace file if it exists there, else a tree file."""

    def one(configured: str, role: str) -> Script:
        candidate = Path(configured) if Path(configured).is_absolute() else ws.root / configured
        source = candidate if candidate.is_file() else None
        return Script(_tree_path(configured, role), source, role)

    return Scripts(
        one(settings.target.bench_script, "benchmark"), one(settings.target.checks_script, "checks")
    )


def template_path(ws: Workspace, settings: Settings) -> Path | None:
    """The configured experiment template (None: the packaged one)."""
    configured = settings.fleet.template
    if not configured:
        return None
    path = Path(configured)
    return path if path.is_absolute() else ws.root / path


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
    from runner.harness.sandbox import protected_entries, write_harness

    workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / ".autoresearch", ignore_errors=True)  # build stamps of a dead attempt
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


def remove_workdir(repo: git.Repo, workdir: Path) -> None:
    """Remove both worktrees and the folder (logs live elsewhere and are kept)."""
    for name in (A_DIR, B_DIR):
        if (workdir / name).exists():
            gitrepo.worktree_remove(repo, workdir / name)
    shutil.rmtree(workdir, ignore_errors=True)
