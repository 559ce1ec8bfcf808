"""A tiny real C target for the runner's tests and benchmark: gcc-built, ~25 ms per benchmark run.

`prog` runs a hash chain `reps()` times after an unused warm-up (3/4 of its work) and times
itself; `autoresearch.sh` turns its output into `METRIC throughput=<runs per second>`;
`autoresearch.checks.sh` compares its result with the baseline's. Candidate patches (`EDITS`)
change the warm-up, `reps()` or the output, so each one has a known truth: real speedups, a no-op,
a wrong result, a slowdown, a hang, a `nan` metric, a noisy one that can never be decided, one
that touches the benchmark script, and one that does not apply (`stale_diff`).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kb.workspace import Workspace

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}

ITERS = int(os.environ.get("AUTORESEARCH_TEST_ITERS", "1000000"))

PROG = """\
/* Runner test target: a hash chain of ITERS steps, run reps() times after an unused warm-up. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long n_iter = ITERS;
static volatile unsigned long sink; /* every call of work() must really run */

static unsigned long work(unsigned long n) {
    unsigned long s = 1;
    for (unsigned long i = 0; i < n; i++) s = s * 31u + (i ^ (s >> 7));
    sink = s;
    return s;
}

static unsigned long warmup_iters(void) {
    return 9 * n_iter;
}

static int reps(void) {
    return 3;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
    double t0 = seconds();
    volatile unsigned long warm = work(warmup_iters());
    (void)warm;
    unsigned long r = 0;
    int k = reps();
    for (int rep = 0; rep < k; rep++) r = work(n_iter);
    double t1 = seconds();
    printf("result=%lu\\n", r % 1000003UL);
    printf("throughput=%.4f\\n", 1.0 / (t1 - t0));
    return 0;
}
"""

MAKEFILE = """\
prog: prog.c
\tcc -O1 -DITERS={iters}UL -o prog prog.c
"""

BENCH = """\
#!/usr/bin/env bash
# Benchmark: one run of ./prog, which times its own work.
set -euo pipefail
out=$(./prog)
printf '%s\\n' "$out" | sed -n 's/^throughput=/METRIC throughput=/p'
"""

CHECKS = """\
#!/usr/bin/env bash
# Checks: the result must be the baseline's.
set -euo pipefail
got=$(./prog | sed -n 's/^result=//p')
if [ "$got" != "{expected}" ]; then echo "wrong result: $got (want {expected})"; exit 1; fi
echo "checks ok"
"""

# name -> (file, old text, new text, title)
EDITS: dict[str, tuple[str, str, str, str]] = {
    "speedup": ("prog.c", "    return 9 * n_iter;\n", "    return 0;\n", "Skip the unused warm-up"),
    "speedup2": ("prog.c", "    return 3;\n", "    return 1;\n", "Drop the redundant repetition"),
    "noop": (
        "prog.c",
        "static int reps(void) {\n",
        "/* Reps of the work. */\nstatic int reps(void) {\n",
        "Document reps()",
    ),
    "wrong": ("prog.c", "r % 1000003UL);", "(r + 1) % 1000003UL);", "Faster modulo (wrong)"),
    "slowdown": ("prog.c", "    return 3;\n", "    return 27;\n", "Repeat the work more"),
    "hang": (
        "prog.c",
        "    return 3;\n",
        "    for (;;) {}\n    return 3;\n",
        "Wait for a signal that never comes",
    ),
    "nan": (
        "prog.c",
        'printf("throughput=%.4f\\n", 1.0 / (t1 - t0));',
        'printf("throughput=nan\\n");',
        "Report the throughput differently",
    ),
    # 4x slower on odd pairs, 4x faster on even ones: no number of pairs can decide it.
    "noisy": (
        "prog.c",
        "    return 9 * n_iter;\n",
        '    const char *p = getenv("AUTORESEARCH_PAIR");\n'
        "    return (p && atoi(p) % 2) ? 45 * n_iter : 0;\n",
        "Adaptive warm-up",
    ),
    # Same work, a clock ten times faster: the binary times itself (README: Threat model).
    "fake_clock": (
        "prog.c",
        'printf("throughput=%.4f\\n", 1.0 / (t1 - t0));',
        'printf("throughput=%.4f\\n", 10.0 / (t1 - t0));',
        "Count the throughput per batch of ten",
    ),
    "inflate": (
        "autoresearch.sh",
        "s/^throughput=/METRIC throughput=/p",
        "s/^throughput=/METRIC throughput=1/p",
        "Tune the benchmark",
    ),
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env={**os.environ, **GIT_ENV}
    ).stdout


_EXPECTED: dict[int, str] = {}


def expected_result(iters: int = ITERS) -> str:
    """The baseline's result line, computed once per process with the real compiler."""
    if iters not in _EXPECTED:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "prog.c"
            src.write_text(PROG)
            subprocess.run(
                ["cc", "-O1", f"-DITERS={iters}UL", "-o", str(Path(tmp) / "prog"), str(src)], check=True
            )
            out = subprocess.run([str(Path(tmp) / "prog")], check=True, capture_output=True, text=True).stdout
            _EXPECTED[iters] = next(line[7:] for line in out.splitlines() if line.startswith("result="))
    return _EXPECTED[iters]


