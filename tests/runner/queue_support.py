"""A target and a fork big enough to need a queue: thousands of fork commits, built in seconds.

    repos = build_queue_repos(tmp_path / "repos")                # upstream (the target) and fork.git
    ws = queue_workspace(tmp_path / "ws", repos)                  # tg128 is the primary metric
    add_fork(ws, ws.db(), "fast", str(repos.fork)); mine(ws, ws.db())

The repositories are written with `git fast-import` (real commits, real diffs). The upstream has the
ggml layout: `ggml/src/ggml-cpu/` (the target backend, `cpu`), `ggml/src/ggml-cuda/`, core code in
`ggml/src/ggml.c`, model code in `src/`, docs, a server and a CMakeLists.txt. The fork:

- `A` commits: one per CPU function (`cpu_op_<f>`), editing body line 6; their messages claim a
  `tg` gain (f % 5 == 0: "TG 12% faster"), a `pp` gain (f % 5 == 1: "PP-512 is 35% faster"), a
  gain naming no metric (f % 5 == 2: "an 8% speedup") or nothing;
- `B` commits: for the first `seconds` functions, a second commit two days after the first, editing
  body line 18 of the same function: a family of two;
- core (`ggml.c`) and model (`src/llama.cpp`) commits, queued too;
- left out of the queue: CUDA-only commits, docs, server and build commits.

Upstream (the baseline) edits body line 6 of `hard` functions differently (their A commit conflicts,
even with a three-way merge: `needs_port`) and body line 8 of `soft` others (within the A diff's
context: `git apply` fails, a three-way merge rebases it).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Queue",
    "GIT_AUTHOR_EMAIL": "queue@example.invalid",
    "GIT_COMMITTER_NAME": "Queue",
    "GIT_COMMITTER_EMAIL": "queue@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}
PER_FILE = 10
BODY = 24
T0 = 1_735_689_600  # 2025-01-01
HOUR = 3600


def cpu_path(f: int) -> str:
    return f"ggml/src/ggml-cpu/ops{f // PER_FILE}.c"


def _function(name: str, edits: dict[int, str]) -> list[str]:
    lines = [f"void {name}(float * x, int n) {{"]
    for k in range(BODY):
        lines.append(edits.get(k, f"    x[{k}] = x[{k}] * {k}.0f; // {name}"))
    return [*lines, "}", ""]


def _file(names: list[str], edits: dict[str, dict[int, str]]) -> str:
    out: list[str] = ["#include <math.h>", ""]
    for name in names:
        out += _function(name, edits.get(name, {}))
    return "\n".join(out) + "\n"


@dataclass
class QueueRepos:
    upstream: Path
    fork: Path
    cpu_functions: int
    seconds: int
    hard: list[int]
    """Functions whose A commit conflicts with the baseline even with a three-way merge."""
    soft: list[int]
    """Functions whose A commit does not apply as it is but merges cleanly."""
    left_out: dict[str, int]
    """What the miner should leave out: cuda, docs, server, build."""
    queued: int
    """Fork commits the miner should queue."""
    core: int = 0
    model: int = 0
    shas: dict[str, str] = field(default_factory=dict)
    """Subject -> sha of the fork's commits."""


