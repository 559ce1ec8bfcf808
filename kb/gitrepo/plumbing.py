"""git plumbing: opening and cloning repositories, running one git command, worktrees, and commits
made without a work tree (the workspace mirror is bare): commit a patch, move a branch, read
messages and trailers, format a patch. The rest of kb.gitrepo runs git through `run` (failures as
a UserError) and `run_unchecked` (the exit code and the whole error text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kb.errors import UserError

if TYPE_CHECKING:
    import git


_URL = re.compile(r"^(https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:")


#: Who makes the commits autoresearch writes (the baseline worktrees, the run branch, the recipe's
#: clone): one identity, so `git log --author=autoresearch` finds them all.
AUTHOR_NAME = "autoresearch"


AUTHOR_EMAIL = "autoresearch@localhost"


def identity_env(date: str | None = None) -> dict[str, str]:
    """GIT_AUTHOR_* and GIT_COMMITTER_* for autoresearch's commits; `date` fixes both dates
    (git's `@<epoch> +0000` form), so a commit made again from the same decision is the same."""
    env = {
        "GIT_AUTHOR_NAME": AUTHOR_NAME,
        "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
        "GIT_COMMITTER_NAME": AUTHOR_NAME,
        "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL,
    }
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return env


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


def run(
    repo: git.Repo, *args: str, input_text: str | None = None, env: Mapping[str, str] | None = None
) -> str:
    """Run one git command against the repository; stdout back, failures as one-line UserError.

    `env` adds variables to the environment (a temporary index, author and dates)."""
    code, out, err = run_unchecked(repo, *args, input_text=input_text, env=env)
    if code != 0:
        detail = err.strip().splitlines()
        raise UserError(f"git {args[0]}: {detail[-1] if detail else f'exit {code}'}")
    return out


def resolve(repo: git.Repo, ref: str) -> str:
    """A ref, tag, branch or sha to a full commit sha."""
    import git

    try:
        return str(repo.commit(ref).hexsha)
    except (git.BadName, ValueError, git.BadObject):
        raise UserError(f"{ref}: unknown ref in {repo.git_dir}") from None


def commit_of(repo: git.Repo, ref: str) -> str | None:
    """The full sha of a commit named by `ref` (sha, branch, tag), or None when there is none."""
    code, out, _ = run_unchecked(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    return out.strip() if code == 0 and out.strip() else None


def clone_mirror(source: str, dest: Path) -> git.Repo:
    """A bare copy of the target inside the workspace; forks are fetched into it, worktrees made from it."""
    import git

    try:
        return git.Repo.clone_from(source, dest, bare=True)
    except git.GitCommandError as exc:
        raise UserError(f"{source}: cannot clone ({clone_failure(exc.stderr or '') or exc})") from None


def clone_failure(stderr: str) -> str:
    """git's reason in one line, from the stderr GitPython quotes (`stderr: '...'`): its first
    `fatal:` or `error:` line (the last line is often a bare quote or a generic "Could not read
    from remote repository"), with what to do when the folder belongs to another user."""
    text = stderr.strip()
    if text.startswith("stderr:"):
        text = text[len("stderr:") :].strip().strip("'")
    lines = [line.strip() for line in text.splitlines() if line.strip().strip("'")]
    reasons = [line for line in lines if line.startswith(("fatal:", "error:"))]
    reason = reasons[0] if reasons else lines[-1] if lines else ""
    if "dubious ownership" in reason:
        reason += (
            ": it belongs to another user (unpacked from an archive as root, say); chown it to "
            "yourself, or trust it with `git config --global --add safe.directory PATH`"
        )
    return reason


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


_NO_COMMIT = "0" * 40


def branch_head(repo: git.Repo, branch: str) -> str | None:
    """The commit a branch points at, or None when the branch does not exist."""
    try:
        return run(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}").strip()
    except UserError:
        return None


def commit_patch(
    repo: git.Repo, parent: str, diff: str, message: str, *, env: Mapping[str, str] | None = None
) -> str:
    """Apply a unified diff onto `parent` and commit the result, touching no work tree or branch.

    Plumbing on a temporary index (read-tree, apply --cached, write-tree, commit-tree), so it works
    in the bare mirror. Returns the new commit's sha; a diff that does not apply raises UserError.
    `env` sets the author, committer and dates (GIT_AUTHOR_NAME, GIT_COMMITTER_DATE, ...).
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autoresearch-index-") as tmp:
        index_env = {**(env or {}), "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        run(repo, "read-tree", parent, env=index_env)
        try:
            run(repo, "apply", "--cached", "--whitespace=nowarn", "-", input_text=diff, env=index_env)
        except UserError as exc:
            raise UserError(f"patch does not apply onto {parent[:12]}: {exc}") from None
        tree = run(repo, "write-tree", env=index_env).strip()
    return run(repo, "commit-tree", tree, "-p", parent, "-F", "-", input_text=message, env=env).strip()


def set_branch(repo: git.Repo, branch: str, new: str, old: str | None) -> None:
    """Move `branch` to `new` only if it still points at `old` (None: only if it does not exist).

    A compare-and-swap, so two processes committing at once cannot lose each other's commit."""
    run(repo, "update-ref", f"refs/heads/{branch}", new, old or _NO_COMMIT)


def commit_messages(repo: git.Repo, base: str | None, tip: str) -> list[tuple[str, str]]:
    """(sha, full message) of the commits reachable from `tip` but not `base`, newest first."""
    spec = f"{base}..{tip}" if base else tip
    out = run(repo, "log", "--format=%H%x00%B%x1e", spec)
    found: list[tuple[str, str]] = []
    for record in out.split("\x1e"):
        record = record.strip("\n")
        if record:
            sha, _, message = record.partition("\x00")
            found.append((sha, message))
    return found


def format_patch(repo: git.Repo, sha: str) -> str:
    """One commit as an mbox patch (`git am` and `git apply` both read it)."""
    return run(repo, "format-patch", "-1", "--stdout", "--no-signature", "--stat=100", sha)


def parse_trailers(message: str) -> list[tuple[str, str]]:
    """The `Key: value` lines of a commit message's last paragraph, in order (git's trailer block)."""
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    if not paragraphs:
        return []
    found: list[tuple[str, str]] = []
    for line in paragraphs[-1].splitlines():
        key, sep, value = line.partition(": ")
        if not sep or not re.fullmatch(r"[A-Za-z0-9-]+", key):
            return []
        found.append((key, value.strip()))
    return found


def run_unchecked(
    repo: git.Repo, *args: str, input_text: str | None = None, env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    """Run git and return (exit code, stdout, stderr) for callers that need the whole error text."""
    import os
    import subprocess

    result = subprocess.run(
        ["git", "--git-dir", str(repo.git_dir), *args],
        cwd=repo.working_tree_dir or repo.git_dir,
        input=input_text,
        capture_output=True,
        text=True,
        errors="replace",
        env={**os.environ, **env} if env else None,
    )
    return result.returncode, result.stdout, result.stderr


def worktree_changes(repo: git.Repo, work_tree: Path, commit: str) -> list[str]:
    """Tracked files of `work_tree` whose content differs from `commit`, read through this
    repository (the workspace's mirror: its git directory, its config, a temporary index). The
    work tree's own repository is never asked: its hooks (post-index-change), its core.fsmonitor
    and its filter drivers are commands a `git status` there would run (issue 29)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autoresearch-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), "GIT_OPTIONAL_LOCKS": "0"}
        run(repo, "read-tree", commit, env=env)
        tree = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "--work-tree", str(work_tree))
        run_unchecked(repo, *tree, "update-index", "-q", "--refresh", env=env)  # 1: some differ
        code, out, _ = run_unchecked(repo, *tree, "diff-files", "--name-only", "-z", env=env)
    return [name for name in out.split("\0") if name] if code == 0 else []


def has_commit(repo: git.Repo, sha: str) -> bool:
    code, _, _ = run_unchecked(repo, "cat-file", "-e", f"{sha}^{{commit}}")
    return code == 0
