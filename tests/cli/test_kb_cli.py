"""`autoresearch kb ...` for papers, forks and search: output, JSON shapes, exit codes, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kb.init import TargetSpec, create_workspace
from kb.workspace import Workspace
from tests.kb.helpers import (
    ENGLISH_SECTIONS,
    RUSSIAN_SECTIONS,
    ForkRepos,
    LoopbackServer,
    article_page,
    build_fork_repos,
    db_dump,
)
from tui.cli import main


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv


@pytest.fixture
def repos(tmp_path: Path) -> ForkRepos:
    return build_fork_repos(tmp_path / "repos")


@pytest.fixture
def ws(tmp_path: Path, repos: ForkRepos) -> Workspace:
    return create_workspace(tmp_path / "ws", TargetSpec(location=str(repos.upstream.path)))


def kb(ws: Workspace, *args: str) -> Result:
    return CliRunner(mix_stderr=False).invoke(main, ["--workspace", str(ws.root), "kb", *args])


def real_cli(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed command line in its own process: real exit codes and streams."""
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "--workspace", str(ws.root), "kb", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )


def test_add_paper_search_show(ws: Workspace, server: LoopbackServer) -> None:
    url = server.add("/post", article_page("Fusing ops in ggml", ENGLISH_SECTIONS))
    result = kb(ws, "add-paper", url)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("added paper 1: Fusing ops in ggml (")
    again = kb(ws, "add-paper", url)
    assert again.exit_code == 0
    assert again.stdout.strip() == f"{url}: already in the knowledge base (paper 1: Fusing ops in ggml)"

    found = kb(ws, "search", "ggml_can_fuse", "--json")
    assert found.exit_code == 0, found.stderr
    hits = json.loads(found.stdout)
    assert len(hits) == 1
    assert {"kind", "id", "title", "snippet", "score"} <= set(hits[0])
    assert hits[0]["kind"] == "paper" and hits[0]["title"] == "Fusing ops in ggml"
    assert "**ggml_can_fuse**" in hits[0]["snippet"]

    text = kb(ws, "search", "memory", "bandwidth", "--limit", "5")
    assert text.exit_code == 0
    assert text.stdout.startswith(f"[{hits[0]['id']}] paper: Fusing ops in ggml › Background")

    shown = kb(ws, "show", str(hits[0]["id"]))
    assert shown.exit_code == 0
    assert "section:  Background" in shown.stdout and "ggml_can_fuse" in shown.stdout
    assert f"url:      {url}" in shown.stdout
    detail = json.loads(kb(ws, "show", str(hits[0]["id"]), "--json").stdout)
    assert detail["section"] == "Background" and detail["source"]["kind"] == "paper"

    papers = json.loads(kb(ws, "papers", "--json").stdout)
    assert [(p["id"], p["title"]) for p in papers] == [(1, "Fusing ops in ggml")]
    assert papers[0]["passages"] >= 2
    assert "Fusing ops in ggml" in kb(ws, "papers").stdout


def test_add_paper_folder_shows_progress(ws: Workspace, tmp_path: Path) -> None:
    folder = tmp_path / "pages"
    folder.mkdir()
    for i in range(5):
        sections = [(f"Part {i}", [f"Article {i} measures cache blocking of kernel number {i}. " * 4])]
        (folder / f"a{i}.html").write_text(article_page(f"Article {i}", sections))
    (folder / "ru.html").write_text(article_page("Слияние", RUSSIAN_SECTIONS, lang="ru"))
    result = kb(ws, "add-paper", str(folder))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("added paper") == 6
    assert "papers" in result.stderr  # the progress bar's label
    assert "6 added, 0 already in the knowledge base, 0 failed" in result.stderr
    stats = json.loads(kb(ws, "stats", "--json").stdout)
    assert stats["sources"] == {"paper": 6} and stats["evidence"]["passage"] >= 6
    assert stats["db_bytes"] > 0
    assert json.loads(kb(ws, "search", "пропускную", "--json").stdout)[0]["title"] == "Слияние"


