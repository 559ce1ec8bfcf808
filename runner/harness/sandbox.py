"""The harness folder the runner writes next to an experiment's trees, and the sandbox's settings.

Every experiment's workdir gets `.autoresearch-harness/` (the run's own copy, written from the
fresh baseline tree before anything of the candidate ran): the harness the template's run script
sources (runner/harness/harness.sh), the sandbox helper's source (runner/harness/ar-sandbox.c,
compiled on the worker), the benchmark and checks scripts as placed, and what the baseline holds at
every protected path (`protected.list`, `files.sha256`, `dirs.list`, `listing`). The harness binds
those copies read-only into the steps and verifies both trees against them after every step. The
same folder travels with the workdir to a SkyPilot cluster, so a cluster runs the same harness.

The template's envs for it come from `[sandbox]` (`sandbox_envs`); each job reports the isolation
it ran under in a `SANDBOX` marker, recorded on the experiment (`isolation` in its meta).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from kb import gitrepo
from kb.errors import UserError
from kb.packaged import packaged
from runner.harness.patchpaths import ALWAYS_PROTECTED

if TYPE_CHECKING:
    import git

    from kb.workspace import Workspace
    from runner.harness.scripts import Scripts

HARNESS_DIR = ".autoresearch-harness"
HARNESS_FILES = ("harness.sh", "ar-sandbox.c")
ISOLATION = ("uid+pid+mount", "userns+pid+mount", "none")
"""Strongest first: a user of its own (root can switch), a user namespace, nothing."""
_GLOB = frozenset("*?[")


def harness_text(name: str) -> bytes:
    return packaged("runner.harness", name).read_bytes()


def weakest(*modes: str | None) -> str:
    """The weakest of the isolations reported (an unknown one counts as none)."""
    found = [m if m in ISOLATION else "none" for m in modes if m is not None]
    return max(found, key=ISOLATION.index) if found else "none"


def sandbox_envs(ws: Workspace) -> dict[str, str]:
    """The template's sandbox envs for this workspace (the same for local and SkyPilot jobs)."""
    settings = ws.settings
    conf = settings.sandbox
    root = ws.root.resolve()
    # Files the target's env names (a model, a golden output) are read by the steps: read-only.
    named = [v for v in settings.target.env.values() if v.startswith(("/", "~/"))]
    expose = [p for p in [*conf.expose, *named] if not _holds(p, root)]
    return {
        "AUTORESEARCH_SANDBOX": conf.mode,
        "AUTORESEARCH_SANDBOX_METHOD": conf.method,
        "AUTORESEARCH_SANDBOX_USER": conf.user,
        "AUTORESEARCH_HIDE": str(root),
        "AUTORESEARCH_EXPOSE": ":".join(expose),
        "AUTORESEARCH_SHARED": ":".join(p for p in conf.shared if not _holds(p, root)),
    }


def _holds(path: str, root: Path) -> bool:
    """Would exposing `path` show the workspace again (it is the workspace or a folder above it)?"""
    if path.startswith("~/"):
        path = str(Path.home() / path[2:])
    try:
        return root == Path(path).resolve() or root.is_relative_to(Path(path).resolve())
    except OSError:
        return False


def protected_entries(
    repo: git.Repo, commit: str, tree: Path, scripts: Scripts, protected: list[tuple[str, str]]
) -> dict[str, str]:
    """{path: kind} of what is protected in `tree` (the baseline at `commit`): s = the placed
    benchmark or checks script, d = a folder, f = a file or a symlink."""
    entries: dict[str, str] = {scripts.bench.path: "s", scripts.checks.path: "s"}
    tracked: list[str] | None = None
    for pattern, _ in protected:
        if _GLOB & set(pattern):
            if tracked is None:
                tracked = gitrepo.list_files(repo, commit)
            from fnmatch import fnmatchcase

            for name in tracked:
                if fnmatchcase(name, pattern):
                    entries.setdefault(name, "f")
            continue
        path = tree / pattern
        if path.is_symlink() or path.is_file():
            entries.setdefault(str(PurePosixPath(pattern)), "f")
        elif path.is_dir():
            entries.setdefault(str(PurePosixPath(pattern)), "d")
    if tracked is None:
        tracked = gitrepo.list_files(repo, commit)
    for name in tracked:
        if PurePosixPath(name).name in ALWAYS_PROTECTED:
            entries.setdefault(name, "f")
    for name in entries:
        if "\t" in name or "\n" in name:
            raise UserError(f"protected path {name!r}: a tab or a newline in its name cannot be protected")
    return entries