def make_target(path: Path, iters: int = ITERS, bench: str = BENCH) -> Path:
    """The C target as a git repository with one commit on `main` (`bench`: autoresearch.sh)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    files = {
        "prog.c": PROG,
        "Makefile": MAKEFILE.format(iters=iters),
        "autoresearch.sh": bench,
        "autoresearch.checks.sh": CHECKS.format(expected=expected_result(iters)),
        ".gitignore": "prog\n",
    }
    for name, text in files.items():
        (path / name).write_text(text)
    (path / "autoresearch.sh").chmod(0o755)
    (path / "autoresearch.checks.sh").chmod(0o755)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "baseline")
    return path


def make_diff(target: Path, name: str) -> str:
    """The unified diff of one named edit against the target's HEAD (the tree is left clean)."""
    file, old, new, _title = EDITS[name]
    path = target / file
    original = path.read_text()
    assert original.count(old) == 1, (name, old)
    path.write_text(original.replace(old, new))
    try:
        return git(target, "diff")
    finally:
        path.write_text(original)


def stale_diff() -> str:
    """A patch written against code the target does not have: it never applies."""
    return (
        "--- a/prog.c\n+++ b/prog.c\n@@ -10,3 +10,3 @@\n"
        " static int reps_v2(void) {\n-    return 7;\n+    return 5;\n }\n"
    )


def title(name: str) -> str:
    return EDITS[name][3] if name in EDITS else "Patch for an older tree"


def workspace_settings(**overrides: Any) -> dict[str, Any]:
    """Config sections for a fast test workspace (small policy, short timeouts)."""
    extra: dict[str, Any] = {
        "target": {"build_cmd": "make -s"},
        "metric": {"primary": "throughput", "direction": "higher"},
        "policy": {
            "min_effect": 0.05,
            "min_pairs": 12,
            "batch_pairs": 4,
            "max_pairs": 16,
            "self_test_pairs": 8,
        },
        "timeouts": {"build": 60, "bench": 3, "check": 30},
        "fleet": {"parallel": 2},
    }
    for section, values in overrides.items():
        extra.setdefault(section, {}).update(values)
    return extra


def make_workspace(
    root: Path, bench: str = BENCH, iters: int = ITERS, **overrides: Any
) -> tuple[Workspace, Path]:
    """A workspace on a fresh C target, with the fast test settings (plus `overrides` sections)."""
    from kb.init import TargetSpec, create_workspace

    target = make_target(root / "target", iters=iters, bench=bench)
    ws = create_workspace(
        root / "ws", TargetSpec(location=str(target), extra=workspace_settings(**overrides))
    )
    return ws, target


def queue(ws: Workspace, target: Path, names: list[str]) -> dict[str, int]:
    """Queue the named patches, in priority order (the first runs first); name -> patch id."""
    from runner.hypotheses import add_hypothesis, add_patch

    db = ws.db()
    found: dict[str, int] = {}
    for i, name in enumerate(names):
        diff = stale_diff() if name == "stale" else make_diff(target, name)
        hid = add_hypothesis(
            db, title(name), status="approved", priority=len(names) - i, source_refs=[f"note:test {name}"]
        )
        assert hid is not None
        found[name] = add_patch(db, hid, diff, author_kind="manual", author=f"{name}.patch")
    db.conn.close()
    return found


def live_processes_under(root: Path) -> list[str]:
    """Processes whose command line or working directory lies under `root` (nothing may survive)."""
    found: list[str] = []
    prefix = str(root)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                continue
            cmdline = (
                Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cmdline.startswith("git cat-file"):
            continue  # gitpython's persistent object reader (of this test process), not a job
        if prefix in cmdline or cwd.startswith(prefix):
            found.append(f"{entry}: {cmdline.strip()} (cwd {cwd})")
    return found


def must(row: dict[str, Any] | None) -> dict[str, Any]:
    """A query's single row, which the test expects to exist."""
    assert row is not None
    return row
