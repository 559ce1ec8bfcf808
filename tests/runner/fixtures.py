"""A workspace with a realistic, deterministic run history, for the record-side and TUI tests.

`build_history(tmp_path)` makes a real git target (small C sources), a workspace on it (real bare
mirror), a knowledge base (a paper passage, a fork commit, a backend fusion gap), hypotheses with
real patches, and a run of two waves holding an experiment of every status, with samples generated
from a seeded noise model, decisions taken by runner/stats exactly as a sequential runner takes
them (runner.record.redecide.replay_wave), and its winners committed by runner.record.winners.commit_winner on
the run branch. Same arguments, same database: timestamps, sample values and commit shas are fixed.

    h = build_history(tmp_path)                  # a finished run "r1"
    h = build_history(tmp_path, live=True)       # run still going: wave 2 running, one queued
    add_run(h.ws, name="r2", seed=7)             # another run in the same workspace
    db = h.db(); h.exp["fuse"]; h.winners["fuse"].commit_sha

Experiment labels (`h.exp`): self_test; wave 1: fuse (kept, winner), prefetch (discarded early),
unroll (inconclusive at the cap, 3 samples per invocation), wrong (checks_failed), hang (crashed:
timeout), inflate (refused: autoresearch.sh), nan (crashed: no_metric, a rejected `x=nan` sample);
wave 2: quant (kept, winner; from a fork commit), stale (crashed: does_not_apply), cancel
(cancelled), lost (lost), retry (retry_of lost: discarded; `queued` when live); finished runs add
stack and ablation_fuse / ablation_quant (kinds stack, ablation) and `runs.summary`.

The loop's rows (runs, workers, waves, experiments, samples, decisions) are written through the
kb/store functions runner/measure/ writes them with, so a schema change is made once. Rows follow
runner/measure/'s formats: runs.policy is the stats Policy plus `metric`; the passed
self-test is a `passed` experiment of kind self_test with `meta.self_test`, and
runs.self_test / noise_floor; an ablation measures the full stack (candidate) against the stack
without one winner (baseline, a real commit), `meta.left_out` naming that winner's experiment;
runs.summary is `{"stack": {...}, "ablation": [{..., "left_out": id}]}`.

Other ids by label: `h.hyp`, `h.patch` (same labels as the experiments that use them; `retry`
reuses `lost`'s), `h.evidence` (passage, commit, fusion, gap), `h.sources` (paper, fork,
inventory), `h.waves` (wave ids in order). In a test module, `from tests.runner.fixtures import
finished_history` gives a module-scoped, read-only finished run.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import sqlite_utils

from kb.db import insert, log_event, transaction
from kb.store import decisions, experiments, hypotheses, run_records, samples, waves, workers
from kb.workspace import Workspace
from runner.record.winners import WinnerRecord

if TYPE_CHECKING:
    from runner.stats import Decision

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: every timestamp of the fixture counts from here
METRIC = "tg"
SECONDARY = "pp"
BASE_TG = 41.4
BASE_PP = 241.0
# As runner/measure/ stores it: the stats Policy's fields plus the primary metric.
POLICY: dict[str, Any] = {
    "metric": METRIC,
    "direction": "higher",
    "min_effect": 0.01,
    "alpha": 0.05,
    "max_pairs": 80,
    "min_pairs": 8,
    "batch": 8,
    "fdr": True,
    "sequential": True,
}
FORK_SHA = "3f1c2a9b7d5e4c3b2a190817263544536271809a"
PAPER_URL = "https://arxiv.org/abs/2401.01234"
FORK_URL = "https://github.com/ikawrakow/ik_llama.cpp"
BLOG_URL = "https://example.org/blog/prefetching"
#: What every experiment in `history --json` carries at least (DESIGN: history JSON).
EXPERIMENT_JSON_FIELDS = frozenset(
    {"id", "title", "status", "effect", "ci", "pairs", "hypothesis", "sources", "log_dir"}
)

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Target Author",
    "GIT_AUTHOR_EMAIL": "target@example.invalid",
    "GIT_COMMITTER_NAME": "Target Author",
    "GIT_COMMITTER_EMAIL": "target@example.invalid",
    "GIT_AUTHOR_DATE": "2025-12-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2025-12-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
}

TARGET_FILES: dict[str, str] = {
    "Makefile": "CFLAGS ?= -O2\nbench: src/*.c\n\t$(CC) $(CFLAGS) -o bench src/*.c -lm\n",
    "autoresearch.sh": "#!/bin/sh\nset -e\n./bench | sed -n 's/^tg /METRIC tg=/p; s/^pp /METRIC pp=/p'\n",
    "autoresearch.checks.sh": "#!/bin/sh\nset -e\n./bench --check\n",
    "src/dot.c": (
        '#include "kernels.h"\n\n'
        "float dot(const float *a, const float *b, int n) {\n"
        "    float sum = 0.0f;\n"
        "    for (int i = 0; i < n; i++) {\n"
        "        sum += a[i] * b[i];\n"
        "    }\n"
        "    return sum;\n"
        "}\n"
    ),
    "src/norm.c": (
        '#include <math.h>\n#include "kernels.h"\n\n'
        "void rms_norm(float *x, int n) {\n"
        "    float ss = 0.0f;\n"
        "    for (int i = 0; i < n; i++) ss += x[i] * x[i];\n"
        "    float scale = 1.0f / sqrtf(ss / n + 1e-6f);\n"
        "    for (int i = 0; i < n; i++) x[i] *= scale;\n"
        "}\n\n"
        "void mul(float *x, const float *w, int n) {\n"
        "    for (int i = 0; i < n; i++) x[i] *= w[i];\n"
        "}\n"
    ),
    "src/softmax.c": (
        '#include <math.h>\n#include "kernels.h"\n\n'
        "void softmax(float *x, int n) {\n"
        "    float max = x[0], sum = 0.0f;\n"
        "    for (int i = 1; i < n; i++) if (x[i] > max) max = x[i];\n"
        "    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - max); sum += x[i]; }\n"
        "    for (int i = 0; i < n; i++) x[i] /= sum;\n"
        "}\n"
    ),
    "src/quant.c": (
        '#include "kernels.h"\n\n'
        "void quantize_q4(const float *x, unsigned char *q, int n) {\n"
        "    for (int i = 0; i < n; i += 2) {\n"
        "        q[i / 2] = (unsigned char)((int)(x[i] * 7 + 8) | ((int)(x[i + 1] * 7 + 8) << 4));\n"
        "    }\n"
        "}\n"
    ),
    "src/kernels.h": (
        "float dot(const float *a, const float *b, int n);\n"
        "void rms_norm(float *x, int n);\nvoid mul(float *x, const float *w, int n);\n"
        "void softmax(float *x, int n);\nvoid quantize_q4(const float *x, unsigned char *q, int n);\n"
    ),
}

# label -> (file, old text, new text): each becomes a real unified diff made by git.
EDITS: dict[str, tuple[str, str, str]] = {
    "fuse": (
        "src/norm.c",
        "void mul(float *x, const float *w, int n) {\n    for (int i = 0; i < n; i++) x[i] *= w[i];\n}\n",
        "void mul(float *x, const float *w, int n) {\n"
        "    for (int i = 0; i < n; i++) x[i] *= w[i]; /* unfused graphs only */\n}\n\n"
        "void rms_norm_mul(float *x, const float *w, int n) {\n"
        "    float ss = 0.0f;\n"
        "    for (int i = 0; i < n; i++) ss += x[i] * x[i];\n"
        "    float scale = 1.0f / sqrtf(ss / n + 1e-6f);\n"
        "    for (int i = 0; i < n; i++) x[i] *= scale * w[i];\n"
        "}\n",
    ),
    "prefetch": (
        "src/dot.c",
        "        sum += a[i] * b[i];\n",
        "        __builtin_prefetch(a + i + 64);\n        sum += a[i] * b[i];\n",
    ),
    "unroll": (
        "src/softmax.c",
        "    for (int i = 0; i < n; i++) x[i] /= sum;\n",
        "    float inv = 1.0f / sum;\n    for (int i = 0; i < n; i++) x[i] *= inv;\n",
    ),
    "wrong": ("src/dot.c", "i < n; i++) {", "i < n - 1; i++) {"),
    "hang": ("src/quant.c", "i < n; i += 2", "i < n; i += 0"),
    "inflate": ("autoresearch.sh", "METRIC tg=/p", "METRIC tg=1000/p"),
    "nan": ("src/dot.c", "    return sum;\n", "    return sum / 0.0f * 0.0f;\n"),
    "quant": (
        "src/quant.c",
        "    for (int i = 0; i < n; i += 2) {\n",
        "    #pragma GCC unroll 8\n    for (int i = 0; i < n; i += 2) {\n",
    ),
    # Written against the baseline's norm.c: no longer applies once `fuse` is on the branch.
    "stale": (
        "src/norm.c",
        "void mul(float *x, const float *w, int n) {\n    for (int i = 0; i < n; i++) x[i] *= w[i];\n}\n",
        "void mul(float *restrict x, const float *restrict w, int n) {\n"
        "    for (int i = 0; i < n; i++) x[i] *= w[i];\n}\n",
    ),
    "cancel": ("src/softmax.c", "float max = x[0], sum = 0.0f;", "float max = -INFINITY, sum = 0.0f;"),
    "lost": ("src/dot.c", "    float sum = 0.0f;\n", "    double sum = 0.0;\n"),
}

TITLES: dict[str, str] = {
    "fuse": "Fuse RMS_NORM and MUL on the CPU",
    "prefetch": "Prefetch 64 floats ahead in the dot product",
    "unroll": "Multiply by the reciprocal in softmax",
    "wrong": "Skip the last element of the dot product",
    "hang": "Quantize with a zero stride",
    "inflate": "Report a larger tg",
    "nan": "Scale the dot product by zero over zero",
    "quant": "Unroll the Q4 quantize loop (ik_llama.cpp)",
    "stale": "Restrict-qualify mul",
    "cancel": "Start the softmax max at -inf",
    "lost": "Accumulate the dot product in double",
}

# label -> (true relative effect on tg, per-sample noise CV, samples per invocation, status wanted)
MEASURED: dict[str, tuple[float, float, int, str]] = {
    "fuse": (0.06, 0.01, 1, "kept"),
    "prefetch": (-0.05, 0.01, 1, "discarded"),
    "unroll": (0.006, 0.03, 3, "inconclusive"),
    "quant": (0.04, 0.012, 1, "kept"),
    "retry": (-0.03, 0.012, 1, "discarded"),
}


def _git(cwd: Path, *args: str, input_text: str | None = None) -> str:
    env = {**os.environ, **_GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env, input=input_text
    ).stdout


def make_target(path: Path) -> Path:
    """A git repository (branch main, one commit at a fixed date) with the small C target."""
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    for name, text in TARGET_FILES.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "baseline")
    return path


def make_diff(target: Path, label: str) -> str:
    """The unified diff (git format, a/ b/ prefixes) of one of EDITS against the target's HEAD."""
    name, old, new = EDITS[label]
    file = target / name
    original = file.read_text()
    if old not in original:
        raise AssertionError(f"fixture edit {label}: text not found in {name}")
    try:
        file.write_text(original.replace(old, new, 1))
        return _git(target, "diff", "--", name)
    finally:
        file.write_text(original)


