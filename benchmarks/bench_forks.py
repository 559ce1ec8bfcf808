"""Fork mining throughput: `kb add-fork` on forks of 2,000 and 20,000 commits, then refreshes.

    .venv/bin/python benchmarks/bench_forks.py [--commits 2000 --commits 20000] [--history shared|rewritten]

The repositories are generated with `git fast-import` (seconds, not minutes): an upstream of 60 C
files, and a fork whose commits each edit a few lines of one file or add a new file; 5% of the
fork's commits are also applied upstream (so `git cherry` marks them upstreamed), and every 100th
adds a 150 kB generated table (diff capped). A workspace is created on the upstream, then timed:
the first `add_fork` (all commits), a refresh with nothing new, and a refresh with 20 new commits.
With `--history rewritten` the fork's base is a copy of the upstream commit (same tree, another
date), so the two share no commit and the fork point is found by content (ik_llama.cpp's case).
Each timed step runs in a child process, so its peak memory is its own.
Goal (issue 3): >= 200 commits/s. Prints figures; not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kb.init import TargetSpec, create_workspace  # noqa: E402

FILES = 60
LINES = 120
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


class Importer:
    """Writes a `git fast-import` stream: commits on branches with full file contents."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.mark = 0
        self.clock = 1_767_225_600

    def commit(self, branch: str, message: str, files: dict[str, str], parent: int | None) -> int:
        self.mark += 1
        self.clock += 37
        body = message.encode()
        out = [
            f"commit refs/heads/{branch}\nmark :{self.mark}\n".encode(),
            f"author Bench <bench@example.invalid> {self.clock} +0000\n".encode(),
            f"committer Bench <bench@example.invalid> {self.clock} +0000\n".encode(),
            f"data {len(body)}\n".encode() + body + b"\n",
        ]
        if parent is not None:
            out.append(f"from :{parent}\n".encode())
        for path, text in files.items():
            data = text.encode()
            out.append(f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n")
        self.parts.append(b"".join(out))
        return self.mark

    def run(self, repo: Path) -> None:
        subprocess.run(
            ["git", "fast-import", "--quiet"], cwd=repo, input=b"".join(self.parts), check=True, env=ENV
        )


def source_file(index: int, version: int, rng: random.Random) -> str:
    lines = [f"static inline float op_{index}_{n}(float x) {{ return x * {n}.0f; }}" for n in range(LINES)]
    for _ in range(version):
        n = rng.randrange(LINES)
        lines[n] = f"static inline float op_{index}_{n}(float x) {{ return x * {rng.random():.6f}f; }}"
    return "\n".join(lines) + "\n"


def build(root: Path, commits: int, seed: int = 5, rewritten: bool = False) -> tuple[Path, Path]:
    rng = random.Random(seed)
    upstream, fork = root / "upstream", root / "fork.git"
    subprocess.run(["git", "init", "-q", "-b", "main", str(upstream)], check=True, env=ENV)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(fork)], check=True, env=ENV)
    base_files = {f"ggml/src/ggml-cpu/op{i}.c": source_file(i, 0, rng) for i in range(FILES)}
    importer = Importer()
    base = importer.commit("main", "Initial import", base_files, None)
    # Rewritten history: the fork starts from a copy of the upstream commit (same tree, other date).
    fork_head = importer.commit("fork-main", "Initial import", base_files, None) if rewritten else base
    upstream_head = importer.commit("main", "Upstream: docs", {"docs/README.md": "upstream docs\n"}, base)
    versions = dict.fromkeys(range(FILES), 0)
    for n in range(commits):
        if n % 20 == 7:
            # A new file with the same content upstream: the same patch-id, so upstreamed.
            files = {f"ggml/src/ggml-cpu/new{n}.c": f"int shared_{n} = {n};\n" * 5}
            upstream_head = importer.commit("main", f"Shared change {n}", files, upstream_head)
        elif n % 100 == 50:
            files = {
                f"ggml/src/ggml-cpu/table{n}.c": "".join(
                    f"const int t{i} = {i * 7 % 9973};\n" for i in range(6000)
                )
            }
        else:
            i = rng.randrange(FILES)
            versions[i] += 1
            files = {f"ggml/src/ggml-cpu/op{i}.c": source_file(i, versions[i], random.Random(n))}
        message = f"ggml-cpu: change {n}\n\nTune kernel {n}: ggml_vec_dot_q4_0 path, +{n % 7}% tg.\n"
        fork_head = importer.commit("fork-main", message, files, fork_head)
    importer.run(upstream)
    subprocess.run(["git", "fetch", "-q", str(upstream), "fork-main:main"], cwd=fork, check=True, env=ENV)
    subprocess.run(["git", "branch", "-q", "-D", "fork-main"], cwd=upstream, check=True, env=ENV)
    return upstream, fork


