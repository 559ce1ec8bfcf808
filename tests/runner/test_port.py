"""Porting a fork commit that does not apply: a three-way merge first (kb.gitrepo.three_way), else it
waits as `needs_port` and the patch writer ports it, shown the fork's diff and each function it
changes as the fork and the baseline have it. The model is a scripted OpenAI-compatible server on
127.0.0.1, reached through litellm and the real CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb import gitrepo
from kb.db import one, rows
from kb.forks import add_fork
from kb.init import TargetSpec, create_workspace
from runner.hypotheses import runnable
from runner.research.miners import mine
from tests.runner.research_support import ScriptedLLM, git
from tui.cli import main

NORM = """\
#include <math.h>

static float rms(const float * x, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        sum += x[i] * x[i];
    }
    return sqrtf(sum / n);
}

void rms_norm_f32(const float * x, float * y, int n, float eps) {
    const float scale = 1.0f / (rms(x, n) + eps);
    for (int i = 0; i < n; i++) {
        y[i] = x[i] * scale;
    }
}
"""
OTHER = "int other(void) {\n    return 1;\n}\n" * 3


def _commit(repo: Path, files: dict[str, str | None], message: str) -> str:
    for name, text in files.items():
        path = repo / name
        if text is None:
            git(repo, "rm", "-q", name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def moved(tmp_path: Path) -> dict[str, Any]:
    """Upstream moved rms_norm_f32 from ggml/src/ggml.c into ggml/src/ggml-cpu/ops.c (as llama.cpp
    did in 2024); the fork, from before the move, unrolls it in ggml/src/ggml.c (as ik_llama.cpp
    keeps it), and also edits a line the baseline left alone (that one merges)."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = _commit(
        repo,
        {
            "ggml/src/ggml.c": NORM,
            "ggml/src/util.c": OTHER,
            "autoresearch.sh": "#!/bin/sh\necho METRIC tg=1\n",
        },
        "base",
    )
    git(repo, "checkout", "-q", "-b", "fork")
    unrolled = NORM.replace(
        "    for (int i = 0; i < n; i++) {\n        y[i] = x[i] * scale;",
        "    #pragma GCC unroll 4\n    for (int i = 0; i < n; i++) {\n        y[i] = x[i] * scale;",
    )
    port = _commit(repo, {"ggml/src/ggml.c": unrolled}, "ggml: unroll rms_norm_f32\n\nTG is 5% faster.")
    util = OTHER.replace("return 1;", "return 2;", 1)
    merge = _commit(repo, {"ggml/src/util.c": util}, "util: return 2 from the first other()")
    git(repo, "checkout", "-q", "main")
    # Upstream: the kernel moves to the CPU backend's folder; a comment lands next to the fork's edit.
    _commit(repo, {"ggml/src/ggml.c": None, "ggml/src/ggml-cpu/ops.c": NORM}, "move the CPU kernels")
    _commit(repo, {"ggml/src/util.c": "/* utilities */\n" + OTHER}, "util: a comment")
    ws = create_workspace(
        tmp_path / "ws",
        TargetSpec(location=str(repo), baseline="main", extra={"metric": {"primary": "tg"}}),
    )
    add_fork(ws, ws.db(), "ik", str(repo), branch="fork")
    return {"ws": ws, "repo": repo, "base": base, "port": port, "merge": merge}


