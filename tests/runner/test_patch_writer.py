"""The patch writer against a real target repository, with litellm's mock_response as the model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kb.db import one, rows
from kb.workspace import Workspace
from runner.hypotheses import latest_patch, set_status
from runner.llm import LLMClient, LLMConfig, LLMError
from runner.research.miners import mine
from runner.research.patch_writer import pending, recount, write_patch, write_patches
from tests.runner.research_support import Target, git, make_target, make_workspace, seed_kb

FUSED = """
/* y = x / rms(x) * w: RMS_NORM and MUL in one pass */
void rms_norm_mul(const float *x, const float *w, float *y, int n, float eps) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        sum += x[i] * x[i];
    }
    const float scale = 1.0f / sqrtf(sum / n + eps);
    for (int i = 0; i < n; i++) {
        y[i] = x[i] * scale * w[i];
    }
}
"""


def diff_for(target: Target, changes: dict[str, str]) -> str:
    """A real `git diff` of edits to the baseline files (the target's work tree is at the baseline)."""
    for path, text in changes.items():
        (target.path / path).write_text(text)
    try:
        return git(target.path, "diff", "--no-color")
    finally:
        git(target.path, "checkout", "--", *changes)


def answer(diff: str, summary: str = "fuse") -> str:
    return json.dumps({"summary": summary, "diff": diff})


def setup(tmp_path: Path) -> tuple[Target, Workspace, int]:
    target = make_target(tmp_path)
    ws = make_workspace(tmp_path, target)
    seed_kb(ws, target)
    db = ws.db()
    report = mine(ws, db)
    return target, ws, report.added["gap"][0]


def client(ws: Workspace, mocks: list[str | BaseException], **config) -> LLMClient:  # type: ignore[no-untyped-def]
    return LLMClient(ws.db(), LLMConfig(model="gpt-4o-mini", **config), mock_responses=mocks, backoff_s=0)


def good_diff(target: Target) -> str:
    path = "src/backend-cpu/ops-norm.c"
    text = git(target.path, "show", f"HEAD:{path}")
    return diff_for(target, {path: text + FUSED})


def stale_diff(diff: str) -> str:
    """The same diff with a context line that is not in the baseline."""
    stale = diff.replace("         y[i] = a[i] * b[i];", "         y[i] = a[i] + b[i];")
    assert stale != diff
    return stale


def test_a_diff_that_does_not_apply_is_fed_back_then_the_fix_is_kept(tmp_path: Path) -> None:
    target, ws, gap_h = setup(tmp_path)
    db = ws.db()
    set_status(db, gap_h, "approved")
    good = good_diff(target)
    stale = stale_diff(good)
    # Also miscount the good diff's hunk: the writer recounts hunk headers before checking.
    miscounted = re.sub(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", r"@@ -\1,\2 +\3,99 @@", good, flags=re.M)
    c = client(ws, [answer(stale), answer(miscounted)])

    outcome = write_patch(ws, db, c, gap_h)

    assert outcome.status == "patched" and outcome.attempts == 2
    patch = latest_patch(db, gap_h)
    assert patch is not None and patch["id"] == outcome.patch_id
    assert (
        patch["author_kind"] == "llm" and patch["author"] == "gpt-4o-mini" and patch["apply_status"] == "ok"
    )
    assert patch["llm_call_id"] == outcome.call_ids[-1]
    assert patch["diff"] == good
    assert one(db, "SELECT status FROM hypotheses WHERE id = ?", [gap_h]) == {"status": "patched"}

    first, second = rows(
        db, "SELECT prompt, hypothesis_id FROM llm_calls WHERE purpose = 'patch' ORDER BY id"
    )
    assert first["hypothesis_id"] == gap_h
    prompt = json.loads(first["prompt"])
    user = prompt[1]["content"]
    nonce = re.search(r"<<<DATA (\w+) ", user).group(1)  # type: ignore[union-attr]
    # The target file found by searching the baseline for the ops, and the other backend's kernel.
    assert f'<<<DATA {nonce} file path="src/backend-cpu/ops-norm.c">>>' in user
    assert 'reference location="accel: src/backend-accel/accel.c:4"' in user
    assert "accel_rms_norm_mul" in user
    assert (
        "Never touch these protected paths: autoresearch.sh, autoresearch.checks.sh" in prompt[0]["content"]
    )
    feedback = json.loads(second["prompt"])[-1]["content"]
    assert "git apply --check" in feedback and "patch failed: src/backend-cpu/ops-norm.c" in feedback
    assert "/* accumulator */" in feedback  # the baseline text around the failing line
    assert one(db, "SELECT count(*) AS n FROM events WHERE kind = 'patch.does_not_apply'") == {"n": 1}


def test_no_applicable_diff_after_n_attempts_is_unpatchable(tmp_path: Path) -> None:
    target, ws, gap_h = setup(tmp_path)
    db = ws.db()
    stale = stale_diff(good_diff(target))
    outcome = write_patch(ws, db, client(ws, [answer(stale)]), gap_h, attempts=2)
    assert outcome.status == "unpatchable" and outcome.attempts == 2
    assert "no diff applied to the baseline in 2 attempts" in outcome.reason
    h = one(db, "SELECT status, notes FROM hypotheses WHERE id = ?", [gap_h])
    assert h is not None and h["status"] == "unpatchable" and "unpatchable: no diff applied" in h["notes"]
    assert latest_patch(db, gap_h) is None


def test_a_patch_touching_a_protected_path_is_refused(tmp_path: Path) -> None:
    target, ws, gap_h = setup(tmp_path)
    db = ws.db()
    cheat = diff_for(target, {"autoresearch.sh": "#!/bin/sh\necho METRIC throughput=1000\n"})
    outcome = write_patch(ws, db, client(ws, [answer(cheat)]), gap_h)
    assert outcome.status == "unpatchable" and outcome.attempts == 1
    assert (
        outcome.reason == "the model's patch touches autoresearch.sh (the benchmark script: autoresearch.sh)"
    )
    assert one(db, "SELECT status FROM hypotheses WHERE id = ?", [gap_h]) == {"status": "unpatchable"}
    assert latest_patch(db, gap_h) is None


@pytest.mark.parametrize("spelled", ["autoresearch.sh", "autoresearch\\056sh"])
def test_a_quoted_header_edit_of_a_protected_path_is_refused(tmp_path: Path, spelled: str) -> None:
    """The headers a model writes are not trusted: git reads `"a/autoresearch\\056sh"` as the
    benchmark script, and so does the refusal."""
    target, ws, gap_h = setup(tmp_path)
    db = ws.db()
    plain = diff_for(target, {"autoresearch.sh": "#!/bin/sh\necho METRIC throughput=1000\n"})
    cheat = (
        plain.replace(
            "diff --git a/autoresearch.sh b/autoresearch.sh", f'diff --git "a/{spelled}" "b/{spelled}"'
        )
        .replace("--- a/autoresearch.sh", f'--- "a/{spelled}"')
        .replace("+++ b/autoresearch.sh", f'+++ "b/{spelled}"')
    )
    assert "a/autoresearch.sh b/" not in cheat
    outcome = write_patch(ws, db, client(ws, [answer(cheat)]), gap_h)
    assert outcome.status == "unpatchable" and "touches autoresearch.sh" in outcome.reason
    assert latest_patch(db, gap_h) is None


def test_a_conflicting_fork_patch_is_rebased(tmp_path: Path) -> None:
    target, ws, _ = setup(tmp_path)
    db = ws.db()
    conflict = one(db, "SELECT hypothesis_id FROM patches WHERE apply_status = 'conflict'")
    assert conflict is not None
    hid = conflict["hypothesis_id"]
    assert hid in pending(db, ws.settings)
    path = "src/backend-cpu/ops-norm.c"
    text = git(target.path, "show", f"HEAD:{path}")
    rebased = diff_for(
        target, {path: text.replace("float sum = 0.0f; /* accumulator */", "double sum = 0.0;")}
    )

    outcome = write_patch(ws, db, client(ws, [answer(rebased, "rebase")]), hid)

    assert outcome.status == "patched"
    patches = rows(
        db, "SELECT author_kind, apply_status FROM patches WHERE hypothesis_id = ? ORDER BY id", [hid]
    )
    assert patches == [
        {"author_kind": "fork_commit", "apply_status": "conflict"},
        {"author_kind": "llm", "apply_status": "ok"},
    ]
    user = json.loads(one(db, "SELECT prompt FROM llm_calls ORDER BY id DESC LIMIT 1")["prompt"])[1][
        "content"
    ]  # type: ignore[index]
    assert "Rebase it" in user and "original-patch" in user and "git-apply-error" in user
    assert hid not in pending(db, ws.settings)


def test_a_model_that_never_answers_validly_leaves_the_hypothesis_as_it_was(tmp_path: Path) -> None:
    _, ws, gap_h = setup(tmp_path)
    db = ws.db()
    outcome = write_patch(ws, db, client(ws, ['{"summary": "x", "diff": "not a diff"}']), gap_h)
    assert outcome.status == "failed" and "gave no valid answer" in outcome.reason
    assert one(db, "SELECT status FROM hypotheses WHERE id = ?", [gap_h]) == {"status": "proposed"}
    errors = [r["error"] for r in rows(db, "SELECT error FROM llm_calls ORDER BY id")]
    assert len(errors) == 3 and all("not a unified diff" in e for e in errors)


def test_a_spent_budget_stops_the_batch(tmp_path: Path) -> None:
    target, ws, gap_h = setup(tmp_path)
    db = ws.db()
    ids = pending(db, ws.settings)
    assert ids[0] == gap_h and len(ids) == 2  # the gap and the conflicting fork commit
    outcomes = write_patches(ws, db, client(ws, [answer(good_diff(target))], budget_usd=0.0), ids)
    assert [o.status for o in outcomes] == ["failed", "skipped"]
    assert "llm budget reached" in outcomes[0].reason
    assert one(db, "SELECT count(*) AS n FROM patches WHERE author_kind = 'llm'") == {"n": 0}


def test_pending_honours_require_approval(tmp_path: Path) -> None:
    _, ws, gap_h = setup(tmp_path)
    db = ws.db()
    text = ws.config_path.read_text().replace("require_approval = false", "require_approval = true")
    ws.config_path.write_text(text)
    strict = Workspace(ws.root)
    assert pending(db, strict.settings) == []
    set_status(db, gap_h, "approved")
    assert pending(db, strict.settings) == [gap_h]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            "--- a/f\n+++ b/f\n@@ -1,9 +1,9 @@\n a\n-b\n+B\n c\n",
            "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
        ),
        (  # a blank context line lost its space; trailing blank lines are not part of the hunk
            "--- a/f\n+++ b/f\n@@ -1 +1 @@ int f()\n a\n\n-b\n+B\n\n\n",
            "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@ int f()\n a\n \n-b\n+B\n",
        ),
        (  # two files, a removed line that starts with dashes, a new file
            "--- a/f\n+++ b/f\n@@ -1,1 +1,1 @@\n--- x\n+-- y\n"
            "--- /dev/null\n+++ b/g\n@@ -0,0 +1,5 @@\n+1\n+2\n",
            "--- a/f\n+++ b/f\n@@ -1,1 +1,1 @@\n--- x\n+-- y\n"
            "--- /dev/null\n+++ b/g\n@@ -0,0 +1,2 @@\n+1\n+2\n",
        ),
    ],
)
def test_recount(given: str, expected: str) -> None:
    assert recount(given) == expected


