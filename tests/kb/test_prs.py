"""The upstream's pull requests: a git repository made by the test exposes `refs/pull/N/head` (and,
for open ones, `refs/pull/N/merge`) as GitHub does. `kb add-prs` reads them through the fork
machinery; a merged one (by a merge commit) and a squash-merged one are flagged upstream; the open
ones become hypotheses, one per pull request, through the miners' registry and ranking; titles
come from the head commits offline, from a GitHub-like API on 127.0.0.1 when asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb.config import PullRequestSettings
from kb.db import rows
from kb.errors import UserError
from kb.init import TargetSpec, create_workspace
from kb.prs import add_prs
from kb.workspace import Workspace
from runner.research.miners import mine
from tests.conftest import git
from tests.kb.api_support import APIServer
from tests.kb.helpers import db_dump, set_kb_settings
from tui.cli import main

OPS = "ggml/src/ggml-cpu/ops.cpp"
BASE = "".join(
    f"void op_{i}(float *x, int n) {{ for (int j = 0; j < n; j++) x[j] *= {i}; }}\n" for i in range(12)
)


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def edit(text: str, line: int, new: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[line] = new + "\n"
    return "".join(lines)


def upstream(tmp_path: Path) -> Path:
    """main, with PR heads as GitHub keeps them: #1 and #4 open, #2 merged, #3 squash-merged."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {OPS: BASE, "README.md": "ops\n"}, "base")
    fork_point = git(repo, "rev-parse", "HEAD")

    def branch(name: str, changes: list[tuple[int, str, str]]) -> str:
        git(repo, "checkout", "-q", "-b", name, fork_point)
        text = BASE
        for line, new, message in changes:
            text = edit(text, line, new)
            commit(repo, {OPS: text}, message)
        git(repo, "checkout", "-q", "main")
        return git(repo, "rev-parse", name)

    heads = {
        1: branch(
            "gate-up",
            [
                (
                    1,
                    "void op_1(float *x, int n) { /* fused gate+up */ }",
                    "cpu: fuse gate and up projections\n\nPrompt processing +12% pp on a dense model.",
                )
            ],
        ),
        2: branch("merged", [(3, "void op_3(float *x, int n) { /* merged */ }", "cpu: tidy op_3")]),
        3: branch(
            "squashed",
            [
                (5, "void op_5(float *x, int n) { /* a */ }", "cpu: op_5 step one"),
                (6, "void op_6(float *x, int n) { /* b */ }", "cpu: op_6 step two"),
            ],
        ),
        4: branch(
            "two-steps",
            [
                (8, "void op_8(float *x, int n) { /* x */ }", "cpu: prepare op_8"),
                (9, "void op_9(float *x, int n) { /* y */ }", "cpu: unroll op_9 for +5% tg"),
            ],
        ),
    }
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge pull request #2", "merged")
    squash = edit(
        edit((repo / OPS).read_text(), 5, "void op_5(float *x, int n) { /* a */ }"),
        6,
        "void op_6(float *x, int n) { /* b */ }",
    )
    commit(repo, {OPS: squash}, "cpu: op_5 and op_6 (#3)")
    for number, sha in heads.items():
        git(repo, "update-ref", f"refs/pull/{number}/head", sha)
    for number in (1, 4):  # GitHub keeps a merge ref for open pull requests only
        git(repo, "update-ref", f"refs/pull/{number}/merge", heads[number])
    for name in ("gate-up", "merged", "squashed", "two-steps"):
        git(repo, "branch", "-q", "-D", name)
    return repo


@pytest.fixture
def pr_ws(tmp_path: Path) -> tuple[Workspace, Path]:
    repo = upstream(tmp_path)
    return create_workspace(tmp_path / "ws", TargetSpec(location=str(repo))), repo


def test_open_prs_are_mined_and_merged_ones_flagged_upstream(pr_ws: tuple[Workspace, Path]) -> None:
    ws, repo = pr_ws
    db = ws.db()
    report = add_prs(ws, db, str(repo))
    assert report.host == "github" and report.name == "upstream"
    assert any("names no project" in note for note in report.notes)  # a local copy: titles from commits
    pulls = {p.number: p for p in report.pulls}
    assert sorted(pulls) == [1, 2, 3, 4]
    assert (pulls[1].state, pulls[1].upstream, pulls[1].commits) == ("open", False, 1)
    assert pulls[1].title == "cpu: fuse gate and up projections" and pulls[1].described_by == "commit"
    assert (pulls[4].state, pulls[4].upstream, pulls[4].commits) == ("open", False, 2)
    assert pulls[2].upstream and pulls[2].state == "merged"
    assert pulls[2].upstream_reason == "its head is in the baseline's history (merged)"
    assert pulls[3].upstream and pulls[3].state == "merged"
    assert pulls[3].upstream_reason is not None and "squash-merged" in pulls[3].upstream_reason
    stored = {r["number"]: r for r in rows(db, "SELECT * FROM pull_requests")}
    assert {n: r["upstream"] for n, r in stored.items()} == {1: 0, 2: 1, 3: 1, 4: 0}
    # Each pull request's commits are fork commits of its own source; the upstream ones flagged so.
    commits = rows(
        db,
        "SELECT s.name, c.upstreamed FROM commits c JOIN evidence e ON e.id = c.evidence_id "
        "JOIN sources s ON s.id = e.source_id ORDER BY s.name, e.id",
    )
    assert [(c["name"], c["upstreamed"]) for c in commits] == [
        ("upstream-pr1", 0),
        ("upstream-pr3", 1),
        ("upstream-pr3", 1),
        ("upstream-pr4", 0),
        ("upstream-pr4", 0),
    ]

    mined = mine(ws, db)
    assert len(mined.added["pr"]) == 2 and mined.added["fork"] == []  # the fork miner leaves them be
    hypotheses = {
        h["title"]: h
        for h in rows(db, "SELECT id, title, origin, expected_effect, status, rank FROM hypotheses")
    }
    gate = hypotheses["PR #1: cpu: fuse gate and up projections"]
    assert gate["origin"] == "miner:pr" and gate["status"] == "proposed"
    assert gate["expected_effect"] == pytest.approx(0.12)  # the gain its message claims
    assert gate["rank"] is not None  # ranked with the rest of the queue
    two = hypotheses["PR #4: cpu: unroll op_9 for +5% tg"]
    cited = rows(db, "SELECT evidence_id FROM hypothesis_evidence WHERE hypothesis_id = ?", [two["id"]])
    assert len(cited) == 2  # both of its commits
    [patch] = rows(
        db, "SELECT diff, author_kind, apply_status FROM patches WHERE hypothesis_id = ?", [two["id"]]
    )
    assert patch["apply_status"] == "ok" and "/* x */" in patch["diff"] and "/* y */" in patch["diff"]
    assert not any(t.startswith(("PR #2", "PR #3")) for t in hypotheses)
    # Again: nothing new, nothing twice.
    again = add_prs(ws, db, str(repo))
    assert {p.status for p in again.pulls} == {"unchanged"}
    assert mine(ws, db).added["pr"] == []