def write_harness(workdir: Path, tree: Path, entries: dict[str, str], scripts: Scripts) -> Path:
    """Write `<workdir>/.autoresearch-harness/` from the fresh baseline tree `tree`."""
    folder = workdir / HARNESS_DIR
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "files").mkdir(parents=True)
    for name in HARNESS_FILES:
        (folder / name).write_bytes(harness_text(name))
    for script in (scripts.bench, scripts.checks):
        copy = folder / "files" / script.path
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes((tree / script.path).read_bytes())
        copy.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    (folder / "protected.list").write_text(
        "".join(f"{kind}\t{path}\n" for path, kind in sorted(entries.items())), encoding="utf-8"
    )
    sums: list[str] = []
    walked: list[str] = []
    listing: list[bytes] = []
    for path, kind in sorted(entries.items()):
        full = tree / path
        if kind == "d" or full.is_symlink():
            walked.append(path)
            listing.extend(_find_lines(tree, path))
            if kind == "d":
                sums.extend(_sum_line(tree, name) for name in _files_under(tree, path))
        elif full.is_file():
            sums.append(_sum_line(tree, path))
    (folder / "files.sha256").write_text("".join(sums), encoding="utf-8")
    (folder / "dirs.list").write_text("".join(f"{p}\n" for p in walked), encoding="utf-8")
    (folder / "listing").write_bytes(b"".join(sorted(listing)))
    return folder


def _files_under(tree: Path, top: str) -> list[str]:
    found: list[str] = []
    for folder, dirs, files in os.walk(tree / top):
        rel = PurePosixPath(top) / Path(folder).relative_to(tree / top).as_posix()
        for name in files:
            if (Path(folder) / name).is_file() and not (Path(folder) / name).is_symlink():
                found.append(str(rel / name))
        dirs.sort()
    return found


def _sum_line(tree: Path, path: str) -> str:
    """One line of `sha256sum` output (its escaping for names holding a backslash)."""
    digest = hashlib.sha256((tree / path).read_bytes()).hexdigest()
    if "\\" in path:
        return f"\\{digest}  {path.replace(chr(92), chr(92) * 2)}\n"
    return f"{digest}  {path}\n"


_FIND_TYPES = {
    stat.S_IFDIR: "d",
    stat.S_IFREG: "f",
    stat.S_IFLNK: "l",
    stat.S_IFIFO: "p",
    stat.S_IFSOCK: "s",
    stat.S_IFBLK: "b",
    stat.S_IFCHR: "c",
}


def _find_lines(tree: Path, top: str) -> list[bytes]:
    """What `find TOP -printf '%y %p %l\\n'` prints in `tree` (TOP itself and everything below)."""

    def line(rel: str) -> bytes:
        full = tree / rel
        mode = full.lstat().st_mode
        kind = _FIND_TYPES.get(stat.S_IFMT(mode), "U")
        link = os.readlink(full) if kind == "l" else ""
        return os.fsencode(f"{kind} {rel} {link}\n")

    lines = [line(top)]
    if (tree / top).is_dir() and not (tree / top).is_symlink():
        for folder, dirs, files in os.walk(tree / top):
            base = PurePosixPath(top) / Path(folder).relative_to(tree / top).as_posix()
            lines.extend(line(str(base / name)) for name in [*dirs, *files])
    return lines
