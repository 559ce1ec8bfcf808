"""The one module that talks to git (through gitpython): the workspace mirror, forks, worktrees.

Reading forks and making experiment worktrees are two uses of the same helper. gitpython is
imported lazily so the CLI's start-up path never pays for it. Bulk reads (thousands of commits)
should go through `git()` with a single batched command rather than one object lookup per commit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
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
    code, out, err = _git(repo, *args, input_text=input_text, env=env)
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
    code, out, _ = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    return out.strip() if code == 0 and out.strip() else None


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


# --- commits without a work tree (the mirror is bare) ---------------------------------------------

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


# --- what a patch touches, as git applies it (runner/harness/patchpaths.py holds the policy) -------------


@dataclass(frozen=True)
class TreeChange:
    """One path that differs between two trees (`git diff-tree -r --no-renames --raw`)."""

    path: str
    status: str
    """A (added), D (deleted), M (modified), T (type changed: file, symlink, gitlink)."""
    old_mode: str | None
    """The mode before (100644, 100755, 120000 symlink, 160000 gitlink), None when added."""
    new_mode: str | None
    """The mode after, None when deleted."""
    link_target: str | None = None
    """What a symlink added or changed by the patch points at."""


def _numstat_names(out: str) -> list[str]:
    """Paths of `git apply --numstat -z` output: `added TAB deleted TAB path NUL`; a rename may also
    come as `added TAB deleted TAB NUL old NUL new NUL` (the form `git diff --numstat -z` uses)."""
    fields = out.split("\0")
    names: list[str] = []
    i = 0
    while i < len(fields):
        record = fields[i]
        i += 1
        if not record:
            continue
        parts = record.split("\t", 2)
        if len(parts) < 3:
            continue
        if parts[2]:
            names.append(parts[2])
        else:  # old NUL new NUL follow
            names.extend(name for name in fields[i : i + 2] if name)
            i += 2
    return names


def patch_names(diff: str, repo: git.Repo | None = None) -> list[str]:
    """Every path `git apply` would use for `diff` with the runner's options (-p1, the default),
    in order: the new names (`--numstat -z`), then the old ones (the same reversed: rename and copy
    sources, deleted files). Quoting, octal escapes, other prefixes and absolute headers are read by
    git itself, so the names are what git would write. Needs no tree; without `repo` it runs outside
    any repository. Raises UserError with git's reason when git cannot read the patch."""
    import os
    import subprocess
    import tempfile

    def numstat(*flags: str, cwd: str, env: dict[str, str] | None) -> str:
        base = ["git", "--git-dir", str(repo.git_dir)] if repo is not None else ["git"]
        result = subprocess.run(
            [*base, "apply", "--numstat", "-z", *flags, "-"],
            cwd=cwd,
            input=diff.encode("utf-8", "surrogateescape"),
            capture_output=True,
            env=env,
        )
        if result.returncode != 0:
            detail = result.stderr.decode("utf-8", "replace").strip().splitlines()
            raise UserError(f"git apply: {detail[-1] if detail else f'exit {result.returncode}'}")
        return result.stdout.decode("utf-8", "surrogateescape")

    with tempfile.TemporaryDirectory(prefix="autoresearch-names-") as tmp:
        # Outside a repository git reads the patch as plain `git apply` would, with no prefix of a
        # surrounding work tree (running in a subfolder of one would change the paths).
        env = None if repo is not None else {**os.environ, "GIT_CEILING_DIRECTORIES": str(Path(tmp).parent)}
        cwd = str(repo.git_dir) if repo is not None else tmp
        forward = _numstat_names(numstat(cwd=cwd, env=env))
        backward = _numstat_names(numstat("-R", cwd=cwd, env=env))
    seen: dict[str, None] = {}
    for name in (*forward, *backward):
        seen.setdefault(name, None)
    return list(seen)