def test_titles_from_the_hosts_api(pr_ws: tuple[Workspace, Path]) -> None:
    ws, repo = pr_ws
    with APIServer() as api:
        pulls = [
            {
                "number": 4,
                "title": "CPU: unroll op_9",
                "body": "Two steps; tg +5%.",
                "state": "open",
                "merged_at": None,
                "html_url": "https://github.com/o/r/pull/4",
                "user": {"login": "dev4"},
            },
            {
                "number": 3,
                "title": "op_5 and op_6",
                "body": "",
                "state": "closed",
                "merged_at": "2025-01-02T00:00:00Z",
                "html_url": "https://github.com/o/r/pull/3",
                "user": {"login": "dev3"},
            },
            {
                "number": 2,
                "title": "Tidy op_3",
                "body": None,
                "state": "closed",
                "merged_at": "2025-01-01T00:00:00Z",
                "html_url": "https://github.com/o/r/pull/2",
                "user": {"login": "dev2"},
            },
            {
                "number": 1,
                "title": "ggml-cpu: fuse gate+up for MoE",
                "body": "+12% prompt processing (pp512).",
                "state": "closed",
                "merged_at": None,
                "html_url": "https://github.com/o/r/pull/1",
                "user": {"login": "dev1"},
            },
        ]
        api.answer("/repos/o/r/pulls", pulls)
        ws = set_kb_settings(ws, prs=PullRequestSettings(host_api="on", github_api=api.base))
        report = add_prs(ws, ws.db(), str(repo), project="o/r")
        call = api.calls[0]
        assert call.query == {
            "state": "all",
            "per_page": "100",
            "page": "1",
            "sort": "created",
            "direction": "desc",
        }
    by = {p.number: p for p in report.pulls}
    assert sorted(by) == [2, 3, 4] and report.left_out == 1  # #1 was closed unmerged
    assert (by[4].title, by[4].described_by, by[4].author, by[4].url) == (
        "CPU: unroll op_9",
        "api",
        "dev4",
        "https://github.com/o/r/pull/4",
    )
    assert by[2].state == by[3].state == "merged" and by[2].upstream and by[3].upstream
    mined = mine(ws, ws.db())
    [hid] = mined.added["pr"]
    [h] = rows(ws.db(), "SELECT title, rationale FROM hypotheses WHERE id = ?", [hid])
    assert h["title"] == "PR #4: CPU: unroll op_9" and "Two steps; tg +5%." in h["rationale"]


def test_add_prs_cli_and_bad_remotes(tmp_path: Path, pr_ws: tuple[Workspace, Path]) -> None:
    ws, repo = pr_ws
    runner = CliRunner(mix_stderr=False)
    result = runner.invoke(main, ["--workspace", str(ws.root), "kb", "add-prs", str(repo), "--limit", "2"])
    assert result.exit_code == 0, result.stderr
    assert "#4 [open] cpu: unroll op_9 for +5% tg (2 commits, 1 files)" in result.stdout
    assert "#3 [upstream: the baseline already contains its change" in result.stdout
    assert "2 pull requests read (1 open; 1 already upstream), 2 left out" in result.stdout
    listed = json.loads(runner.invoke(main, ["--workspace", str(ws.root), "kb", "prs", "--json"]).stdout)
    assert [(p["number"], p["state"], p["upstream"]) for p in listed] == [(4, "open", 0), (3, "merged", 1)]
    plain = tmp_path / "plain"
    plain.mkdir()
    git(plain, "init", "-q", "-b", "main")
    git(plain, "commit", "-q", "--allow-empty", "-m", "nothing")
    before = db_dump(ws.db_path)
    bad = runner.invoke(main, ["--workspace", str(ws.root), "kb", "add-prs", str(plain)])
    assert bad.exit_code == 1
    assert (
        bad.stderr.strip()
        == f"Error: {plain}: no pull-request refs (refs/pull/*/head or refs/merge-requests/*/head) to read"
    )
    missing = runner.invoke(main, ["--workspace", str(ws.root), "kb", "add-prs", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and missing.stderr.strip() == f"Error: {tmp_path / 'nope'}: no such folder"
    assert db_dump(ws.db_path) == before
    with pytest.raises(UserError, match="--name a b"):
        add_prs(ws, ws.db(), str(repo), name="a b")
