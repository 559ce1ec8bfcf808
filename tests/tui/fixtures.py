"""A deterministic workspace for the TUI's pilot and snapshot tests.

On top of tests/runner/fixtures.py (a finished run `r1` and a live run `r2`: wave 2 running, one
experiment queued) it adds a knowledge base worth looking at: a second paper of 60 passages (the
reader pages), a second fork with real diffs and one upstreamed commit, a fusion inventory over
four backends with gaps, a note, and proposed hypotheses. Every timestamp and text is fixed; `CLOCK`
is the "now" the tests give the app (a heartbeat two seconds old: the runner looks alive).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlite_utils

from kb.db import insert, log_event, one, transaction, update
from kb.store import run_records
from kb.workspace import Workspace
from tests.runner.fixtures import T0, HistoryFixture, add_run, build_history

LIVE_RUN_START = T0 + 86_400
CLOCK_NOW = LIVE_RUN_START + 642 + 125  # the running experiment started 642 s into the run


def clock() -> float:
    return CLOCK_NOW


DIFFS = {
    "tile": (
        "diff --git a/ggml/src/ggml-cpu/ops.cpp b/ggml/src/ggml-cpu/ops.cpp\n"
        "--- a/ggml/src/ggml-cpu/ops.cpp\n+++ b/ggml/src/ggml-cpu/ops.cpp\n"
        "@@ -120,7 +120,9 @@ static void ggml_compute_forward_mul_mat(\n"
        "     const int64_t ne00 = src0->ne[0];\n"
        "-    const int64_t blck = 16;\n"
        "+    // tile for the L2 cache: 64 rows of the weights stay resident\n"
        "+    const int64_t blck = 64;\n"
        "+    const int64_t prefetch = 2;\n"
        "     for (int64_t i = 0; i < ne00; i += blck) {\n"
    ),
    "simd": (
        "diff --git a/ggml/src/ggml-cpu/vec.h b/ggml/src/ggml-cpu/vec.h\n"
        "--- a/ggml/src/ggml-cpu/vec.h\n+++ b/ggml/src/ggml-cpu/vec.h\n"
        "@@ -40,6 +40,10 @@ inline static void ggml_vec_mul_f32(\n"
        "-    for (int i = 0; i < n; ++i) z[i] = x[i]*y[i];\n"
        "+#if defined(__AVX2__)\n"
        "+    ggml_vec_mul_f32_avx2(n, z, x, y);\n"
        "+#else\n"
        "+    for (int i = 0; i < n; ++i) z[i] = x[i]*y[i];\n"
        "+#endif\n"
    ),
    "docs": (
        "diff --git a/docs/build.md b/docs/build.md\n"
        "--- a/docs/build.md\n+++ b/docs/build.md\n"
        "@@ -1,3 +1,4 @@\n # Build\n+Use -DGGML_NATIVE=ON for the best CPU kernels.\n"
    ),
}

SECTIONS = ["1 Introduction", "2 Background", "3 Tiling attention for caches", "4 Results", "5 Discussion"]


@dataclass
class TuiFixture:
    history: HistoryFixture
    live: HistoryFixture
    paper: int
    passages: list[int]
    fork: int
    commits: dict[str, int]
    fusions: dict[str, int]
    gaps: dict[str, int]
    note: int
    proposed: list[int]

    @property
    def ws(self) -> Workspace:
        return self.history.ws

    @property
    def root(self) -> Path:
        return self.history.ws.root

    def db(self) -> sqlite_utils.Database:
        return self.history.ws.db()


def _knowledge(db: sqlite_utils.Database) -> dict[str, object]:
    t = T0 - 3600
    out: dict[str, object] = {}
    with transaction(db):
        paper = insert(
            db,
            "sources",
            {
                "kind": "paper",
                "url": "https://example.org/papers/cpu-attention.pdf",
                "canonical_url": "https://example.org/papers/cpu-attention.pdf",
                "title": "Cache-aware attention kernels for CPU inference",
                "authors": "C. Writer, D. Writer",
                "published": "2025-06-01",
                "site": "example.org",
                "language": "en",
                "content_hash": "1" * 64,
                "created_at": t,
                "updated_at": t,
            },
        )
        passages = []
        for i in range(60):
            passages.append(
                insert(
                    db,
                    "evidence",
                    {
                        "source_id": paper,
                        "kind": "passage",
                        "ref": str(i),
                        "title": "Cache-aware attention kernels for CPU inference",
                        "section": SECTIONS[i * len(SECTIONS) // 60],
                        "position": i,
                        "body": f"Passage {i}: blocking the key and value matrices into tiles of "
                        f"{16 << (i % 4)} rows keeps them in the L2 cache; "
                        + ("softmax rescaling is fused into the tile loop." if i % 2 else "bandwidth drops."),
                        "created_at": t,
                    },
                )
            )
        fork = insert(
            db,
            "sources",
            {
                "kind": "fork",
                "name": "llamafile",
                "url": "https://github.com/Mozilla-Ocho/llamafile",
                "canonical_url": "https://github.com/Mozilla-Ocho/llamafile",
                "title": "llamafile",
                "ref": "main",
                "commit_sha": "9" * 40,
                "created_at": t,
                "updated_at": t,
            },
        )
        commits: dict[str, int] = {}
        subjects = {
            "tile": "[CPU] Tile mul_mat for the L2 cache",
            "simd": "Vectorise ggml_vec_mul_f32 with AVX2",
            "docs": "docs: recommend GGML_NATIVE",
        }
        for i, (label, diff) in enumerate(DIFFS.items()):
            sha = f"{i + 1:x}" * 40
            files = [line[6:] for line in diff.splitlines() if line.startswith("+++ b/")]
            eid = insert(
                db,
                "evidence",
                {
                    "source_id": fork,
                    "kind": "commit",
                    "ref": sha,
                    "title": subjects[label],
                    "body": f"{subjects[label]}\n\n{diff}",
                    "created_at": t,
                },
            )
            insert(
                db,
                "commits",
                {
                    "evidence_id": eid,
                    "sha": sha,
                    "author": "Fork Hacker",
                    "authored_at": f"2025-10-0{i + 1}",
                    "subject": subjects[label],
                    "message": f"{subjects[label]}\n\nMeasured on a 16-core box.",
                    "files": files,
                    "insertions": diff.count("\n+") - 1,
                    "deletions": diff.count("\n-") - 1,
                    "diff": diff,
                    "upstreamed": 1 if label == "docs" else 0,
                },
            )
            for path in files:
                insert(db, "commit_files", {"evidence_id": eid, "path": path})
            commits[label] = eid
        inventory = db.execute("SELECT id FROM sources WHERE kind = 'inventory'").fetchone()[0]
        fusions: dict[str, int] = {}
        for backend, ops, file, line in [
            ("metal", "RMS_NORM+MUL", "ggml/src/ggml-metal/ggml-metal.m", 1402),
            ("vulkan", "RMS_NORM+MUL", "ggml/src/ggml-vulkan/ggml-vulkan.cpp", 9120),
            ("cuda", "ADD+RMS_NORM", "ggml/src/ggml-cuda/ggml-cuda.cu", 2990),
            ("vulkan", "ADD+RMS_NORM", "ggml/src/ggml-vulkan/ggml-vulkan.cpp", 9188),
            ("cuda", "UNARY:SILU+MUL", "ggml/src/ggml-cuda/ggml-cuda.cu", 3050),
            ("cpu", "UNARY:SILU+MUL", "ggml/src/ggml-cpu/ggml-cpu.c", 2210),
            ("metal", "UNARY:SILU+MUL", "ggml/src/ggml-metal/ggml-metal.m", 1460),
            ("vulkan", "UNARY:SILU+MUL", "ggml/src/ggml-vulkan/ggml-vulkan.cpp", 9230),
        ]:
            eid = insert(
                db,
                "evidence",
                {
                    "source_id": inventory,
                    "kind": "fusion",
                    "ref": f"{backend}:{ops}",
                    "title": ops,
                    "section": backend,
                    "body": f"{backend} fuses {ops} at {file}:{line}",
                    "created_at": t,
                },
            )
            insert(
                db,
                "fusions",
                {
                    "evidence_id": eid,
                    "backend": backend,
                    "ops": ops,
                    "kind": "graph",
                    "file": file,
                    "line": line,
                },
            )
            fusions[f"{backend}:{ops}"] = eid
        gaps: dict[str, int] = {}
        for backend in ("cpu", "metal"):
            gaps[f"{backend}:ADD+RMS_NORM"] = insert(
                db,
                "evidence",
                {
                    "source_id": inventory,
                    "kind": "gap",
                    "ref": f"{backend}:ADD+RMS_NORM",
                    "title": "ADD+RMS_NORM",
                    "section": backend,
                    "body": f"ADD+RMS_NORM is fused in cuda, vulkan; not in {backend}.",
                    "meta": {
                        "present": ["cuda", "vulkan"],
                        "missing": [backend],
                        "file": "ggml/src/ggml-cuda/ggml-cuda.cu",
                        "line": 2990,
                    },
                    "created_at": t,
                },
            )
        note_source = insert(
            db,
            "sources",
            {"kind": "note", "name": "bench notes", "title": "Bench notes", "created_at": t, "updated_at": t},
        )
        note = insert(
            db,
            "evidence",
            {
                "source_id": note_source,
                "kind": "note",
                "ref": "n1",
                "title": "Thermal throttling on the shared box",
                "body": "Runs after 14:00 are 8% slower: the box throttles. Interleave A and B.",
                "created_at": t,
            },
        )
        proposed = [
            insert(
                db,
                "hypotheses",
                {
                    "title": "Tile attention for the L2 cache",
                    "rationale": "The paper reports 12% on memory-bound decoding.",
                    "expected_effect": 0.05,
                    "priority": 3.0,
                    "status": "proposed",
                    "origin": "llm",
                    "created_at": T0 + 50,
                    "updated_at": T0 + 50,
                },
            ),
            insert(
                db,
                "hypotheses",
                {
                    "title": "Fuse ADD and RMS_NORM on the CPU",
                    "rationale": "CUDA and Vulkan fuse it; the CPU backend does not.",
                    "expected_effect": 0.02,
                    "priority": 2.5,
                    "status": "proposed",
                    "origin": "miner:gap",
                    "dedupe_key": "gap:cpu:ADD+RMS_NORM",
                    "created_at": T0 + 51,
                    "updated_at": T0 + 51,
                },
            ),
        ]
        insert(db, "hypothesis_evidence", {"hypothesis_id": proposed[0], "evidence_id": passages[31]})
        insert(db, "hypothesis_evidence", {"hypothesis_id": proposed[0], "evidence_id": commits["tile"]})
        insert(
            db, "hypothesis_evidence", {"hypothesis_id": proposed[1], "evidence_id": gaps["cpu:ADD+RMS_NORM"]}
        )
    out.update(
        paper=paper,
        passages=passages,
        fork=fork,
        commits=commits,
        fusions=fusions,
        gaps=gaps,
        note=note,
        proposed=proposed,
    )
    return out


RESEARCH_DONE = {
    1: {
        "mined": 1,
        "generated": 2,
        "patched": 2,
        "repaired": 0,
        "ported": 0,
        "repeats": 1,
        "failures": ["generate: one answer was not JSON"],
        "cost_usd": 0.0123,
        "call_ids": [101, 102],
    },
    2: {
        "mined": 0,
        "generated": 1,
        "patched": 1,
        "repaired": 1,
        "ported": 0,
        "repeats": 0,
        "failures": [],
        "cost_usd": 0.004,
        "call_ids": [103],
    },
}


def _autopilot(
    db: sqlite_utils.Database, history: HistoryFixture, live: HistoryFixture, kb: dict[str, object]
) -> None:
    """The live run is an autopilot run measuring after two research phases, with a focus note;
    one proposed idea came from its first wave's post-mortem, the other repeats a measured one."""
    run = one(db, "SELECT options FROM runs WHERE id = ?", [live.run_id])
    options = {**json.loads(run["options"] if run and run["options"] else "{}"), "autopilot": True}
    options["model"] = "openai/gpt-test"
    update(
        db,
        "runs",
        live.run_id,
        {
            "options": options,
            "phase": "measuring",
            "steering": {"focus": ["the AVX2 matmul kernels"], "avoid": [], "approval": None},
        },
    )
    for number, report in RESEARCH_DONE.items():
        start = LIVE_RUN_START + 100 * number
        log_event(
            db,
            "research_started",
            f"research phase {number}",
            run_id=live.run_id,
            data={"phase": number},
            ts=start,
        )
        log_event(
            db,
            "research_done",
            f"research phase {number}",
            run_id=live.run_id,
            data={"phase": number, **report},
            ts=start + 40,
        )
    proposed = kb["proposed"]
    assert isinstance(proposed, list)
    measured = next(iter(history.hyp.values()))
    db.execute("UPDATE hypotheses SET wave_id = ? WHERE id = ?", [live.waves[0], proposed[0]])
    db.execute("UPDATE hypotheses SET repeat_of = ? WHERE id = ?", [measured, proposed[1]])


def build_tui_workspace(tmp_path: Path) -> TuiFixture:
    history = build_history(tmp_path)
    live = add_run(history.ws, name="r2", live=True, seed=7, target=history.target)
    db = history.ws.db()
    try:
        kb = _knowledge(db)
        with transaction(db):
            # The live run's runner: a heartbeat 2 s before the tests' clock.
            run_records.update(db, live.run_id, {"pid": 4242, "heartbeat_at": CLOCK_NOW - 2})
            _autopilot(db, history, live, kb)
    finally:
        db.conn.close()
    return TuiFixture(history=history, live=live, **kb)  # type: ignore[arg-type]


def copy_workspace(template: TuiFixture, dest: Path) -> Path:
    """A writable copy of the fixture workspace (its database and config; logs stay shared)."""
    shutil.copytree(template.root, dest, ignore=shutil.ignore_patterns("worktrees"))
    return dest


@pytest.fixture(scope="session")
def tui_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TuiFixture]:
    """The fixture workspace, built once per session; tests that write use a copy (`tui_ws`)."""
    root = tmp_path_factory.mktemp("tui")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(root))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.delenv("AUTORESEARCH_WORKSPACE", raising=False)
        yield build_tui_workspace(root)