def diff_trees(repo: git.Repo, old: str, new: str) -> list[TreeChange]:
    """What differs between two trees (or commits), path by path, renames as a delete and an add;
    the targets of the symlinks `new` adds or changes are read too."""
    out = run(repo, "diff-tree", "-r", "--no-renames", "--raw", "-z", "--no-commit-id", old, new)
    fields = out.split("\0")
    changes: list[TreeChange] = []
    links: list[tuple[int, str]] = []
    i = 0
    while i + 1 < len(fields):
        meta, path = fields[i], fields[i + 1]
        i += 2
        if not meta.startswith(":"):
            continue
        old_mode, new_mode, _old_sha, new_sha, status = meta[1:].split(" ", 4)
        changes.append(
            TreeChange(
                path,
                status[:1],
                None if old_mode == "000000" else old_mode,
                None if new_mode == "000000" else new_mode,
            )
        )
        if new_mode == "120000":
            links.append((len(changes) - 1, new_sha))
    if links:
        targets = _blobs(repo, [sha for _, sha in links])
        for (index, _sha), target in zip(links, targets, strict=True):
            change = changes[index]
            changes[index] = TreeChange(change.path, change.status, change.old_mode, change.new_mode, target)
    return changes


def _blobs(repo: git.Repo, shas: list[str]) -> list[str]:
    """The contents of blobs (symlink targets: short) in one `git cat-file --batch`."""
    import subprocess

    result = subprocess.run(
        ["git", "--git-dir", str(repo.git_dir), "cat-file", "--batch"],
        input="".join(f"{sha}\n" for sha in shas).encode(),
        capture_output=True,
    )
    if result.returncode != 0:
        raise UserError(f"git cat-file: {result.stderr.decode('utf-8', 'replace').strip()}")
    out, pos, found = result.stdout, 0, []
    for _ in shas:
        nl = out.index(b"\n", pos)
        size = int(out[pos:nl].split()[2])
        found.append(out[nl + 1 : nl + 1 + size].decode("utf-8", "surrogateescape"))
        pos = nl + 1 + size + 1
    return found


def tree_changes(repo: git.Repo, commit: str, diff: str) -> list[TreeChange] | None:
    """What applying `diff` onto `commit` changes, as git applies it (the same `git apply --cached`
    as commit_patch, on a scratch index: no work tree, nothing to clean up), or None when it does
    not apply there."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autoresearch-touch-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        run(repo, "read-tree", commit, env=env)
        code, _, _ = _git(repo, "apply", "--cached", "--whitespace=nowarn", "-", input_text=diff, env=env)
        if code != 0:
            return None
        tree = run(repo, "write-tree", env=env).strip()
    return diff_trees(repo, commit, tree)


# --- reading a commit's tree and checking diffs (research: miners, patch writer) ------------------


def _git(
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


def apply_check(repo: git.Repo, commit: str, diff: str, *, reverse: bool = False) -> str | None:
    """Would `diff` apply to `commit`? None if so, else git apply's error text. With `reverse`:
    would it un-apply (i.e. is the change already in `commit`)?

    Same verdict as `git apply --check` in a worktree of `commit`, but against a throw-away index
    of that tree: no checkout (a llama.cpp checkout is thousands of files) and nothing to clean up
    if the process is killed half-way.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autoresearch-apply-") as tmp:
        env = {"GIT_INDEX_FILE": f"{tmp}/index"}
        code, _, err = _git(repo, "read-tree", commit, env=env)
        if code != 0:
            raise UserError(f"{commit}: cannot read tree ({err.strip().splitlines()[-1:]})")
        flags = ["--reverse"] if reverse else []
        code, _, err = _git(repo, "apply", "--check", "--cached", *flags, "-", input_text=diff, env=env)
    if code == 0:
        return None
    return err.strip() or f"git apply exited {code}"


_FAILED_PATH = re.compile(
    r"^error: (?:patch failed: (?P<a>.+?):\d+|(?P<b>.+?): (?:patch does not apply|does not exist in index"
    r"|already exists in index|does not match index|No such file or directory|wrong type|"
    r"cannot apply binary patch to '.*' without full index line|binary patch does not apply to .*))$"
)


