"""Hostile patches for the runner's test target: one edit of a protected path in every spelling git
accepts (quoted and octal-escaped headers, other prefixes, absolute names, renames, copies, a mode
change, a binary patch, `..`, symlinks, a gitlink, .gitattributes/.gitmodules), each made with git
itself on a scratch clone of the target so that git would really apply it."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from tests.runner.runner_target import GIT_ENV, make_diff


def _git(cwd: Path, *args: str, input_text: str | None = None) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        input=input_text,
        env={**os.environ, **GIT_ENV},
    ).stdout


def _staged_diff(target: Path, change: str, *flags: str, add: bool = True) -> str:
    """The staged diff after running the shell `change` in a scratch clone of the target (and
    `git add -A`, unless the change stages what it means itself)."""
    with tempfile.TemporaryDirectory(prefix="attack-") as tmp:
        clone = Path(tmp) / "t"
        _git(Path(tmp), "clone", "-q", str(target), str(clone))
        subprocess.run(["bash", "-c", change], cwd=clone, check=True, env={**os.environ, **GIT_ENV})
        if add:
            _git(clone, "add", "-A")
        return _git(clone, "diff", "--cached", "--binary", *flags)


def _quoted(diff: str, name: str, spelled: str) -> str:
    """The same diff with its headers naming `name` C-quoted as git would (`"a/<spelled>"`)."""
    return (
        diff.replace(f"diff --git a/{name} b/{name}", f'diff --git "a/{spelled}" "b/{spelled}"')
        .replace(f"--- a/{name}", f'--- "a/{spelled}"')
        .replace(f"+++ b/{name}", f'+++ "b/{spelled}"')
    )


def _traditional(diff: str, old: str, new: str) -> str:
    """A diff --git diff rewritten as a plain unified diff with other header names."""
    body = [line for line in diff.splitlines(keepends=True) if not line.startswith(("diff --git", "index "))]
    out = []
    for line in body:
        if line.startswith("--- "):
            out.append(f"--- {old}\n")
        elif line.startswith("+++ "):
            out.append(f"+++ {new}\n")
        else:
            out.append(line)
    return "".join(out)


def attack_diffs(target: Path) -> dict[str, str]:
    """name -> a diff that changes (or reads, for copies) a protected path of the runner target."""
    inflate = make_diff(target, "inflate")  # the benchmark reports 10x more: `METRIC throughput=1...`
    bench = "autoresearch.sh"
    honest = make_diff(target, "speedup")
    return {
        "quoted": _quoted(inflate, bench, bench),
        "octal": _quoted(inflate, bench, "autoresearch\\056sh"),
        "prefixes": _traditional(inflate, f"x/{bench}", f"y/{bench}"),
        "absolute": _traditional(inflate, f"/{bench}", f"/{bench}"),
        "dotdot": _traditional(inflate, f"a/../{bench}", f"b/../{bench}"),
        "mixed": honest + _quoted(inflate, bench, bench),
        "rename_from": _staged_diff(
            target, f"git mv {bench} bench-old.sh && printf 'echo METRIC throughput=1e9\\n' > {bench}", "-M"
        ),
        "rename_onto": _staged_diff(target, "git mv .gitignore experiment.yaml", "-M"),
        "copy_from": _staged_diff(
            target, f"mkdir -p tools && cp {bench} tools/bench.sh", "-C", "--find-copies-harder"
        ),
        "mode": _staged_diff(target, f"chmod 644 {bench}"),
        "delete": _staged_diff(target, "git rm -q autoresearch.checks.sh"),
        "binary": _staged_diff(target, f"printf 'echo METRIC throughput=1e9\\n\\0' > {bench}"),
        "symlink_protected": _staged_diff(target, f"ln -s {bench} run-bench.sh"),
        "symlink_out": _staged_diff(target, "ln -s ../../../autoresearch.db results.db"),
        "symlink_absolute": _staged_diff(target, "ln -s /etc/passwd users.txt"),
        "gitlink": _staged_diff(
            target, "git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),vendor/sub", add=False
        ),
        "gitattributes": _staged_diff(
            target, "mkdir -p sub && printf '* text eol=crlf\\n' > sub/.gitattributes"
        ),
        "gitmodules": _staged_diff(target, "printf '[submodule \"x\"]\\n\\tpath = x\\n' > .gitmodules"),
    }
