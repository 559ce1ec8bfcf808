"""The pieces under the MCP tools, from the command line: `hypotheses add` (a hypothesis must cite
its evidence), `queue add --hypothesis`, an agent's work tree read as one patch, and the skill."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from kb import gitrepo
from kb.errors import UserError
from kb.workspace import Workspace
from tests.agents.support import FAST, ROOT, cli, cli_json, counts
from tests.runner.runner_target import git, make_diff, make_workspace


@pytest.fixture
def ws_target(tmp_path: Path) -> tuple[Workspace, Path]:
    return make_workspace(tmp_path, policy=FAST)


def test_a_hypothesis_cites_evidence_and_takes_a_patch_later(
    ws_target: tuple[Workspace, Path], tmp_path: Path
) -> None:
    ws, target = ws_target
    before = counts(ws)
    bare = cli(ws, "hypotheses", "add", "An idea with nothing behind it")
    assert bare.exit_code == 1 and "a hypothesis must cite its evidence" in bare.stderr
    assert counts(ws) == before
    added = cli_json(
        ws,
        "hypotheses",
        "add",
        "Skip the warm-up",
        "--source",
        "note:the profile shows it",
        "--rationale",
        "r",
    )
    assert added["status"] == "proposed" and added["sources"] == ["note:the profile shows it"]
    patch = tmp_path / "speedup.patch"
    patch.write_text(make_diff(target, "speedup"))
    untitled = cli(ws, "queue", "add", str(patch))
    assert untitled.exit_code == 1
    assert untitled.stderr.strip() == (
        "Error: --title: required (or --hypothesis ID, to queue it for an existing hypothesis)"
    )
    queued = cli_json(ws, "queue", "add", str(patch), "--hypothesis", str(added["hypothesis"]))
    assert queued["hypothesis"] == added["hypothesis"] and queued["title"] == "Skip the warm-up"
    shown = cli_json(ws, "hypotheses", "show", str(added["hypothesis"]))
    assert shown["status"] == "patched" and shown["sources"] == ["note:the profile shows it"]
    listed = cli_json(ws, "queue", "list")
    assert [(i["hypothesis"], i["runnable"]) for i in listed] == [(added["hypothesis"], True)]
    assert cli(ws, "hypotheses", "reject", str(added["hypothesis"])).exit_code == 0
    again = cli(ws, "queue", "add", str(patch), "--hypothesis", str(added["hypothesis"]))
    assert (
        again.exit_code == 1 and f"hypothesis {added['hypothesis']}: rejected; nothing queued" in again.stderr
    )


def test_a_work_tree_is_read_as_one_patch_and_left_as_it_was(
    ws_target: tuple[Workspace, Path], tmp_path: Path
) -> None:
    ws, target = ws_target
    base = git(target, "rev-parse", "HEAD").strip()
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(target), clone.name)
    (clone / "README.md").write_text("committed\n")
    git(clone, "add", "README.md")
    git(clone, "commit", "-q", "-m", "a commit on top")
    (clone / "Makefile").write_text((clone / "Makefile").read_text() + "# staged\n")
    git(clone, "add", "Makefile")
    (clone / "prog.c").write_text((clone / "prog.c").read_text() + "/* unstaged */\n")
    (clone / "NOTES.md").write_text("untracked\n")
    (clone / "prog").write_text("ignored build output\n")  # .gitignore lists it
    status = git(clone, "status", "--porcelain")
    diff = gitrepo.worktree_diff(clone, base)
    assert gitrepo.patch_names(diff) == ["Makefile", "NOTES.md", "README.md", "prog.c"]
    assert "+/* unstaged */" in diff and "+# staged" in diff and "+untracked" in diff
    assert git(clone, "status", "--porcelain") == status  # the agent's index is as it was
    assert gitrepo.apply_check(gitrepo.open_repo(ws.mirror_path), base, diff) is None
    assert gitrepo.worktree_diff(target, base) == ""
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    git(stranger, "init", "-q")
    (stranger / "f").write_text("x\n")
    git(stranger, "add", "f")
    git(stranger, "commit", "-q", "-m", "unrelated")
    with pytest.raises(UserError, match=rf"{stranger}: has no commit {base[:12]} \(the baseline\)"):
        gitrepo.worktree_diff(stranger, base)


def test_the_skill_is_printed_as_shipped() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "tui.cli", "mcp", "--skill"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    shipped = (ROOT / "tui" / "agents" / "SKILL.md").read_text()
    assert printed == shipped
    front = shipped.split("---\n")[1]
    fields = dict(line.split(": ", 1) for line in front.strip().splitlines())
    assert fields["name"] == "autoresearch" and 0 < len(fields["description"]) <= 1024
    for tool in ("search_knowledge", "add_hypothesis", "queue_patch", "start_run", "run_status", "decision"):
        assert f"`{tool}(" in shipped


def _blocks(lang: str) -> list[str]:
    text = (ROOT / "docs" / "agents.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_the_documented_configurations_start_the_server(ws_target: tuple[Workspace, Path]) -> None:
    """docs/agents.md's .mcp.json (Claude Code, pi's adapter) and config.toml (Codex) stdio entries,
    read as those agents read them, start a server that answers."""
    ws, _ = ws_target
    entries = [
        server
        for block in _blocks("json")
        for server in json.loads(block)["mcpServers"].values()
        if "command" in server
    ]
    entries += [
        server
        for block in _blocks("toml")
        for server in tomllib.loads(block)["mcp_servers"].values()
        if "command" in server
    ]
    assert len(entries) == 2
    exe = str(Path(sys.executable).parent / "autoresearch")

    async def start(command: str, args: list[str]) -> set[str]:
        params = StdioServerParameters(
            command=exe if command == "autoresearch" else command,
            args=[str(ws.root) if a == "/path/to/ws" else a for a in args],
            env=dict(os.environ),
        )
        async with Client(params) as client:
            return {t.name for t in (await client.list_tools()).tools}

    for entry in entries:
        assert "queue_patch" in anyio.run(start, entry["command"], entry["args"])