def apply_check_many(
    repo: git.Repo, commit: str, diffs: list[tuple[str, list[str]]], *, batch: int = 200
) -> list[str | None]:
    """`apply_check` for many (diff, the paths it touches) at once: None or git's error per diff.

    Diffs touching disjoint files are checked together in one `git apply --check` against one
    throw-away index of `commit` (a batch applies as a whole exactly when each of its diffs does,
    since none touches another's files); when a batch fails, git names the failing paths and their
    diffs are checked alone for their own error text (so are all of the batch's when a message
    names no path). Thousands of fork commits cost a few dozen git processes, not thousands."""
    import tempfile

    results: list[str | None] = [None] * len(diffs)
    with tempfile.TemporaryDirectory(prefix="autoresearch-apply-") as tmp:
        env = {"GIT_INDEX_FILE": f"{tmp}/index"}
        code, _, err = _git(repo, "read-tree", commit, env=env)
        if code != 0:
            raise UserError(f"{commit}: cannot read tree ({err.strip().splitlines()[-1:]})")

        def check(text: str) -> str | None:
            rc, _, error = _git(repo, "apply", "--check", "--cached", "-", input_text=text, env=env)
            return None if rc == 0 else (error.strip() or f"git apply exited {rc}")

        for group in _disjoint_batches(diffs, batch):
            if len(group) == 1:
                results[group[0]] = check(diffs[group[0]][0])
                continue
            error = check("".join(_ending(diffs[i][0]) for i in group))
            if error is None:
                continue
            owner = {path: i for i in group for path in diffs[i][1]}
            named: set[int] = set()
            for line in error.splitlines():
                m = _FAILED_PATH.match(line)
                path = (m.group("a") or m.group("b")) if m else None
                if path is None or path not in owner:
                    named = set(group)  # a message we cannot attribute: check each alone
                    break
                named.add(owner[path])
            for i in sorted(named):
                results[i] = check(diffs[i][0])
    return results


def _ending(diff: str) -> str:
    return diff if diff.endswith("\n") else diff + "\n"


def _disjoint_batches(diffs: list[tuple[str, list[str]]], size: int) -> list[list[int]]:
    """Indexes of `diffs` in groups of at most `size` whose diffs touch no file in common."""
    groups: list[tuple[list[int], set[str]]] = []
    for i, (_, paths) in enumerate(diffs):
        touched = set(paths)
        for members, files in groups:
            if len(members) < size and not (files & touched):
                members.append(i)
                files |= touched
                break
        else:
            groups.append(([i], touched))
    return [members for members, _ in groups]


@dataclass(frozen=True)
class ThreeWay:
    """A fork commit merged onto another commit by a three-way merge (`three_way`)."""

    diff: str | None
    """The change as a diff against `onto` when it merged cleanly, else None."""
    conflicts: list[str]
    """Paths left with conflicts (empty when it merged)."""
    error: str
    """git's account of what failed (empty when it merged)."""