def make_workspace(tmp_path: Path) -> tuple[Workspace, Path]:
    """A workspace (real bare mirror) on a fresh target repository, primary metric tg."""
    from kb.init import TargetSpec, create_workspace

    target = make_target(tmp_path / "target")
    spec = TargetSpec(location=str(target), metric=METRIC, direction="higher")
    return create_workspace(tmp_path / "ws", spec), target


def module_workspace(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Workspace]:
    """One workspace for a test module (a module-scoped fixture yields from this), made with HOME,
    git's system config and AUTORESEARCH_WORKSPACE kept out of it."""
    root = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(root))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.delenv("AUTORESEARCH_WORKSPACE", raising=False)
        workspace, _ = make_workspace(root)
        yield workspace


@dataclass
class HistoryFixture:
    ws: Workspace
    target: Path
    run_id: int
    run_name: str
    baseline: str
    waves: list[int] = field(default_factory=list)
    exp: dict[str, int] = field(default_factory=dict)
    hyp: dict[str, int] = field(default_factory=dict)
    patch: dict[str, int] = field(default_factory=dict)
    evidence: dict[str, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)
    winners: dict[str, WinnerRecord] = field(default_factory=dict)

    def db(self) -> sqlite_utils.Database:
        return self.ws.db()


# --- knowledge base ----------------------------------------------------------------------------


