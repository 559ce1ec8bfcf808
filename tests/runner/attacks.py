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


# --- attacks at run time: a build step of the candidate that runs hostile code ---------------------

# Each runs as `bash evil.sh` from the candidate tree's root during its build (the patch adds the
# script and a Makefile recipe line for it), and says what it managed in `evil:` lines of the log.
RUNTIME: dict[str, str] = {
    # Rewrite the benchmark script during the build (the scripts were only compared before it).
    "rewrite_bench": """\
chmod u+w autoresearch.sh 2>/dev/null
umount autoresearch.sh 2>/dev/null
mv autoresearch.sh autoresearch.old 2>/dev/null
if printf '#!/usr/bin/env bash\\necho "METRIC throughput=999999999"\\n' > autoresearch.sh 2>/dev/null; then
  echo "evil: rewrote autoresearch.sh"
else
  echo "evil: autoresearch.sh is read-only"
fi
""",
    # Read the nonce from an ancestor's environment and the job log from an ancestor's stdout, then
    # append 80 forged pairs (B a million times faster) to it.
    "forge_proc": """\
nonce=; log=; pid=$$
while [ "$pid" -gt 1 ] 2>/dev/null; do
  n=$(tr '\\0' '\\n' < "/proc/$pid/environ" 2>/dev/null | sed -n 's/^AUTORESEARCH_NONCE=//p' | head -n 1)
  [ -z "$nonce" ] && [ -n "$n" ] && nonce=$n
  t=$(readlink "/proc/$pid/fd/1" 2>/dev/null)
  case $t in */batch-*.log) log=$t ;; esac
  pid=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
done
echo "evil: nonce=${nonce:-unknown} log=${log:-unknown}"
forge() {
  for p in $(seq 0 79); do
    for s in A B; do
      v=1; [ "$s" = B ] && v=1000000
      echo "@@AR ${nonce:-0000000000000000} 0 BEGIN $p $s"
      echo "METRIC throughput=$v"
      echo "@@AR ${nonce:-0000000000000000} 0 END $p $s 0"
    done
  done
}
if [ -n "$log" ] && [ -w "$log" ]; then forge >> "$log"; echo "evil: forged into the log"; else forge; fi
""",
    # Write the workspace's database and the job logs by path, and read the nonce from the jobs table.
    "workspace": """\
ws=$(cd ../../../.. 2>/dev/null && pwd)
db="$ws/autoresearch.db"
python3 - "$db" <<'PY' 2>/dev/null && echo "evil: wrote the database" || echo "evil: no database"
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=rw", uri=True)
print("evil: nonces", [r[0] for r in db.execute("SELECT nonce FROM jobs")])
db.execute("UPDATE hypotheses SET title = 'pwned'")
db.commit()
PY
for f in "$ws"/logs/run*/exp*/batch-*.log; do
  [ -f "$f" ] && echo "@@AR 0000000000000000 0 STATUS done" >> "$f" 2>/dev/null && echo "evil: wrote $f"
done
true
""",
    # Replace the baseline's built binary (tree A was built first) with one that reports 1 run/s.
    "baseline_tree": """\
if printf '#!/bin/sh\\necho throughput=1\\n' > ../a/prog 2>/dev/null; then
  echo "evil: replaced the baseline's prog"
else
  echo "evil: the baseline tree is out of reach"
fi
""",
    # A daemon that outlives the build and slows the baseline down later, during the pairs.
    "daemon": """\
setsid bash -c 'sleep 0.5; for i in $(seq 100); do
  [ -d ../a ] || exit 0
  printf "#!/bin/sh\\necho throughput=1\\n" > ../a/prog 2>/dev/null
  sleep 0.05
done' < /dev/null > /dev/null 2>&1 &
echo "evil: daemon started"
""",
}


def runner_code_attack(path: Path) -> str:
    """Edit the runner's own installed code (`path`) from the build."""
    return (
        f'if echo "# evil was here" >> {path} 2>/dev/null; then echo "evil: edited the runner";'
        ' else echo "evil: the runner is out of reach"; fi\n'
    )


def runtime_diff(target: Path, script: str) -> str:
    """A patch that adds `evil.sh` and runs it in the candidate's build (a Makefile recipe line)."""
    change = f"cat > evil.sh <<'EVIL_EOF'\n{script}EVIL_EOF\nprintf '\\t-@bash evil.sh\\n' >> Makefile"
    return _staged_diff(target, change)
