"""Make the demo's git repositories: the upstream target and a fork of it.

`build(dest)` creates `dest/upstream`, a repository holding `target/` as one baseline commit,
and `dest/fork`, a clone of it with the patches in `fork/` applied in order with `git am`.
Author, committer and dates are fixed, so the same files always give the same shas.

Run as a script to try it by hand: `python examples/demo/build_repos.py /tmp/demo-repos`.
"""

import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kb.errors import UserError

HERE = Path(__file__).resolve().parent
TARGET_DIR = HERE / "target"
FORK_DIR = HERE / "fork"
ARTICLES_DIR = HERE / "articles"

BASELINE_MESSAGE = "demo: baseline\n\nThe demo target as shipped with autoresearch.\n"
BASELINE_DATE = "2025-01-06T09:00:00+00:00"
UPSTREAM_IDENTITY = ("Demo Upstream", "upstream@demo.invalid")
FORK_COMMITTER = ("Demo Fork", "fork@demo.invalid")
BRANCH = "main"

# Build outputs that may sit in target/ after a manual `make`; never part of the baseline.
_BUILD_OUTPUTS = {"bench", "build"}
_SCRIPTS = ("autoresearch.sh", "autoresearch.checks.sh")


@dataclass(frozen=True)
class ForkPatch:
    """One patch of the fork and what the runner should conclude when it measures it."""

    file: str
    subject: str
    kind: str
    expected: tuple[str, ...]  # experiment statuses (DESIGN.md) a correct runner may reach


FORK_PATCHES: tuple[ForkPatch, ...] = (
    ForkPatch(
        "0001-cpu-fuse-rms-norm-mul.patch",
        "cpu: fuse RMS_NORM + MUL into one pass",
        "speedup: fuses two memory passes (the accel backend's fusion)",
        ("kept",),
    ),
    ForkPatch(
        "0002-cpu-matvec-row-order.patch",
        "cpu: walk Q8_0 weights row by row in mul_mat",
        "speedup: loop order of the quantized matrix-vector product",
        ("kept",),
    ),
    ForkPatch(
        "0003-cpu-tidy-elementwise.patch",
        "cpu: tidy the elementwise ops (no functional change)",
        "neutral: renames and comments, the same machine code",
        ("discarded", "inconclusive"),
    ),
    ForkPatch(
        "0004-cpu-softmax-skip-mask.patch",
        "cpu: skip the mask add in soft_max",
        "wrong: drops the softmax mask; the checks fail",
        ("checks_failed",),
    ),
    ForkPatch(
        "0005-cpu-rms-norm-double-sum.patch",
        "cpu: accumulate the RMS_NORM sum of squares in double",
        "slowdown: one serial double sum instead of eight float lanes",
        ("discarded",),
    ),
    ForkPatch(
        "0006-bench-best-of-five.patch",
        "bench: report the best of five throughput samples",
        "cheat: edits autoresearch.sh to inflate the metric",
        ("refused",),
    ),
)


class DemoRepoError(UserError):
    """The destination or a git step is unusable; the message names it and says why."""


def _git_env(identity: tuple[str, str], date: str | None) -> dict[str, str]:
    env = dict(os.environ)
    # Ignore the user's and the system's git config (hooks, signing, templates, default branch).
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_AUTHOR_NAME"], env["GIT_AUTHOR_EMAIL"] = identity
    env["GIT_COMMITTER_NAME"], env["GIT_COMMITTER_EMAIL"] = identity
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    else:  # the dates come from the patches (git am)
        env.pop("GIT_AUTHOR_DATE", None)
        env.pop("GIT_COMMITTER_DATE", None)
    return env


def _git(repo: Path, *args: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise DemoRepoError(
            f"{repo}: git {' '.join(args)} failed: {detail[0] if detail else proc.returncode}"
        )
    return proc.stdout


def _ignore_build_outputs(directory: str, names: list[str]) -> set[str]:
    if Path(directory).resolve() == TARGET_DIR:
        return _BUILD_OUTPUTS & set(names)
    return {"__pycache__"} & set(names)


def _fresh_dir(path: Path) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise DemoRepoError(f"{path}: already exists and is not an empty folder")


def patch_files() -> list[Path]:
    """The fork's patches in the order they are applied."""
    files = [FORK_DIR / p.file for p in FORK_PATCHES]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise DemoRepoError(f"{missing[0]}: fork patch is missing")
    return files


def build_upstream(dest: Path) -> Path:
    """Create `dest` as a repository with `target/` committed once on branch main."""
    _fresh_dir(dest)
    shutil.copytree(TARGET_DIR, dest, ignore=_ignore_build_outputs, dirs_exist_ok=True)
    for script in _SCRIPTS:
        path = dest / script
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    env = _git_env(UPSTREAM_IDENTITY, BASELINE_DATE)
    _git(dest, "init", "-q", "-b", BRANCH, env=env)
    _git(dest, "add", "-A", env=env)
    _git(dest, "commit", "-q", "--no-verify", "-m", BASELINE_MESSAGE, env=env)
    return dest


def build_fork(upstream: Path, dest: Path) -> Path:
    """Clone `upstream` into `dest` and apply the fork's patches with `git am`."""
    _fresh_dir(dest)
    env = _git_env(FORK_COMMITTER, None)
    _git(dest.parent, "clone", "-q", str(upstream), str(dest), env=env)
    # Committer date = author date (the patch's Date:), so the fork's shas are fixed too.
    _git(
        dest,
        "am",
        "-q",
        "--committer-date-is-author-date",
        *[str(p) for p in patch_files()],
        env=env,
    )
    return dest


def build(dest: Path) -> tuple[Path, Path]:
    """Create `dest/upstream` and `dest/fork`; return their paths (upstream, fork)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    upstream = build_upstream(dest / "upstream")
    fork = build_fork(upstream, dest / "fork")
    return upstream, fork


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: build_repos.py DEST", file=sys.stderr)
        return 2
    try:
        upstream, fork = build(Path(argv[1]))
    except DemoRepoError as exc:
        print(f"build_repos: {exc}", file=sys.stderr)
        return 1
    print(f"upstream: {upstream}")
    print(f"fork:     {fork}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
