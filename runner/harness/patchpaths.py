"""What a patch touches, decided from what git would apply, and whether the runner allows it.

A patch's headers are text the candidate wrote: C-quoted names, octal escapes, other prefixes
(`--- x/f` / `+++ y/f`), absolute names (`--- /f`), renames and copies all reach the same file as a
plain `a/f b/f`. So the paths are never read from the headers here; they come from git itself:

- `gitrepo.patch_names`: every name `git apply` would use (its own parser; both sides of a rename
  or copy; works without a tree, so it also judges a patch that does not apply yet);
- `gitrepo.tree_changes`: where the patch applies onto the tree it is checked against, the paths
  that really change there, with their modes (symlinks 120000, gitlinks 160000) and link targets.

The union is checked against the protected paths (`protected_paths`: the benchmark and checks
scripts, the workspace config, the experiment template, `target.protect`), and against rules that
hold for every target: `.gitattributes` and `.gitmodules` anywhere (they change how the protected
files are checked out), nothing under `.git`, no absolute or `..` path, no symlink that leaves the
tree or points at a protected path, no gitlink (submodule). One function, `check`, serves the queue
(`queue add`, miners, the patch writer), the runner before it builds a candidate, and the winner
commit (which checks the commit it is about to put on the run branch, `check_commit`).
"""

from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from kb import gitrepo
from kb.config import CONFIG_NAME, Settings
from kb.errors import UserError
from runner.harness.scripts import resolve_scripts

if TYPE_CHECKING:
    import git

    from kb.workspace import Workspace

ALWAYS_PROTECTED = (".gitattributes", ".gitmodules")
"""File names protected in every folder of every target."""
SYMLINK = "120000"
GITLINK = "160000"


@dataclass(frozen=True)
class Touched:
    """Everything a patch touches: the union of git's names and, where it applies, the tree diff."""

    paths: tuple[str, ...]
    changes: tuple[gitrepo.TreeChange, ...]
    """The tree diff where the patch applies onto the checked tree (empty otherwise)."""
    applies: bool | None
    """Whether it applies onto the checked tree; None when no tree was given."""


class PatchUnreadable(UserError):
    """git cannot read the text as a patch at all."""


def protected_paths(ws: Workspace, settings: Settings) -> list[tuple[str, str]]:
    """(pattern, why) pairs; a pattern is a file, a folder (its contents) or a glob."""
    scripts = resolve_scripts(ws, settings)
    found = [
        (scripts.bench.path, "the benchmark script"),
        (scripts.checks.path, "the checks script"),
        (CONFIG_NAME, "the workspace configuration"),
        ("experiment.yaml", "the experiment template"),
        ("runner/harness/experiment.yaml", "the experiment template"),
    ]
    configured = settings.fleet.template
    if configured and not Path(configured).is_absolute():
        found.append((str(PurePosixPath(configured)), "the experiment template"))
    found.extend((entry.strip("/"), "listed in target.protect") for entry in settings.target.protect)
    return found


def path_refusal(name: str, protected: list[tuple[str, str]]) -> str | None:
    """Why the runner refuses a patch that writes `name`, or None."""
    if name.startswith("/") or ".." in PurePosixPath(name).parts:
        return f"touches {name} (outside the tree)"
    clean = str(PurePosixPath(name))
    parts = PurePosixPath(clean).parts
    if ".git" in parts:
        return f"touches {clean} (git's own folder)"
    if parts and parts[-1] in ALWAYS_PROTECTED:
        return f"touches {clean} ({parts[-1]} changes how every file is checked out)"
    for pattern, why in protected:
        if clean == pattern or clean.startswith(pattern + "/") or fnmatch.fnmatchcase(clean, pattern):
            return f"touches {clean} ({why}: {pattern})"
    return None


def refusal(files: list[str], protected: list[tuple[str, str]]) -> str | None:
    """Why a patch touching `files` is refused, or None when it touches nothing protected."""
    for name in files:
        why = path_refusal(name, protected)
        if why:
            return why
    return None


def touched(diff: str, repo: git.Repo | None = None, base: str | None = None) -> Touched:
    """What `diff` touches: git's names, plus the tree diff where it applies onto `base`."""
    try:
        names = gitrepo.patch_names(diff, repo)
    except UserError as exc:
        raise PatchUnreadable(str(exc)) from None
    changes: list[gitrepo.TreeChange] = []
    applies: bool | None = None
    if repo is not None and base is not None:
        found = gitrepo.tree_changes(repo, base, diff)
        applies = found is not None
        changes = found or []
    seen = dict.fromkeys(names)
    for change in changes:
        seen.setdefault(change.path, None)
    return Touched(tuple(seen), tuple(changes), applies)


def change_refusal(change: gitrepo.TreeChange, protected: list[tuple[str, str]]) -> str | None:
    """The rules on what a change makes of its path: no gitlink, no symlink leaving the tree or
    pointing at a protected path."""
    if GITLINK in (change.old_mode, change.new_mode):
        return f"touches {change.path} (a gitlink: submodules are not measured)"
    if change.new_mode == SYMLINK and change.link_target is not None:
        target = change.link_target
        if target.startswith("/"):
            return f"adds {change.path} -> {target} (a symlink out of the tree)"
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(change.path), target))
        if resolved == ".." or resolved.startswith("../"):
            return f"adds {change.path} -> {target} (a symlink out of the tree)"
        why = path_refusal(resolved, protected)
        if why:
            return f"adds {change.path} -> {target} (a symlink onto a protected path: {why})"
        above = next((p for p, _ in protected if resolved == "." or p.startswith(resolved + "/")), None)
        if above is not None:
            return f"adds {change.path} -> {target} (a symlink onto a folder holding {above})"
    return None


def refusal_of(found: Touched, protected: list[tuple[str, str]]) -> str | None:
    """Why the runner refuses what `touched` found, or None."""
    why = refusal(list(found.paths), protected)
    if why:
        return why
    for change in found.changes:
        why = change_refusal(change, protected)
        if why:
            return why
    return None


def check(
    diff: str, protected: list[tuple[str, str]], repo: git.Repo | None = None, base: str | None = None
) -> str | None:
    """Why `diff` is refused (a protected path, by any spelling git accepts), or None. Raises
    PatchUnreadable when git cannot read it as a patch."""
    return refusal_of(touched(diff, repo, base), protected)


def check_commit(repo: git.Repo, parent: str, commit: str, protected: list[tuple[str, str]]) -> str | None:
    """Why a commit about to land on a run branch is refused: what really changed from its parent."""
    changes = gitrepo.diff_trees(repo, parent, commit)
    return refusal_of(Touched(tuple(c.path for c in changes), tuple(changes), True), protected)


class ProtectedPath(UserError):
    """A patch or commit touches a protected path (the experiment is `refused`)."""


def baseline_of(ws: Workspace) -> tuple[git.Repo, str]:
    """The workspace's mirror and the commit of its configured baseline."""
    settings = ws.settings
    repo = gitrepo.open_repo(ws.mirror_path)
    return repo, settings.target.baseline_commit or gitrepo.resolve(repo, settings.target.baseline)


def workspace_check(ws: Workspace, diff: str, base: str | None = None) -> str | None:
    """`check` against the workspace's protected paths and its baseline (or `base`) in the mirror."""
    repo, commit = baseline_of(ws)
    return check(diff, protected_paths(ws, ws.settings), repo, base or commit)