class _Importer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.mark = 0

    def commit(self, branch: str, when: int, message: str, files: dict[str, str], parent: int | None) -> int:
        self.mark += 1
        body = message.encode()
        out = [
            f"commit refs/heads/{branch}\nmark :{self.mark}\n".encode(),
            f"author Queue <queue@example.invalid> {when} +0000\n".encode(),
            f"committer Queue <queue@example.invalid> {when} +0000\n".encode(),
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


def _claim(f: int) -> str:
    return {
        0: "This makes TG 12% faster on AVX2.",
        1: "PP-512 is 35% faster with it.",
        2: "An 8% speedup overall.",
    }.get(f % 5, "Cleaner code.")


def build_queue_repos(
    root: Path,
    *,
    cpu_functions: int = 3600,
    seconds: int = 1200,
    core: int = 100,
    model: int = 100,
    cuda: int = 300,
    docs: int = 100,
    server: int = 50,
    build: int = 50,
    hard: int = 40,
    soft: int = 40,
) -> QueueRepos:
    """The upstream (target) and the fork; see the module doc. Counts are commits."""
    upstream, fork = root / "upstream", root / "fork.git"
    subprocess.run(["git", "init", "-q", "-b", "main", str(upstream)], check=True, env=ENV)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(fork)], check=True, env=ENV)
    files = (cpu_functions + PER_FILE - 1) // PER_FILE
    cpu_names = {
        i: [f"cpu_op_{f}" for f in range(i * PER_FILE, min(cpu_functions, (i + 1) * PER_FILE))]
        for i in range(files)
    }
    core_names = [f"ggml_core_{k}" for k in range(max(core, 1))]
    model_names = [f"llama_model_{k}" for k in range(max(model, 1))]
    cuda_names = {i: [f"cuda_k_{i}_{k}" for k in range(PER_FILE)] for i in range(10)}
    base_files: dict[str, str] = {cpu_path(i * PER_FILE): _file(names, {}) for i, names in cpu_names.items()}
    base_files |= {f"ggml/src/ggml-cuda/k{i}.cu": _file(n, {}) for i, n in cuda_names.items()}
    base_files["ggml/src/ggml.c"] = _file(core_names, {})
    base_files["src/llama.cpp"] = _file(model_names, {})
    base_files |= {f"docs/d{i}.md": f"# Doc {i}\n\nText.\n" for i in range(10)}
    base_files["tools/server/server.cpp"] = "int serve(void) {\n    return 0;\n}\n"
    base_files["CMakeLists.txt"] = "cmake_minimum_required(VERSION 3.14)\nproject(q C)\n"
    base_files["autoresearch.sh"] = "#!/bin/sh\necho METRIC tg128=10\n"
    base_files["autoresearch.checks.sh"] = "#!/bin/sh\nexit 0\n"
    imp = _Importer()
    base = imp.commit("main", T0, "Initial import", base_files, None)

    # Upstream: the baseline's own edits of some CPU functions.
    step = max(1, cpu_functions // (hard + soft + 1))
    hard_fs = [f for f in range(seconds + 1, cpu_functions, step)][:hard]
    soft_fs = [f for f in range(seconds + 2, cpu_functions, step)][:soft]
    up_edits: dict[str, dict[int, str]] = {}
    for f in hard_fs:
        up_edits.setdefault(f"cpu_op_{f}", {})[6] = "    x[6] = x[6] * 2.0f; /* upstream */"
    for f in soft_fs:
        up_edits.setdefault(f"cpu_op_{f}", {})[8] = "    x[8] = x[8] * 8.5f; /* upstream */"
    changed = {cpu_path(f) for f in hard_fs + soft_fs}
    up_files = {path: _file(cpu_names[int(path.rsplit("ops", 1)[1][:-2])], up_edits) for path in changed}
    imp.commit("main", T0 + HOUR, "Upstream: tune some kernels", up_files, base)

    # The fork: events in time order, each a commit on the previous one.
    events: list[tuple[int, str, Any]] = []
    for f in range(cpu_functions):
        events.append((T0 + 2 * HOUR + f * HOUR, "A", f))
        if f < seconds:
            events.append((T0 + 2 * HOUR + f * HOUR + 48 * HOUR, "B", f))
    span = cpu_functions * HOUR
    for kind, count in (("core", core), ("model", model), ("cuda", cuda), ("docs", docs),
                        ("server", server), ("build", build)):  # fmt: skip
        for k in range(count):
            events.append((T0 + 2 * HOUR + 1800 + (k * span) // max(count, 1), kind, k))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    fork_edits: dict[str, dict[int, str]] = {}
    state = dict(base_files)
    head = base
    subjects: list[str] = []
    for when, kind, n in events:
        if kind in ("A", "B"):
            name = f"cpu_op_{n}"
            line = 6 if kind == "A" else 18
            fork_edits.setdefault(name, {})[line] = f"    x[{line}] = x[{line}] * 1.5f; /* fork {kind} {n} */"
            path = cpu_path(n)
            state[path] = _file(cpu_names[n // PER_FILE], fork_edits)
            subject = f"ggml-cpu: {'unroll' if kind == 'A' else 'vectorise'} {name}"
            message = f"{subject}\n\n{_claim(n) if kind == 'A' else 'Follow-up.'}\n"
            touched = {path: state[path]}
        elif kind in ("core", "model"):
            name = (core_names if kind == "core" else model_names)[n]
            path = "ggml/src/ggml.c" if kind == "core" else "src/llama.cpp"
            fork_edits.setdefault(name, {})[12] = f"    x[12] = x[12] * 0.5f; /* fork {name} */"
            names = core_names if kind == "core" else model_names
            state[path] = _file(names, fork_edits)
            subject = f"{kind}: simplify {name}"
            message = subject + "\n"
            touched = {path: state[path]}
        elif kind == "cuda":
            i, k = n % 10, (n // 10) % PER_FILE
            name = f"cuda_k_{i}_{k}"
            fork_edits.setdefault(name, {})[(n // 100) % BODY] = f"    x[0] = x[0] * {n}.25f; /* cuda */"
            path = f"ggml/src/ggml-cuda/k{i}.cu"
            state[path] = _file(cuda_names[i], fork_edits)
            subject = f"CUDA: faster {name} ({n})"
            message = f"{subject}\n\nTG 20% faster on an RTX 4090.\n"
            touched = {path: state[path]}
        else:
            path = {"docs": f"docs/d{n % 10}.md", "server": "tools/server/server.cpp",
                    "build": "CMakeLists.txt"}[kind]  # fmt: skip
            state[path] = (
                state[path] + f"/* {kind} {n} */\n" if kind != "docs" else state[path] + f"More {n}.\n"
            )
            subject = f"{kind}: update {n}"
            message = subject + "\n"
            touched = {path: state[path]}
        subjects.append(subject)
        head = imp.commit("fork-main", when, message, touched, head)
    imp.run(upstream)
    subprocess.run(["git", "fetch", "-q", str(upstream), "fork-main:main"], cwd=fork, check=True, env=ENV)
    subprocess.run(["git", "branch", "-q", "-D", "fork-main"], cwd=upstream, check=True, env=ENV)
    log = subprocess.run(
        ["git", "log", "--format=%H %s", "main"],
        cwd=fork,
        capture_output=True,
        text=True,
        check=True,
        env=ENV,
    ).stdout
    shas = {line[41:]: line[:40] for line in log.splitlines()}
    left = {"cuda": cuda, "docs": docs, "server": server, "build": build}
    return QueueRepos(
        upstream=upstream,
        fork=fork,
        cpu_functions=cpu_functions,
        seconds=seconds,
        hard=hard_fs,
        soft=soft_fs,
        left_out=left,
        queued=cpu_functions + seconds + core + model,
        core=core,
        model=model,
        shas=shas,
    )


def queue_workspace(root: Path, repos: QueueRepos, **extra: Any) -> Any:
    """A workspace on the upstream whose primary metric is `tg128` (guard `pp512`), target `cpu`."""
    from kb.init import TargetSpec, create_workspace

    sections: dict[str, Any] = {
        "metric": {"primary": "tg128", "guards": [{"metric": "pp512", "max_regression": 0.02}]},
        "kb": {"inventory": {"target_backend": "cpu"}},
    }
    sections.update(extra)
    return create_workspace(root, TargetSpec(location=str(repos.upstream), baseline="main", extra=sections))


@dataclass
class MinedQueue:
    """A workspace with the fork added and mined (build once per session, copy per test)."""

    root: Path
    repos: QueueRepos
    report: dict[str, Any]


# The tests' queue: a quarter of build_queue_repos' default (5,000), in the same proportions. Every
# behaviour they check (families, rebased and needs_port commits, commits left out, pages, thousands
# in the page lines) shows at 1,250; benchmarks/bench_queue.py measures 10,000.
TEST_QUEUE = {
    "cpu_functions": 900,
    "seconds": 300,
    "core": 25,
    "model": 25,
    "cuda": 75,
    "docs": 25,
    "server": 13,
    "build": 12,
    "hard": 10,
    "soft": 10,
}


def mined_queue(root: Path) -> MinedQueue:
    """Build the repositories (TEST_QUEUE), a workspace on them, add the fork and mine it."""
    import pytest

    from kb.forks import add_fork
    from runner.research.miners import mine

    with pytest.MonkeyPatch.context() as mp:  # the per-test isolation of tests/conftest.py
        mp.setenv("HOME", str(root / "home"))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.delenv("AUTORESEARCH_WORKSPACE", raising=False)
        (root / "home").mkdir(parents=True, exist_ok=True)
        repos = build_queue_repos(root / "repos", **TEST_QUEUE)
        ws = queue_workspace(root / "ws", repos)
        db = ws.db()
        add_fork(ws, db, "fast", str(repos.fork))
        report = mine(ws, db).to_json()
        db.conn.close()
    return MinedQueue(root / "ws", repos, report)


def copy_queue(template: MinedQueue, dest: Path) -> Any:
    """A writable copy of the mined workspace."""
    import shutil

    from kb.workspace import Workspace

    shutil.copytree(template.root, dest, symlinks=True)
    return Workspace(dest)