def three_way(repo: git.Repo, onto: str, diff: str, *, commit: str | None = None) -> ThreeWay:
    """Apply a fork commit's change onto `onto` with a three-way merge whose base is the commit's
    parent in the fork: for each file, the parent's version (the diff's preimage blob), `onto`'s and
    the commit's are merged, as `git apply --3way` does, against a throw-away index (no work tree:
    the mirror is bare, and a killed process leaves nothing behind).

    With `commit` (present in this repository, as a fetched fork's commits are), its diff against its
    first parent is taken again with full blob names, so a stored diff cut at a size cap or with
    ambiguous short names does not matter; else `diff` is used as it is."""
    import tempfile

    if commit is not None and has_commit(repo, commit):
        code, fresh, _ = _git(
            repo, "diff-tree", "-p", "--full-index", "--binary", "--no-color", "--no-ext-diff",
            "--no-renames", f"{commit}^", commit,
        )  # fmt: skip
        if code == 0 and fresh.strip():
            diff = fresh
    with tempfile.TemporaryDirectory(prefix="autoresearch-3way-") as tmp:
        env = {"GIT_INDEX_FILE": f"{tmp}/index"}
        code, _, err = _git(repo, "read-tree", onto, env=env)
        if code != 0:
            raise UserError(f"{onto}: cannot read tree ({err.strip().splitlines()[-1:]})")
        code, _, err = _git(
            repo, "apply", "--3way", "--cached", "--whitespace=nowarn", "-", input_text=diff, env=env
        )
        _, unmerged, _ = _git(repo, "ls-files", "-u", "-z", env=env)
        paths = sorted({entry.split("\t", 1)[1] for entry in unmerged.split("\0") if "\t" in entry})
        if code != 0 or paths:
            return ThreeWay(None, paths, err.strip() or f"git apply --3way left conflicts (exit {code})")
        # --missing-ok: the merge keeps the baseline's other entries as they are; one whose blob a
        # partial copy of the repository lacks (a snapshot without its biggest files) is not its business.
        code, tree, err = _git(repo, "write-tree", "--missing-ok", env=env)
        if code != 0:
            return ThreeWay(None, [], f"git write-tree: {err.strip() or f'exit {code}'}")
        tree = tree.strip()
    merged = run(repo, "diff-tree", "-p", "--no-color", "--no-ext-diff", "--binary", onto, tree)
    if not merged.strip():
        return ThreeWay(None, [], "the three-way merge changes nothing: the baseline has the change already")
    return ThreeWay(merged, [], "")


def show_file(repo: git.Repo, commit: str, path: str) -> str | None:
    """A file's text at a commit, or None if it does not exist there."""
    code, out, _ = _git(repo, "show", f"{commit}:{path}")
    return out if code == 0 else None


def list_files(repo: git.Repo, commit: str, paths: list[str] | None = None) -> list[str]:
    """Paths of the files in a commit's tree (optionally under some folders)."""
    return run(repo, "ls-tree", "-r", "--name-only", commit, "--", *(paths or [])).splitlines()


def grep_count(
    repo: git.Repo, commit: str, terms: list[str], paths: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """For each text file of `commit` that mentions any term (fixed strings, case-insensitive):
    {path: {term: number of matching lines}}. One git grep per term."""
    found: dict[str, dict[str, int]] = {}
    for term in terms:
        code, out, _ = _git(repo, "grep", "-c", "-I", "-i", "-F", "-e", term, commit, "--", *(paths or []))
        if code not in (0, 1):  # 1 = no match
            continue
        for line in out.splitlines():
            # <commit>:<path>:<count>
            _, _, rest = line.partition(":")
            path, _, count = rest.rpartition(":")
            if path and count.isdigit():
                found.setdefault(path, {})[term] = int(count)
    return found


# --- forks: remote refs, fetching, ancestry, batched reads (kb/forks.py) --------------------------


# A remote that wants credentials fails at once instead of waiting for a password on the terminal.
_NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}


def ls_remote(repo: git.Repo, location: str) -> tuple[str | None, dict[str, str]]:
    """(default branch or None when HEAD is detached, {branch: sha}) of a remote or local repository."""
    code, out, err = _git(repo, "ls-remote", "--symref", location, "HEAD", "refs/heads/*", env=_NO_PROMPT)
    if code != 0:
        detail = err.strip().splitlines()
        reason = detail[-1] if detail else f"exit {code}"
        raise UserError(f"{location}: cannot read the repository ({reason})")
    default: str | None = None
    heads: dict[str, str] = {}
    for line in out.splitlines():
        left, _, name = line.partition("\t")
        if left.startswith("ref: ") and name == "HEAD":
            default = left[5:].removeprefix("refs/heads/")
        elif name.startswith("refs/heads/"):
            heads[name.removeprefix("refs/heads/")] = left
    return default, heads


def fetch_branch(repo: git.Repo, location: str, branch: str, dest_ref: str) -> str:
    """Fetch one branch of `location` into `dest_ref` of this repository; return the fetched sha."""
    code, _, err = _git(
        repo,
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        location,
        f"+refs/heads/{branch}:{dest_ref}",
        env=_NO_PROMPT,
    )
    if code != 0:
        detail = err.strip().splitlines()
        reason = detail[-1] if detail else f"exit {code}"
        raise UserError(f"{location}: cannot fetch branch {branch} ({reason})")
    return run(repo, "rev-parse", "--verify", f"{dest_ref}^{{commit}}").strip()