def fill_kb(db: sqlite_utils.Database, baseline: str) -> tuple[dict[str, int], dict[str, int]]:
    """A paper with a passage, a fork with a commit, a backend inventory with a fusion and a gap.
    Idempotent: a second call returns the same ids."""
    found = db.execute("SELECT id FROM sources WHERE canonical_url = ?", [PAPER_URL]).fetchone()
    if found:
        s = {r[1]: r[0] for r in db.execute("SELECT id, kind FROM sources").fetchall()}
        e = {r[1]: r[0] for r in db.execute("SELECT id, kind FROM evidence").fetchall()}
        return (
            {"paper": s["paper"], "fork": s["fork"], "inventory": s["inventory"]},
            {"passage": e["passage"], "commit": e["commit"], "fusion": e["fusion"], "gap": e["gap"]},
        )
    t = T0 - 86_400
    with transaction(db):
        paper = insert(
            db,
            "sources",
            {
                "kind": "paper",
                "url": PAPER_URL,
                "canonical_url": PAPER_URL,
                "arxiv_id": "2401.01234",
                "title": "Operator fusion for LLM inference on CPUs",
                "authors": "A. Author, B. Author",
                "published": "2024-01-03",
                "site": "arxiv.org",
                "language": "en",
                "content_hash": "0" * 64,
                "created_at": t,
                "updated_at": t,
            },
        )
        fork = insert(
            db,
            "sources",
            {
                "kind": "fork",
                "name": "ik_llama.cpp",
                "url": FORK_URL,
                "canonical_url": FORK_URL,
                "title": "ik_llama.cpp",
                "ref": "main",
                "commit_sha": FORK_SHA,
                "merge_base": baseline,
                "created_at": t,
                "updated_at": t,
            },
        )
        inventory = insert(
            db,
            "sources",
            {
                "kind": "inventory",
                "name": "backends",
                "title": "Backend fusion inventory",
                "ref": "ggml/src",
                "commit_sha": baseline,
                "created_at": t,
                "updated_at": t,
            },
        )
        passage = insert(
            db,
            "evidence",
            {
                "source_id": paper,
                "kind": "passage",
                "ref": "12",
                "title": "Operator fusion for LLM inference on CPUs",
                "section": "4.2 Fusing normalisation",
                "position": 12,
                "created_at": t,
                "body": "Fusing RMSNorm with the following elementwise multiply saves one pass over the "
                "activations; on memory-bound CPU decoding this gave 4-7% higher token throughput.",
            },
        )
        commit = insert(
            db,
            "evidence",
            {
                "source_id": fork,
                "kind": "commit",
                "ref": FORK_SHA,
                "title": "Faster Q4 quantize",
                "body": "Unroll the quantize loop by 8.",
                "created_at": t,
            },
        )
        insert(
            db,
            "commits",
            {
                "evidence_id": commit,
                "sha": FORK_SHA,
                "author": "Fork Author",
                "authored_at": "2025-11-02",
                "subject": "Faster Q4 quantize",
                "message": "Faster Q4 quantize\n\nUnroll by 8.",
                "files": ["src/quant.c"],
                "insertions": 1,
                "deletions": 0,
            },
        )
        fusion = insert(
            db,
            "evidence",
            {
                "source_id": inventory,
                "kind": "fusion",
                "ref": "cuda:RMS_NORM+MUL",
                "title": "RMS_NORM+MUL",
                "section": "cuda",
                "body": "ggml_can_fuse(cgraph, i, { GGML_OP_RMS_NORM, GGML_OP_MUL })",
                "created_at": t,
            },
        )
        insert(
            db,
            "fusions",
            {
                "evidence_id": fusion,
                "backend": "cuda",
                "ops": "RMS_NORM+MUL",
                "kind": "graph",
                "file": "ggml/src/ggml-cuda/ggml-cuda.cu",
                "line": 2931,
                "commit_sha": baseline,
            },
        )
        gap = insert(
            db,
            "evidence",
            {
                "source_id": inventory,
                "kind": "gap",
                "ref": "cpu:RMS_NORM+MUL",
                "title": "RMS_NORM+MUL",
                "section": "cpu",
                "body": "RMS_NORM+MUL is fused in cuda, metal; not in cpu.",
                "meta": {
                    "present": ["cuda", "metal"],
                    "missing": ["cpu"],
                    "file": "ggml/src/ggml-cuda/ggml-cuda.cu",
                    "line": 2931,
                },
                "created_at": t,
            },
        )
    return (
        {"paper": paper, "fork": fork, "inventory": inventory},
        {"passage": passage, "commit": commit, "fusion": fusion, "gap": gap},
    )