def add_commits(fork: Path, count: int) -> None:
    importer = Importer()
    importer.clock += 10_000_000
    head = subprocess.run(
        ["git", "rev-parse", "main"], cwd=fork, capture_output=True, text=True, check=True
    ).stdout.strip()
    parts = [f"reset refs/heads/main\nfrom {head}\n\n".encode()]
    for n in range(count):
        importer.commit("main", f"later change {n}\n", {f"later/f{n}.c": f"int later_{n};\n"}, None)
    importer.parts = parts + importer.parts
    importer.run(fork)


_STEP = """
import json, resource, sys, time
from pathlib import Path
from kb.forks import add_fork
from kb.workspace import Workspace
ws = Workspace(Path(sys.argv[1]))
result = add_fork(ws, ws.db(), "bench", sys.argv[2] if len(sys.argv) > 2 else None)
me = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({**result.to_json(), "rss_kb": me.ru_maxrss}))
"""


def step(ws: Path, fork: Path | None) -> dict[str, object]:
    """One add_fork in a child process: its result and its peak memory (the git processes it runs
    are not counted: a forked child reports its parent's size as its own peak)."""
    args = [sys.executable, "-c", _STEP, str(ws), *([str(fork)] if fork else [])]
    out = subprocess.run(
        args, capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1]
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run(commits: int, rewritten: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        upstream, fork = build(root, commits, rewritten=rewritten)
        ws = create_workspace(root / "ws", TargetSpec(location=str(upstream)))
        kind = "rewritten history" if rewritten else "shared history"
        print(f"fork mining, {kind}: built a {commits}-commit fork in {time.perf_counter() - started:.1f} s")
        first = step(ws.root, fork)
        new, seconds = int(str(first["new_commits"])), float(str(first["seconds"]))
        rss = int(str(first["rss_kb"])) // 1024
        method = dict(first["fork_point"]).get("method") if isinstance(first["fork_point"], dict) else "?"
        print(
            f"  first add-fork   {new} commits in {seconds:6.2f} s = {new / seconds:7.1f} commits/s "
            f"({first['upstreamed']} upstreamed; fork point by {method}); peak memory "
            f"{rss} MB"
        )
        db = ws.db()
        truncated = db.execute("SELECT count(*) FROM commits WHERE diff_truncated = 1").fetchone()[0]
        size = sum(p.stat().st_size for p in ws.root.glob("autoresearch.db*"))
        print(f"                   {truncated} diffs truncated at the caps; database {size / 1e6:.1f} MB")
        again = step(ws.root, None)
        print(f"  refresh, no new  {float(str(again['seconds'])):6.2f} s ({again['status']})")
        add_commits(fork, 20)
        later = step(ws.root, None)
        print(f"  refresh, 20 new  {later['new_commits']} commits in {float(str(later['seconds'])):6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, action="append", help="fork size (repeatable; 2000 and 20000)")
    parser.add_argument("--history", choices=["shared", "rewritten"], action="append")
    args = parser.parse_args()
    for history in args.history or ["shared", "rewritten"]:
        for commits in args.commits or [2000, 20000]:
            run(commits, history == "rewritten")


if __name__ == "__main__":
    main()