def merge_base(repo: git.Repo, a: str, b: str) -> str | None:
    """The best common ancestor of two commits, or None when they share no history."""
    code, out, err = _git(repo, "merge-base", a, b)
    if code == 1 and not err.strip():
        return None
    if code != 0:
        raise UserError(f"git merge-base {a[:12]} {b[:12]}: {err.strip() or f'exit {code}'}")
    return out.strip()


def is_ancestor(repo: git.Repo, ancestor: str, descendant: str) -> bool:
    code, _, _ = _git(repo, "merge-base", "--is-ancestor", ancestor, descendant)
    return code == 0


def has_commit(repo: git.Repo, sha: str) -> bool:
    code, _, _ = _git(repo, "cat-file", "-e", f"{sha}^{{commit}}")
    return code == 0


def update_ref(repo: git.Repo, ref: str, sha: str) -> None:
    run(repo, "update-ref", ref, sha)


def delete_ref(repo: git.Repo, ref: str) -> None:
    _git(repo, "update-ref", "-d", ref)


def stream(repo: git.Repo, *args: str) -> Iterator[bytes]:
    """Lines (bytes) of a long git command's output as it runs: one process for thousands of commits,
    constant memory. A failing command raises UserError once its output is consumed."""
    import subprocess
    import tempfile

    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            ["git", "--git-dir", str(repo.git_dir), *args],
            cwd=repo.working_tree_dir or repo.git_dir,
            stdout=subprocess.PIPE,
            stderr=errors,
            bufsize=1 << 16,
        )
        assert process.stdout is not None
        finished = False
        try:
            yield from process.stdout
            finished = True
        finally:
            process.stdout.close()
            if not finished:
                process.kill()  # the consumer stopped early
            code = process.wait()
        if code != 0:
            errors.seek(0)
            detail = errors.read().decode("utf-8", "replace").strip().splitlines()
            raise UserError(f"git {args[0]}: {detail[-1] if detail else f'exit {code}'}")


def cherry(repo: git.Repo, upstream: str, head: str) -> dict[str, bool]:
    """For each non-merge commit of `head` not in `upstream`: True when an equivalent change (same
    patch-id) is already in `upstream` since the fork point (`git cherry`)."""
    found: dict[str, bool] = {}
    for line in run(repo, "cherry", upstream, head).splitlines():
        mark, _, sha = line.partition(" ")
        if sha:
            found[sha.strip()] = mark == "-"
    return found


def patch_ids(repo: git.Repo, patches: Path) -> dict[str, str]:
    """{commit sha: stable patch-id} for a file of `commit <sha>` headers each followed by its diff."""
    import subprocess

    with patches.open("rb") as stdin:
        result = subprocess.run(
            ["git", "--git-dir", str(repo.git_dir), "patch-id", "--stable"],
            stdin=stdin,
            capture_output=True,
        )
    if result.returncode != 0:
        raise UserError(f"git patch-id: {result.stderr.decode('utf-8', 'replace').strip()}")
    found: dict[str, str] = {}
    for line in result.stdout.decode("ascii", "replace").splitlines():
        patch_id, _, sha = line.partition(" ")
        if sha:
            found[sha.strip()] = patch_id
    return found