# --- samples and decisions ---------------------------------------------------------------------


def _invocation(rng: random.Random, level: float, cv: float, count: int) -> list[float]:
    return [round(level * (1 + rng.gauss(0.0, cv)), 4) for _ in range(count)]


def _generate(label: str, seed: int, pairs: int) -> list[dict[str, list[list[float]]]]:
    """Raw samples for `pairs` pairs: per pair, per metric, [A invocation, B invocation]."""
    effect, cv, count, _ = MEASURED[label]
    rng = random.Random(f"{seed}:{label}")
    out = []
    for i in range(pairs):
        drift = 1 + 0.0004 * i  # slow warming of the machine: cancels within a pair
        tg_a = _invocation(rng, BASE_TG * drift, cv, count)
        tg_b = _invocation(rng, BASE_TG * drift * (1 + effect), cv, count)
        pp_a = _invocation(rng, BASE_PP * drift, cv, 1)
        pp_b = _invocation(rng, BASE_PP * drift, cv, 1)
        out.append({METRIC: [tg_a, tg_b], SECONDARY: [pp_a, pp_b]})
    return out


def _medians(raw: list[dict[str, list[list[float]]]], metric: str) -> tuple[list[float], list[float]]:
    from runner.stats import side_value

    return [side_value(p[metric][0]) for p in raw], [side_value(p[metric][1]) for p in raw]


def _store_samples(
    db: sqlite_utils.Database, eid: int, raw: list[dict[str, list[list[float]]]], start: float
) -> None:
    for pair, metrics in enumerate(raw):
        for metric, (a, b) in metrics.items():
            for side, values in (("A", a), ("B", b)):
                for seq, value in enumerate(values):
                    # The loop's insert; a sample already there would be a bug of the fixture.
                    added = samples.insert_new(
                        db,
                        {
                            "experiment_id": eid,
                            "pair": pair,
                            "side": side,
                            "metric": metric,
                            "seq": seq,
                            "value": value,
                            "created_at": start + pair * 6 + (3 if side == "B" else 0),
                        },
                    )
                    assert added, f"fixture: sample {eid}/{pair}/{side}/{metric}/{seq} written twice"


