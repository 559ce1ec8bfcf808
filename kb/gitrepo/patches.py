"""What a patch touches and whether it applies, as git itself decides: the paths of a diff, tree
diffs, `git apply --check` (one diff, or many at once), the three-way merge of a fork commit,
and reading files of a commit's tree (research: miners, patch writer; runner/harness/patchpaths.py
holds the policy built on it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kb.errors import UserError
from kb.gitrepo.plumbing import has_commit, run, run_unchecked

if TYPE_CHECKING:
    import git


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
        code, _, _ = run_unchecked(
            repo, "apply", "--cached", "--whitespace=nowarn", "-", input_text=diff, env=env
        )
        if code != 0:
            return None
        tree = run(repo, "write-tree", env=env).strip()
    return diff_trees(repo, commit, tree)


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
        code, _, err = run_unchecked(repo, "read-tree", commit, env=env)
        if code != 0:
            raise UserError(f"{commit}: cannot read tree ({err.strip().splitlines()[-1:]})")
        flags = ["--reverse"] if reverse else []
        code, _, err = run_unchecked(
            repo, "apply", "--check", "--cached", *flags, "-", input_text=diff, env=env
        )
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
        code, _, err = run_unchecked(repo, "read-tree", commit, env=env)
        if code != 0:
            raise UserError(f"{commit}: cannot read tree ({err.strip().splitlines()[-1:]})")

        def check(text: str) -> str | None:
            rc, _, error = run_unchecked(repo, "apply", "--check", "--cached", "-", input_text=text, env=env)
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
        code, fresh, _ = run_unchecked(
            repo, "diff-tree", "-p", "--full-index", "--binary", "--no-color", "--no-ext-diff",
            "--no-renames", f"{commit}^", commit,
        )  # fmt: skip
        if code == 0 and fresh.strip():
            diff = fresh
    with tempfile.TemporaryDirectory(prefix="autoresearch-3way-") as tmp:
        env = {"GIT_INDEX_FILE": f"{tmp}/index"}
        code, _, err = run_unchecked(repo, "read-tree", onto, env=env)
        if code != 0:
            raise UserError(f"{onto}: cannot read tree ({err.strip().splitlines()[-1:]})")
        code, _, err = run_unchecked(
            repo, "apply", "--3way", "--cached", "--whitespace=nowarn", "-", input_text=diff, env=env
        )
        _, unmerged, _ = run_unchecked(repo, "ls-files", "-u", "-z", env=env)
        paths = sorted({entry.split("\t", 1)[1] for entry in unmerged.split("\0") if "\t" in entry})
        if code != 0 or paths:
            return ThreeWay(None, paths, err.strip() or f"git apply --3way left conflicts (exit {code})")
        # --missing-ok: the merge keeps the baseline's other entries as they are; one whose blob a
        # partial copy of the repository lacks (a snapshot without its biggest files) is not its business.
        code, tree, err = run_unchecked(repo, "write-tree", "--missing-ok", env=env)
        if code != 0:
            return ThreeWay(None, [], f"git write-tree: {err.strip() or f'exit {code}'}")
        tree = tree.strip()
    merged = run(repo, "diff-tree", "-p", "--no-color", "--no-ext-diff", "--binary", onto, tree)
    if not merged.strip():
        return ThreeWay(None, [], "the three-way merge changes nothing: the baseline has the change already")
    return ThreeWay(merged, [], "")


def show_file(repo: git.Repo, commit: str, path: str) -> str | None:
    """A file's text at a commit, or None if it does not exist there."""
    code, out, _ = run_unchecked(repo, "show", f"{commit}:{path}")
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
        code, out, _ = run_unchecked(
            repo, "grep", "-c", "-I", "-i", "-F", "-e", term, commit, "--", *(paths or [])
        )
        if code not in (0, 1):  # 1 = no match
            continue
        for line in out.splitlines():
            # <commit>:<path>:<count>
            _, _, rest = line.partition(":")
            path, _, count = rest.rpartition(":")
            if path and count.isdigit():
                found.setdefault(path, {})[term] = int(count)
    return found


def worktree_diff(path: Path, base: str) -> str:
    """The change a work tree makes against the commit `base`, as one unified diff: commits on top
    of it, staged and unstaged edits and new files (untracked and not ignored) alike, the way a
    coding agent leaves its checkout. Read through a scratch copy of the work tree's index, so the
    user's own index is left as it was; "" when nothing differs."""
    import shutil
    import tempfile

    from kb.gitrepo.plumbing import open_repo

    repo = open_repo(path)
    if repo.bare or repo.working_tree_dir is None:
        raise UserError(f"{path}: a bare repository, not a work tree")
    if not has_commit(repo, base):
        raise UserError(
            f"{path}: has no commit {base[:12]} (the baseline); make the work tree from the target "
            "(git clone it, or git worktree add)"
        )
    index = Path(repo.working_tree_dir) / run(repo, "rev-parse", "--git-path", "index").strip()
    with tempfile.TemporaryDirectory(prefix="autoresearch-worktree-") as tmp:
        scratch = Path(tmp) / "index"
        if index.is_file():
            shutil.copyfile(index, scratch)  # its stat cache: only changed files are read again
        env = {"GIT_INDEX_FILE": str(scratch)}
        run(repo, "add", "--all", "--", ".", env=env)
        return run(repo, "diff", "--cached", "--no-color", "--no-ext-diff", "--binary", base, "--", env=env)