def test_bad_paper_is_one_line_and_changes_nothing(ws: Workspace, server: LoopbackServer) -> None:
    url = server.add("/paper.pdf", b"%PDF-1.7\n" + bytes(64), content_type="application/pdf")
    before = db_dump(ws.db_path)
    result = real_cli(ws, "add-paper", url)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: {url}: truncated PDF (no %%EOF at its end: the file or the download was cut short)"
    ]
    assert db_dump(ws.db_path) == before


def test_mixed_inputs_report_each_and_fail(ws: Workspace, server: LoopbackServer) -> None:
    good = server.add("/good", article_page("Good", ENGLISH_SECTIONS))
    bad = server.add("/img", b"\x89PNG\r\n\x1a\n" + bytes(64), content_type="image/png")
    result = kb(ws, "add-paper", good, bad, "--json")
    assert result.exit_code == 1
    statuses = [(r["input"], r["status"]) for r in json.loads(result.stdout)]
    assert statuses == [(good, "added"), (bad, "error")]
    assert result.stderr.strip() == f"Error: {bad}: not HTML or PDF (image/png, binary content)"


def test_search_errors(ws: Workspace) -> None:
    result = kb(ws, "search", '"(')
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: '\"(': nothing to search for (give at least one word)"
    assert kb(ws, "search", "absent_identifier").stdout.strip() == "no results for 'absent_identifier'"
    assert json.loads(kb(ws, "search", "NEAR(", "--json").stdout) == []
    missing = kb(ws, "show", "42")
    assert missing.exit_code == 1 and missing.stderr.strip() == "Error: evidence 42: no such evidence id"


def test_forks_and_commits(ws: Workspace, repos: ForkRepos) -> None:
    added = kb(ws, "add-fork", "ik", str(repos.fork.path))
    assert added.exit_code == 0, added.stderr
    assert added.stdout.startswith("fork ik: added 5 new commits (5 fork-only, 1 already upstream)")
    again = kb(ws, "add-fork", "ik")
    assert again.exit_code == 0 and "up to date" in again.stdout

    forks = json.loads(kb(ws, "forks", "--json").stdout)
    assert [(f["name"], f["commits"], f["upstreamed"]) for f in forks] == [("ik", 5, 1)]
    assert "ik" in kb(ws, "forks", "ik").stdout

    commits = json.loads(kb(ws, "commits", "ik", "--path", "ggml/src/ggml-cpu/", "--json").stdout)
    assert [c["sha"] for c in commits] == [repos.shas["fuse"], repos.shas["huge"]]
    assert {"sha", "subject", "files", "upstreamed"} <= set(commits[0])
    assert commits[0]["files"] == ["ggml/src/ggml-cpu/ops.c"] and commits[0]["upstreamed"] is False
    table = kb(ws, "commits", "ik").stdout.splitlines()
    assert table[0].split() == ["id", "sha", "up", "+/-", "files", "subject"]
    assert any("yes" in line and "vec: widen VEC_WIDTH_3" in line for line in table)

    hits = json.loads(kb(ws, "search", "ggml_can_fuse", "--kind", "commit", "--json").stdout)
    assert [h["kind"] for h in hits] == ["commit"]
    shown = kb(ws, "show", str(hits[0]["id"]))
    assert f"commit:   {repos.shas['fuse']}" in shown.stdout
    assert "+bool fused(void)" in shown.stdout


def test_bad_fork_is_one_line_and_changes_nothing(ws: Workspace, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    before = db_dump(ws.db_path)
    result = real_cli(ws, "add-fork", "x", str(plain))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"Error: {plain}: not a git repository"]
    assert db_dump(ws.db_path) == before
    unknown = kb(ws, "commits", "nope")
    assert unknown.exit_code == 1 and unknown.stderr.strip() == "Error: nope: no such fork"