def _insert_decision(
    db: sqlite_utils.Database,
    eid: int,
    d: Decision,
    *,
    is_final: bool,
    created_at: float,
    metrics: dict[str, Any] | None = None,
) -> None:
    """One look of the runner's sequential test on the primary metric, as the loop stores it."""
    decisions.record(
        db,
        {
            "experiment_id": eid,
            "verdict": d.verdict,
            "metric": METRIC,
            "effect": d.effect,
            "ci_low": d.ci_low,
            "ci_high": d.ci_high,
            "pairs": d.pairs,
            "p_value": d.p_value,
            "q_value": d.q_value,
            "noise": d.noise,
            "reason": d.reason,
            "policy": POLICY,
            **({"metrics": metrics} if metrics is not None else {}),
            "is_final": int(is_final),
            "origin": "runner",
            "created_at": created_at,
        },
    )


def _decide_wave(
    db: sqlite_utils.Database,
    labels: list[str],
    exp: dict[str, int],
    seed: int,
    start: float,
    *,
    live_label: str | None = None,
) -> dict[str, tuple[float, int]]:
    """Replay the runner's looks on generated pairs, store samples and one decision per look.
    Returns each experiment's (end time, pairs). The live experiment keeps only its first look."""
    from runner.record.redecide import replay_wave
    from runner.stats import Policy

    policy = Policy(**{k: v for k, v in POLICY.items() if k != "metric"})
    raws = {label: _generate(label, seed, policy.max_pairs) for label in labels}
    cases = {label: _medians(raws[label], METRIC) for label in labels}
    looks = replay_wave(cases, policy)
    ends: dict[str, tuple[float, int]] = {}
    for label in labels:
        eid = exp[label]
        steps = looks[label][:1] if label == live_label else looks[label]
        final = steps[-1]
        wanted = MEASURED[label][3]
        if label != live_label and final.status != wanted:
            raise AssertionError(
                f"fixture {label}: decided {final.verdict}, wanted {wanted}; change the seed"
            )
        _store_samples(db, eid, raws[label][: final.pairs], start)
        pp_a, pp_b = _medians(raws[label][: final.pairs], SECONDARY)
        for i, d in enumerate(steps):
            stamp = start + d.pairs * 6 + 1
            secondary = {
                SECONDARY: {
                    "baseline": sorted(pp_a)[len(pp_a) // 2],
                    "candidate": sorted(pp_b)[len(pp_b) // 2],
                }
            }
            final_look = i == len(steps) - 1 and label != live_label
            _insert_decision(db, eid, d, is_final=final_look, created_at=stamp, metrics=secondary)
        ends[label] = (start + final.pairs * 6 + 2, final.pairs)
    return ends


# --- the run -----------------------------------------------------------------------------------


def _hypotheses(
    db: sqlite_utils.Database, target: Path, ev: dict[str, int], run_name: str, t: float
) -> tuple[dict[str, int], dict[str, int]]:
    hyp: dict[str, int] = {}
    patch: dict[str, int] = {}
    cites: dict[str, tuple[list[int], list[str], str]] = {
        "fuse": ([ev["gap"], ev["passage"]], [], "miner:gap"),
        "prefetch": ([], [BLOG_URL, "note:helped on one x86 box"], "manual"),
        "unroll": ([], [], "llm"),
        "quant": ([ev["commit"]], [], "miner:fork"),
    }
    llm_call = insert(
        db,
        "llm_calls",
        {
            "purpose": "research",
            "model": "openai/gpt-test",
            "api_base": "http://127.0.0.1:9",
            "prompt": [{"role": "user", "content": "Propose a softmax change."}],
            "response": "Multiply by the reciprocal.",
            "input_tokens": 812,
            "output_tokens": 95,
            "cost_usd": 0.0021,
            "duration_ms": 1840,
            "created_at": t,
        },
    )
    for i, label in enumerate(EDITS):
        evidence_ids, refs, origin = cites.get(label, ([], [], "manual"))
        hid = hypotheses.create(
            db,
            {
                "title": TITLES[label],
                "rationale": f"{TITLES[label]}.\nExpected to help the memory-bound decode ({run_name}).",
                "expected_effect": MEASURED.get(label, (0.01,))[0] or 0.01,
                "priority": 10.0 - i,
                "status": "patched",
                "origin": origin,
                "llm_call_id": llm_call if origin == "llm" else None,
                "created_at": t + i,
                "updated_at": t + i,
            },
        )
        for eid in evidence_ids:
            insert(db, "hypothesis_evidence", {"hypothesis_id": hid, "evidence_id": eid})
        for ref in refs:
            hypotheses.add_source_ref(db, hid, ref)
        diff = make_diff(target, label)
        from runner.hypotheses import diff_files

        patch[label] = insert(
            db,
            "patches",
            {
                "hypothesis_id": hid,
                "diff": diff,
                "diff_sha": hashlib.sha256(diff.encode()).hexdigest(),
                "files": diff_files(diff),
                "author_kind": {"miner:fork": "fork_commit", "llm": "llm"}.get(origin, "manual"),
                "author": FORK_SHA
                if origin == "miner:fork"
                else ("openai/gpt-test" if origin == "llm" else f"{label}.diff"),
                "llm_call_id": llm_call if origin == "llm" else None,
                "apply_status": "ok",
                "created_at": t + i,
            },
        )
        hyp[label] = hid
    return hyp, patch


def _event(db: sqlite_utils.Database, at: float, kind: str, message: str, **kw: Any) -> None:
    """log_event at a fixed time (the fixture is deterministic)."""
    log_event(db, kind, message, ts=at, **kw)


def _fix_winner_events(db: sqlite_utils.Database, run_id: int) -> None:
    """commit_winner logs at the wall-clock time; move its events to the decision's time."""
    db.execute(
        """UPDATE events
           SET ts = (SELECT created_at FROM winners w WHERE w.experiment_id = events.experiment_id)
           WHERE kind = 'winner' AND run_id = ?""",
        [run_id],
    )


def _log_dir(ws: Workspace, run_name: str, eid: int, status: str) -> str:
    folder = ws.logs_dir / run_name / f"e{eid:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "build.log").write_text(f"cc -O2 -o bench src/*.c -lm\nexperiment {eid}: build ok\n")
    (folder / "bench.log").write_text(f"METRIC {METRIC}=41.4\nexperiment {eid}: {status}\n")
    return str(folder)


def add_run(
    ws: Workspace,
    *,
    name: str = "r1",
    live: bool = False,
    commit_winners: bool = True,
    seed: int = 1,
    target: Path | None = None,
    start: float | None = None,
) -> HistoryFixture:
    """Fill one run into the workspace (see the module docstring); returns its ids by label."""
    from kb import gitrepo
    from runner.record.winners import commit_winner
    from runner.stats import self_test

    target = target or Path(ws.settings.target.path)
    db = ws.db()
    baseline = ws.settings.target.baseline_commit
    sources, ev = fill_kb(db, baseline)
    earlier = run_records.count(db)
    t = start if start is not None else T0 + 86_400 * earlier
    h = HistoryFixture(
        ws=ws, target=target, run_id=0, run_name=name, baseline=baseline, evidence=ev, sources=sources
    )
    branch = f"autoresearch/{name}"
    repo = gitrepo.open_repo(ws.mirror_path)
    if gitrepo.branch_head(repo, branch) is None:
        gitrepo.set_branch(repo, branch, baseline, None)

    with transaction(db):
        h.hyp, h.patch = _hypotheses(db, target, ev, name, t)
        h.run_id = run_records.create(
            db,
            {
                "name": name,
                "status": "running",
                "branch": branch,
                "baseline_commit": baseline,
                "head_commit": baseline,
                "backend": "local",
                "policy": POLICY,
                "budget": {"minutes": 60, "usd": None, "max_experiments": 20},
                "options": {"waves": 2, "parallel": 2, "bench_timeout": 60, "check_timeout": 60},
                "pid": None,
                "host": "fixture",
                "cost_usd": 0.0,
                "started_at": t,
                "heartbeat_at": t,
            },
        )
        _event(db, t, "run_started", f"run {name} started on {baseline[:12]}", run_id=h.run_id)
        worker_ids = [
            workers.create(
                db,
                {
                    "run_id": h.run_id,
                    "name": f"local-{i}",
                    "backend": "local",
                    "status": "down" if not live else "busy",
                    "resources": {"cpus": 1},
                    "noise": 0.01,
                    "started_at": t,
                    "ended_at": None if live else t + 3000,
                },
            )
            for i in range(2)
        ]

        def experiment(
            label: str,
            kind: str,
            wave: int | None,
            status: str,
            *,
            reason: str | None = None,
            phase: str | None = None,
            at: float,
            patch_label: str | None = None,
            title: str | None = None,
            **extra: Any,
        ) -> int:
            plabel = patch_label if patch_label is not None else (label if label in h.patch else None)
            eid = experiments.create(
                db,
                {
                    "run_id": h.run_id,
                    "wave_id": wave,
                    "patch_id": h.patch[plabel] if plabel else None,
                    "hypothesis_id": h.hyp[plabel] if plabel else None,
                    "kind": kind,
                    "title": title or TITLES.get(plabel or "", label),
                    "status": status,
                    "phase": phase,
                    "reason": reason,
                    "worker_id": worker_ids[len(h.exp) % 2],
                    "baseline_commit": baseline,
                    "created_at": at,
                    "started_at": None if status == "queued" else at,
                    "ended_at": None if status in ("queued", "running") else at + 30,
                    **extra,
                },
            )
            h.exp[label] = eid
            experiments.update(db, eid, {"log_dir": _log_dir(ws, name, eid, status)})
            return eid

        # Self-test: the baseline against itself before the first wave.
        rng = random.Random(f"{seed}:self_test")
        st_raw = [
            {METRIC: [_invocation(rng, BASE_TG, 0.01, 1), _invocation(rng, BASE_TG, 0.01, 1)]}
            for _ in range(8)
        ]
        st_id = experiment(
            "self_test",
            "self_test",
            None,
            "passed",
            at=t + 10,
            title="A/A self-test",
        )
        _store_samples(db, st_id, st_raw, t + 10)
        st = self_test(*_medians(st_raw, METRIC))
        # The loop's format: a passed A/A ends `passed` (no difference), its result in meta and
        # runs.self_test, its interval's half-width as the run's noise floor.
        st_data = {**st.to_json(), "reason": "no difference"}
        experiments.update(db, st_id, {"meta": {"self_test": st_data}})
        run_records.update(db, h.run_id, {"self_test": st_data, "noise_floor": st.noise_floor})
        _event(
            db,
            t + 60,
            "self_test",
            f"self-test passed: noise floor {st.noise_floor:.2%}",
            run_id=h.run_id,
            experiment_id=st_id,
        )

        # Wave 1.
        w1_start = t + 100
        w1 = waves.create(
            db,
            {
                "run_id": h.run_id,
                "number": 1,
                "baseline_commit": baseline,
                "status": "finished",
                "started_at": w1_start,
            },
        )
        h.waves.append(w1)
        for label in ("fuse", "prefetch", "unroll"):
            experiment(label, "candidate", w1, MEASURED[label][3], at=w1_start, batches=0)
        ends = _decide_wave(db, ["fuse", "prefetch", "unroll"], h.exp, seed, w1_start)
        for label, (end, pairs) in ends.items():
            experiments.update(db, h.exp[label], {"ended_at": end, "batches": -(-pairs // 8)})
        experiment("wrong", "candidate", w1, "checks_failed", phase="checks", at=w1_start)
        experiment("hang", "candidate", w1, "crashed", reason="timeout", phase="bench", at=w1_start)
        experiment("inflate", "candidate", w1, "refused", reason="autoresearch.sh", at=w1_start)
        nan_id = experiment("nan", "candidate", w1, "crashed", reason="no_metric", phase="bench", at=w1_start)
        _event(
            db,
            w1_start + 20,
            "sample_rejected",
            "rejected sample: METRIC x=nan (not a finite number)",
            level="warning",
            run_id=h.run_id,
            experiment_id=nan_id,
            data={"line": "METRIC x=nan"},
        )
        _event(
            db,
            w1_start + 1,
            "refused",
            "refused: the patch touches autoresearch.sh (protected)",
            level="warning",
            run_id=h.run_id,
            experiment_id=h.exp["inflate"],
        )
        w1_end = max(e for e, _ in ends.values())
        waves.update(db, w1, {"ended_at": w1_end + 5})

    if commit_winners:
        h.winners["fuse"] = commit_winner(ws, db, h.exp["fuse"])
        _fix_winner_events(db, h.run_id)
    head = gitrepo.branch_head(repo, branch) or baseline

    with transaction(db):
        w2_start = w1_end + 60
        w2 = waves.create(
            db,
            {
                "run_id": h.run_id,
                "number": 2,
                "baseline_commit": head,
                "status": "running" if live else "finished",
                "started_at": w2_start,
            },
        )
        h.waves.append(w2)
        wave2 = ["quant", "retry"]
        experiment(
            "quant",
            "candidate",
            w2,
            "running" if live else "kept",
            phase="bench" if live else None,
            at=w2_start,
            baseline_commit=head,
        )
        experiment(
            "stale",
            "candidate",
            w2,
            "crashed",
            reason="does_not_apply",
            phase="setup",
            at=w2_start,
            baseline_commit=head,
        )
        experiment("cancel", "candidate", w2, "cancelled", at=w2_start, baseline_commit=head)
        lost = experiment(
            "lost",
            "candidate",
            w2,
            "lost",
            phase="bench",
            at=w2_start,
            baseline_commit=head,
            meta={"worker": "local-1", "why": "worker lost"},
        )
        experiment(
            "retry",
            "candidate",
            w2,
            "queued" if live else "discarded",
            at=w2_start + 40,
            patch_label="lost",
            retry_of=lost,
            baseline_commit=head,
        )
        if live:
            wave2 = ["quant"]
        ends2 = _decide_wave(db, wave2, h.exp, seed, w2_start, live_label="quant" if live else None)
        if not live:
            for label, (end, pairs) in ends2.items():
                experiments.update(db, h.exp[label], {"ended_at": end, "batches": -(-pairs // 8)})
            waves.update(db, w2, {"ended_at": max(e for e, _ in ends2.values()) + 5})
        else:
            experiments.update(db, h.exp["quant"], {"ended_at": None})
            _event(
                db,
                w2_start + 50,
                "experiment_progress",
                "quant: 8 pairs, continuing",
                run_id=h.run_id,
                experiment_id=h.exp["quant"],
            )

    if live:
        return h
    if commit_winners:
        h.winners["quant"] = commit_winner(ws, db, h.exp["quant"])
        _fix_winner_events(db, h.run_id)
    _finish(ws, db, h, seed, max(e for e, _ in ends2.values()) + 120)
    return h


def _finish(ws: Workspace, db: sqlite_utils.Database, h: HistoryFixture, seed: int, at: float) -> None:
    """The final stack against the original baseline, each winner left out in turn, and the summary."""
    from runner.stats import Policy, decide_paired

    head = h.winners["quant"].commit_sha if "quant" in h.winners else h.baseline
    policy = Policy(min_effect=0.01, max_pairs=16, min_pairs=16, sequential=False)
    plans = [
        ("stack", "stack", 0.10, "stack of 2 winners vs the original baseline", None),
        # An ablation measures the full stack against the stack without one winner (the loop's
        # semantics): its effect is that winner's contribution on top of the others.
        ("ablation_fuse", "ablation", 0.055, f"ablation: without {TITLES['fuse']}", "fuse"),
        ("ablation_quant", "ablation", 0.04, f"ablation: without {TITLES['quant']}", "quant"),
    ]
    # runs.summary as runner/measure/ writes it.
    summary: dict[str, Any] = {"stack": None, "ablation": []}
    # The stack without each winner: the other winner's patch alone on the baseline (real commits).
    without: dict[str, str] = {}
    if "quant" in h.winners:
        from kb import gitrepo

        repo = gitrepo.open_repo(ws.mirror_path)
        quant_patch = hypotheses.patch(db, h.patch["quant"])
        assert quant_patch is not None
        quant_diff = quant_patch.diff
        env = {**_GIT_ENV, "GIT_AUTHOR_NAME": "autoresearch", "GIT_COMMITTER_NAME": "autoresearch"}
        without["fuse"] = gitrepo.commit_patch(
            repo, h.baseline, quant_diff, "ablation: without fuse\n", env=env
        )
        without["quant"] = h.winners["fuse"].commit_sha
    with transaction(db):
        for i, (label, kind, effect, title, left_out) in enumerate(plans):
            rng = random.Random(f"{seed}:{label}")
            raw = [
                {
                    METRIC: [
                        _invocation(rng, BASE_TG, 0.01, 1),
                        _invocation(rng, BASE_TG * (1 + effect), 0.01, 1),
                    ]
                }
                for _ in range(16)
            ]
            eid = experiments.create(
                db,
                {
                    "run_id": h.run_id,
                    "wave_id": None,
                    "patch_id": None,
                    "kind": kind,
                    "title": title,
                    "status": "kept",
                    "baseline_commit": without.get(left_out or "", h.baseline),
                    "candidate_commit": head,
                    "meta": {"role": kind, **({"left_out": h.exp[left_out]} if left_out else {"winners": 2})},
                    "created_at": at + i * 200,
                    "started_at": at + i * 200,
                    "ended_at": at + i * 200 + 120,
                },
            )
            experiments.update(db, eid, {"log_dir": _log_dir(ws, h.run_name, eid, "kept")})
            h.exp[label] = eid
            _store_samples(db, eid, raw, at + i * 200)
            d = decide_paired(*_medians(raw, METRIC), policy, final=True)
            _insert_decision(db, eid, d, is_final=True, created_at=at + i * 200 + 100)
            entry = {
                "experiment": eid,
                "status": "kept",
                "reason": None,
                "effect": d.effect,
                "ci": [d.ci_low, d.ci_high],
                "pairs": d.pairs,
            }
            if left_out is None:
                summary["stack"] = entry
            else:
                summary["ablation"].append({**entry, "left_out": h.exp[left_out]})
        run_records.update(
            db,
            h.run_id,
            {
                "status": "finished",
                "ended_at": at + 800,
                "heartbeat_at": at + 800,
                "summary": summary,
                "head_commit": head,
            },
        )
        _event(db, at + 800, "run_finished", f"run {h.run_name} finished: 2 winners", run_id=h.run_id)


def build_history(
    tmp_path: Path, *, live: bool = False, commit_winners: bool = True, seed: int = 1, name: str = "r1"
) -> HistoryFixture:
    """A workspace on a fresh target with one run (see the module docstring)."""
    ws, target = make_workspace(tmp_path)
    return add_run(ws, name=name, live=live, commit_winners=commit_winners, seed=seed, target=target)


def dump(h: HistoryFixture) -> str:
    """The fixture's ids as JSON (handy when writing a new test)."""
    return json.dumps({"run": h.run_id, "exp": h.exp, "hyp": h.hyp, "waves": h.waves}, indent=2)


# --- pytest fixtures (import them into a test module to use them) ------------------------------


@pytest.fixture(scope="module")
def finished_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HistoryFixture]:
    """One finished run shared by a module's read-only tests (do not modify it)."""
    root = tmp_path_factory.mktemp("history")
    with pytest.MonkeyPatch.context() as mp:
        # Module scope runs before the per-test isolation: keep git away from the user's config.
        mp.setenv("HOME", str(root))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.delenv("AUTORESEARCH_WORKSPACE", raising=False)
        yield build_history(root)