def read_files(repo: git.Repo, commit: str, paths: list[str]) -> dict[str, str]:
    """{path: text} of many files of a commit in one `git cat-file --batch` (missing paths left out)."""
    import subprocess

    if not paths:
        return {}
    request = "".join(f"{commit}:{p}\n" for p in paths).encode()
    result = subprocess.run(
        ["git", "--git-dir", str(repo.git_dir), "cat-file", "--batch"], input=request, capture_output=True
    )
    if result.returncode != 0:
        detail = result.stderr.decode("utf-8", "replace").strip()
        raise UserError(f"git cat-file: {detail or f'exit {result.returncode}'}")
    out = result.stdout
    found: dict[str, str] = {}
    pos = 0
    for path in paths:
        nl = out.index(b"\n", pos)
        header = out[pos:nl].split()
        pos = nl + 1
        if len(header) < 3 or header[1] != b"blob":
            continue  # "<name> missing", or not a file
        size = int(header[2])
        found[path] = out[pos : pos + size].decode("utf-8", errors="replace")
        pos += size + 1
    return found


def checkout_head(path: Path) -> str | None:
    """HEAD of the work tree whose top folder is `path`, or None (not a checkout, or a folder inside one)."""
    import subprocess

    result = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True
    )
    lines = result.stdout.split()
    if result.returncode != 0 or len(lines) != 2:
        return None
    return lines[1] if Path(lines[0]).resolve() == path.resolve() else None


# --- forks whose history shares no commit with the target (kb/forkpoint.py) -----------------------


def unquote_path(raw: bytes) -> str:
    """Paths in git's output with special characters come C-quoted ("a\\tb"); the rest are verbatim."""
    import codecs

    if raw.startswith(b'"') and raw.endswith(b'"'):
        raw = codecs.escape_decode(raw[1:-1])[0]
    return raw.decode("utf-8", "replace")


def commit_graph(repo: git.Repo, tip: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(sha, tree, parents) of every commit reachable from `tip`, children before their parents."""
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for line in run(repo, "log", "--topo-order", "--format=%H %T %P", tip).splitlines():
        sha, tree, *parents = line.split()
        found.append((sha, tree, tuple(parents)))
    return found


def tree_blobs(repo: git.Repo, commit: str, paths: list[str] | None = None) -> dict[str, str]:
    """{path: blob sha} of the files of a commit (optionally under some paths; submodules left out)."""
    out = run(repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *(paths or []))
    found: dict[str, str] = {}
    for entry in out.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "blob":
            found[path] = parts[2]
    return found


def file_sets(repo: git.Repo, *revisions: str) -> dict[str, frozenset[str]]:
    """{sha: the paths it changes} of the non-merge commits of `revisions` (e.g. `b`, `^a`)."""
    out = run(repo, "log", "--no-merges", "--no-renames", "-z", "--format=%x1e%H", "--name-only", *revisions)
    found: dict[str, frozenset[str]] = {}
    for record in out.split("\x1e"):
        sha, *paths = record.split("\0")  # "<sha>\0\n<path>\0<path>\0"
        if sha.strip():
            found[sha.strip()] = frozenset(p.strip("\n") for p in paths if p.strip("\n"))
    return found


def patch_ids_of(repo: git.Repo, shas: list[str]) -> dict[str, str]:
    """{sha: stable patch-id} of commits given by sha: one `diff-tree --stdin` piped into `patch-id`."""
    import subprocess

    if not shas:
        return {}
    base = ["git", "--git-dir", str(repo.git_dir)]
    diff = subprocess.Popen(
        [*base, "diff-tree", "--stdin", "-p", "-r", "--root", "--no-renames", "--no-color", "--no-ext-diff"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert diff.stdin is not None and diff.stdout is not None
    ids = subprocess.Popen(
        [*base, "patch-id", "--stable"], stdin=diff.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    diff.stdout.close()  # patch-id owns the pipe now
    import threading

    def feed() -> None:
        assert diff.stdin is not None
        try:
            diff.stdin.write("".join(f"{sha}\n" for sha in shas).encode())
        finally:
            diff.stdin.close()

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    out, err = ids.communicate()
    writer.join()
    if diff.wait() != 0 or ids.returncode != 0:
        raise UserError(f"git patch-id: {err.decode('utf-8', 'replace').strip() or 'failed'}")
    found: dict[str, str] = {}
    for line in out.decode("ascii", "replace").splitlines():
        patch_id, _, sha = line.partition(" ")
        if sha:
            found[sha.strip()] = patch_id
    return found