def test_mining_rebases_one_and_leaves_the_other_waiting(moved: dict[str, Any]) -> None:
    ws = moved["ws"]
    db = ws.db()
    report = mine(ws, db)
    assert len(report.details["rebased"]) == 1 and len(report.details["needs_port"]) == 1
    query = "SELECT p.*, h.status, h.notes FROM patches p JOIN hypotheses h ON h.id = p.hypothesis_id"
    by_sha = {r["author"]: r for r in rows(db, query)}
    merged, waiting = by_sha[moved["merge"]], by_sha[moved["port"]]
    assert merged["status"] == "proposed" and merged["apply_status"] == "ok"
    assert "rebased onto the baseline by a three-way merge" in merged["notes"]
    repo = gitrepo.open_repo(ws.mirror_path)
    head = gitrepo.commit_patch(repo, ws.settings.target.baseline_commit, merged["diff"], "candidate")
    util = gitrepo.show_file(repo, head, "ggml/src/util.c") or ""
    assert util.startswith("/* utilities */\nint other(void) {\n    return 2;")
    assert waiting["status"] == "needs_port" and waiting["apply_status"] == "conflict"
    assert "ggml/src/ggml.c" in waiting["apply_error"]
    assert {r["hypothesis_id"] for r in runnable(db, require_approval=False)} == {merged["hypothesis_id"]}


def test_the_patch_writer_ports_it_with_both_versions_of_the_function(
    moved: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "dummy-key-for-tests")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    ws, repo = moved["ws"], moved["repo"]
    db = ws.db()
    mine(ws, db)
    hid = one(db, "SELECT id FROM hypotheses WHERE status = 'needs_port'")["id"]  # type: ignore[index]
    path = repo / "ggml/src/ggml-cpu/ops.c"
    path.write_text(path.read_text().replace(
        "    for (int i = 0; i < n; i++) {\n        y[i] = x[i] * scale;",
        "    #pragma GCC unroll 4\n    for (int i = 0; i < n; i++) {\n        y[i] = x[i] * scale;",
    ))  # fmt: skip
    ported = git(repo, "diff", "--no-color")
    git(repo, "checkout", "--", "ggml/src/ggml-cpu/ops.c")

    with ScriptedLLM([json.dumps({"summary": "port the unroll", "diff": ported})]) as server:
        result = CliRunner().invoke(
            main,
            ["-w", str(ws.root), "hypotheses", "patch", "--model", server.litellm_model,
             "--api-base", server.base_url, "--json"],
            catch_exceptions=False,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        [request] = server.requests
    assert [(o["hypothesis_id"], o["status"]) for o in json.loads(result.output)] == [(hid, "patched")]
    user = request["messages"][1]["content"]
    nonce = re.search(r"<<<DATA (\w+) ", user).group(1)  # type: ignore[union-attr]
    # The fork's diff, the function as the fork has it, and as the baseline has it (in its new file).
    assert f"<<<DATA {nonce} original-patch>>>" in user and "Rebase it" in user
    fork_block = user.split(f'<<<DATA {nonce} fork-function location="ggml/src/ggml.c rms_norm_f32">>>')[1]
    assert fork_block.split("<<<END DATA")[0].strip().startswith("void rms_norm_f32(")
    assert "#pragma GCC unroll 4" in fork_block.split("<<<END DATA")[0]
    base_marker = f'<<<DATA {nonce} baseline-function location="ggml/src/ggml-cpu/ops.c rms_norm_f32">>>'
    base_block = user.split(base_marker)[1].split("<<<END DATA")[0]
    assert "void rms_norm_f32(" in base_block and "#pragma" not in base_block
    assert f'<<<DATA {nonce} file path="ggml/src/ggml-cpu/ops.c">>>' in user  # the file to patch
    patch = one(db, "SELECT * FROM patches WHERE hypothesis_id = ? ORDER BY id DESC LIMIT 1", [hid])
    assert patch is not None and patch["author_kind"] == "llm" and patch["apply_status"] == "ok"
    assert gitrepo.apply_check(gitrepo.open_repo(ws.mirror_path), ws.settings.target.baseline_commit,
                               patch["diff"]) is None  # fmt: skip
    # Ported: it is queued like a fork commit that applies, and runs.
    assert one(db, "SELECT status FROM hypotheses WHERE id = ?", [hid]) == {"status": "proposed"}
    assert hid in {r["hypothesis_id"] for r in runnable(db, require_approval=False)}
