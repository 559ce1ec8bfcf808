"""The one module that talks to git (through gitpython): the workspace mirror, forks, worktrees.

Reading forks and making experiment worktrees are two uses of the same helper. gitpython is
imported lazily so the CLI's start-up path never pays for it. Bulk reads (thousands of commits)
should go through `git()` with a single batched command rather than one object lookup per commit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from kb.errors import UserError

if TYPE_CHECKING:
    import git

_URL = re.compile(r"^(https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:")


def is_url(location: str) -> bool:
    return bool(_URL.match(location))


def open_repo(path: Path) -> git.Repo:
    """Open an existing repository (work tree or bare); a clear error if it is not one."""
    import git

    if not path.exists():
        raise UserError(f"{path}: no such folder")
    try:
        return git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UserError(f"{path}: not a git repository") from None


def run(repo: git.Repo, *args: str, input_text: str | None = None) -> str:
    """Run one git command against the repository; stdout back, failures as one-line UserError."""
    import subprocess

    result = subprocess.run(
        ["git", "--git-dir", str(repo.git_dir), *args],
        cwd=repo.working_tree_dir or repo.git_dir,
        input=input_text,
        capture_output=True,
        text=True,
        errors="replace",
    )
    if result.returncode != 0:
        detail = result.stderr.strip().splitlines()
        raise UserError(f"git {args[0]}: {detail[-1] if detail else f'exit {result.returncode}'}")
    return result.stdout


def resolve(repo: git.Repo, ref: str) -> str:
    """A ref, tag, branch or sha to a full commit sha."""
    import git

    try:
        return str(repo.commit(ref).hexsha)
    except (git.BadName, ValueError, git.BadObject):
        raise UserError(f"{ref}: unknown ref in {repo.git_dir}") from None


def clone_mirror(source: str, dest: Path) -> git.Repo:
    """A bare copy of the target inside the workspace; forks are fetched into it, worktrees made from it."""
    import git

    try:
        return git.Repo.clone_from(source, dest, bare=True)
    except git.GitCommandError as exc:
        detail = (exc.stderr or "").strip().splitlines()
        raise UserError(f"{source}: cannot clone ({detail[-1] if detail else exc})") from None


def worktree_add(repo: git.Repo, path: Path, commit: str) -> Path:
    """A detached worktree of `commit` at `path` (replacing a stale one left by a killed run)."""
    if path.exists():
        worktree_remove(repo, path)
    run(repo, "worktree", "add", "--detach", "--force", str(path), commit)
    return path


def worktree_remove(repo: git.Repo, path: Path) -> None:
    import shutil

    try:
        run(repo, "worktree", "remove", "--force", str(path))
    except UserError:
        shutil.rmtree(path, ignore_errors=True)
    run(repo, "worktree", "prune")
