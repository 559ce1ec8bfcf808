"""What an agent may not do through MCP, refused as the command line refuses it, in its words:
a patch on a protected path, a second run while one goes, any write on a read-only server, and
arguments that do not fit a tool's schema. Each refusal is one line and changes nothing."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from kb.workspace import Workspace
from tests.agents.support import FAST, WRITE_TOOLS, call, cli, connected, counts, refused, until
from tests.runner.runner_target import EDITS, git, make_diff, make_workspace, title


@pytest.fixture
def ws_target(tmp_path: Path) -> tuple[Workspace, Path]:
    return make_workspace(tmp_path, policy=FAST)


def cli_refusal(ws: Workspace, *args: str) -> str:
    """The CLI's one-line error, without click's `Error: `."""
    result = cli(ws, *args)
    assert result.exit_code == 1, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    return line.removeprefix("Error: ")


def test_a_protected_path_is_refused_in_the_words_of_queue_add(
    ws_target: tuple[Workspace, Path], tmp_path: Path
) -> None:
    ws, target = ws_target
    diff = make_diff(target, "inflate")  # the benchmark script's metric line
    patch = tmp_path / "inflate.patch"
    patch.write_text(diff)
    said = cli_refusal(ws, "queue", "add", str(patch), "--title", title("inflate"))
    reason = said.removeprefix(f"{patch}: ")
    assert reason == "refused: the patch touches autoresearch.sh (the benchmark script: autoresearch.sh)"
    clone = tmp_path / "agent-clone"
    git(tmp_path, "clone", "-q", str(target), clone.name)
    file, old, new, _ = EDITS["inflate"]
    (clone / file).write_text((clone / file).read_text().replace(old, new))
    before = counts(ws)

    async def agent() -> None:
        async with connected(ws) as client:
            as_diff = await refused(client, "queue_patch", diff=diff, title=title("inflate"))
            assert as_diff.endswith(f": patch: {reason}"), as_diff
            as_worktree = await refused(client, "queue_patch", worktree=str(clone), title=title("inflate"))
            assert as_worktree.endswith(f": worktree {clone}: {reason}"), as_worktree

    anyio.run(agent)
    assert counts(ws) == before


def test_a_second_run_is_refused_while_one_goes_then_stopped(
    ws_target: tuple[Workspace, Path], tmp_path: Path
) -> None:
    ws, target = ws_target
    for name in ("noop", "slowdown", "speedup2"):
        patch = tmp_path / f"{name}.patch"
        patch.write_text(make_diff(target, name))
        assert cli(ws, "queue", "add", str(patch), "--title", title(name)).exit_code == 0

    async def agent() -> None:
        async with connected(ws) as client:
            first = await call(client, "start_run")  # with its self-test: it goes for a while
            going = await refused(client, "start_run", max_experiments=1)
            said = cli_refusal(ws, "run")  # the command line, in this process
            assert said.startswith(f"run {first['name']} is going (pid {first['pid']} on ")
            assert going.endswith(said), going
            assert counts(ws)["runs"] == 1
            steered = await call(client, "steer_run", action="focus", text="the hash chain's loop")
            assert steered["run"] == first["run"] and steered["status"] in ("pending", "done")
            stopped = await call(client, "stop_run")
            assert stopped["kind"] == "stop" and stopped["run"] == first["run"]

            async def ended() -> dict[str, object] | None:
                status = await call(client, "run_status")
                return status if not status["live"] and status["status"] != "running" else None

            done = await until(ended, timeout=120)
            assert done is not None and done["status"] == "finished" and done["stop_reason"] == "user"
            assert await refused(client, "stop_run") == (
                "Error executing tool stop_run: steer stop: no run is going "
                "(autoresearch history lists the runs)"
            )

    anyio.run(agent)


def test_read_only_serves_the_reads_and_refuses_every_write(
    ws_target: tuple[Workspace, Path], tmp_path: Path
) -> None:
    ws, target = ws_target
    patch = tmp_path / "speedup.patch"
    patch.write_text(make_diff(target, "speedup"))
    assert cli(ws, "queue", "add", str(patch), "--title", title("speedup")).exit_code == 0
    clone = tmp_path / "agent-clone"
    git(tmp_path, "clone", "-q", str(target), clone.name)
    before = counts(ws)
    attempts = {
        "add_hypothesis": {"title": "An idea", "sources": ["note:seen in a profile"]},
        "queue_patch": {"worktree": str(clone), "title": "Nothing"},
        "start_run": {"max_experiments": 1},
        "stop_run": {},
        "steer_run": {"action": "approval", "on": False},
    }
    assert set(attempts) == set(WRITE_TOOLS)

    async def agent() -> None:
        async with connected(ws, "--read-only") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert not names & set(WRITE_TOOLS)
            assert {"search_knowledge", "list_hypotheses", "decision", "run_status"} <= names
            for tool, args in attempts.items():
                said = await refused(client, tool, **args)
                assert tool in said, said
            listed = await call(client, "list_hypotheses")
            assert [h["title"] for h in listed["hypotheses"]] == [title("speedup")]
            prompt = await client.get_prompt("protocol", {"goal": "make prog faster"})
            (message,) = prompt.messages
            taught = getattr(message.content, "text", "")
            assert "Never claim a speed-up without a decision" in taught and taught.endswith(
                "make prog faster\n"
            )

    anyio.run(agent)
    assert counts(ws) == before
    assert not list(ws.logs_dir.glob("mcp-*.log")), "a read-only server started a process"


def test_bad_arguments_and_unknown_rows_are_one_line(ws_target: tuple[Workspace, Path]) -> None:
    ws, _ = ws_target

    async def agent() -> None:
        async with connected(ws) as client:
            assert (await refused(client, "show_evidence", evidence_id="x")).endswith(
                "invalid arguments: evidence_id: Input should be a valid integer, unable to parse string "
                "as an integer"
            )
            assert (await refused(client, "decision", experiment_id=7)).endswith(
                "experiment 7: no such experiment"
            )
            assert (await refused(client, "add_hypothesis", title="An idea with nothing behind it")).endswith(
                "a hypothesis must cite its evidence: give --evidence ID (autoresearch kb search finds "
                "it) or --source (URL, fork:NAME@SHA, evidence:ID, paper:ID (or the paper's URL or "
                "file:// address), gap:ID or note:TEXT)"
            )
            assert (
                await refused(client, "add_hypothesis", title="Cites a ghost", evidence_ids=[999])
            ).endswith("evidence 999: no such evidence id")
            assert (await refused(client, "queue_patch", title="t")).endswith(
                "queue_patch: give a diff or a worktree (one of them)"
            )

    before = counts(ws)
    anyio.run(agent)
    assert counts(ws) == before