def test_big_files_are_cut_to_their_most_telling_lines() -> None:
    from runner.research.patch_writer import MAX_FILE_CHARS, _excerpt

    lines = [f"    y[i] = mul(a[i], b[i]); /* filler {i} */" for i in range(3000)]
    lines[2000] = "static void rms_norm_f32(const float * x, float * y) {"
    out = _excerpt("\n".join(lines), ["RMS_NORM", "rms_norm", "MUL", "mul"])
    assert "rms_norm_f32" in out and len(out) < MAX_FILE_CHARS * 1.2
    assert "[lines 1971-2031 of 3000]" in out  # the rare term's window, marked with its line range
    assert _excerpt("short\n", ["x"]) == "short\n"


def test_a_prompt_too_long_for_a_local_server_is_asked_again_smaller(tmp_path: Path) -> None:
    """A local OpenAI-compatible server with a small context window (llama-server: 16k tokens for
    the recipe's model) refuses a prompt that holds the big target files whole; the writer learns
    the window from the server's answer and asks again with every part cut down to fit."""
    from runner.llm import ContextExceeded, context_limit
    from tests.runner.research_support import ScriptedLLM, make_target, make_workspace, seed_kb

    target = make_target(tmp_path)
    big = "".join(
        f"/* rms_norm helper {i} */\nstatic float rms_norm_part_{i}(const float *x, int n) {{\n"
        f"    float s = 0.0f;\n    for (int k = 0; k < n; k++) s += x[k] * x[k] * {i}.0f;\n"
        "    return s;\n}\n"
        for i in range(1500)
    )
    (target.path / "src/backend-cpu/ops-norm-parts.c").write_text(big)
    git(target.path, "add", "-A")
    git(target.path, "commit", "-qm", "many rms_norm helpers")
    ws = make_workspace(tmp_path, target)
    seed_kb(ws, target)
    db = ws.db()
    gap_h = mine(ws, db).added["gap"][0]
    good = good_diff(target)
    window = 6000  # tokens; the server counts 3 characters a token

    def server(body: dict[str, object]) -> dict[str, object] | str:
        chars = sum(len(str(m["content"])) for m in body["messages"])  # type: ignore[attr-defined]
        if chars // 3 > window:
            return {
                "status": 400,
                "content": f"request ({chars // 3} tokens) exceeds the available context size "
                f"({window} tokens), try increasing it",
            }
        return answer(good)

    with ScriptedLLM(server) as llm:
        c = LLMClient(db, LLMConfig(model=llm.litellm_model, api_base=llm.base_url), backoff_s=0)
        assert c.context_tokens() is None  # a local server's window is not known in advance
        outcome = write_patch(ws, db, c, gap_h)
        sizes = [sum(len(str(m["content"])) for m in r["messages"]) for r in llm.requests]

    assert outcome.status == "patched", outcome.reason
    assert c.context_tokens() == window  # learned from the server's answer, kept for later prompts
    assert sizes[0] // 3 > window >= sizes[-1] // 3, sizes
    calls = rows(db, "SELECT error FROM llm_calls WHERE purpose = 'patch' ORDER BY id")
    assert "exceeds the available context size (6000 tokens)" in (calls[0]["error"] or "")
    assert calls[-1]["error"] is None
    # The next prompt is cut to the learned window from the start.
    from kb import gitrepo
    from runner import prompting
    from runner.harness.patchpaths import protected_paths
    from runner.research.patch_writer import _messages, gather_files
    from runner.research.prompt_sizes import Sizes

    fitted = Sizes.fit(c.prompt_chars())
    protected = protected_paths(ws, ws.settings)
    repo, base = gitrepo.open_repo(ws.mirror_path), ws.settings.target.baseline_commit
    ctx = gather_files(db, repo, base, gap_h, ws.settings, protected, fitted)
    prompt = _messages(db, gap_h, ctx, ws.settings, prompting.new_nonce(), protected, fitted)
    assert sum(len(m["content"]) for m in prompt) // 3 <= window
    # The servers' wordings of the window they have.
    assert context_limit("This model's maximum context length is 8192 tokens. However, ...") == 8192
    assert context_limit("request (9000 tokens) exceeds the available context size (4096 tokens)") == 4096
    assert context_limit("some other error") is None
    assert issubclass(ContextExceeded, LLMError)
