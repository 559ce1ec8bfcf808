"""The whole protocol through MCP, as a coding agent drives it: the SDK's own client over stdio,
a real `autoresearch mcp` process, a real C target, a real paper in the knowledge base, a patch
written in the agent's own git work tree, a real run that the runner decides."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from kb.workspace import Workspace
from tests.agents.support import FAST, call, cli, connected, until
from tests.kb.helpers import article_page
from tests.runner.runner_target import EDITS, git, make_workspace

PAPER = article_page(
    "Warm-up loops that measure nothing",
    [
        (
            "Unused warm-up",
            [
                "Benchmarks often run an unused warm-up of the hash chain before the timed work. "
                "Skipping the unused warm-up removes three quarters of the work and raises throughput."
            ],
        ),
        ("Other notes", ["Repetition counts matter less than the warm-up when the chain is long."]),
    ],
)


def agent_worktree(target: Path, into: Path, edit: str) -> Path:
    """The agent's own clone of the target with one edit left in it, uncommitted."""
    git(into.parent, "clone", "-q", str(target), into.name)
    file, old, new, _ = EDITS[edit]
    path = into / file
    path.write_text(path.read_text().replace(old, new))
    return into


@pytest.fixture
def ws_target(tmp_path: Path) -> tuple[Workspace, Path]:
    ws, target = make_workspace(tmp_path, policy=FAST)
    (tmp_path / "warmup.html").write_text(PAPER)
    added = cli(ws, "kb", "add-paper", str(tmp_path / "warmup.html"))
    assert added.exit_code == 0, added.stdout + added.stderr
    return ws, target


@pytest.mark.slow
def test_an_agent_reads_cites_queues_runs_and_reads_the_decision(
    ws_target: tuple[Workspace, Path], tmp_path: Path
) -> None:
    ws, target = ws_target
    worktree = agent_worktree(target, tmp_path / "agent-clone", "speedup")

    async def cycle() -> None:
        async with connected(ws) as client:
            # read first
            found = await call(client, "search_knowledge", query="unused warm-up")
            hit = found["results"][0]
            assert hit["kind"] == "paper" and hit["title"] == "Warm-up loops that measure nothing"
            evidence = await call(client, "show_evidence", evidence_id=hit["id"])
            assert "Skipping the unused warm-up" in evidence["body"]
            assert evidence["source"]["title"] == "Warm-up loops that measure nothing"

            # cite it
            hyp = await call(
                client,
                "add_hypothesis",
                title="Skip the unused warm-up of the hash chain",
                evidence_ids=[hit["id"]],
                rationale="The paper: the warm-up is three quarters of the work and measures nothing.",
            )
            assert hyp["status"] == "proposed" and hyp["evidence"] == [hit["id"]]

            # queue the agent's own work tree for it
            queued = await call(
                client, "queue_patch", worktree=str(worktree), hypothesis_id=hyp["hypothesis"]
            )
            assert queued["hypothesis"] == hyp["hypothesis"] and queued["files"] == ["prog.c"]
            assert queued["applies"] is True
            shown = await call(client, "show_hypothesis", hypothesis_id=hyp["hypothesis"])
            assert shown["status"] == "patched" and shown["origin"] == "agent"
            assert [e["id"] for e in shown["evidence"]] == [hit["id"]]
            assert shown["patches"][0]["author"] == "agent:agent-clone"

            # run: the id comes back at once, while the runner works in the background
            asked = time.monotonic()
            started = await call(client, "start_run", max_experiments=1, skip_self_test=True)
            took = time.monotonic() - asked
            assert isinstance(started["run"], int) and started["pid"] > 0
            first = await call(client, "run_status", run=str(started["run"]))
            assert first["status"] == "running" and first["live"], first
            assert first["budget"]["max_experiments"] == 1

            async def finished() -> dict[str, object] | None:
                status = await call(client, "run_status", run=str(started["run"]))
                return status if status["status"] != "running" else None

            done = await until(finished, timeout=240, every=1.0)
            assert done is not None, "the run did not finish"
            assert done["status"] == "finished" and done["stop_reason"] in ("max_experiments", "queue_empty")
            (exp,) = [e for e in done["experiments"] if e["kind"] == "candidate"]

            # the decision, in the runner's words
            decided = await call(client, "decision", experiment_id=exp["id"])
            assert decided["status"] == "kept" and decided["decided"] is True, decided
            assert decided["effect"] > 0.05 and decided["ci"][0] > 0 and decided["pairs"] == 6
            assert decided["why"] and decided["metric"] == "throughput"
            assert decided["hypothesis"]["id"] == hyp["hypothesis"]

            # the winner's provenance, from its commit back to the paper
            (winner,) = done["winners"]
            chain = await call(client, "provenance", commit=winner["commit_sha"][:12])
            assert chain["experiment"]["id"] == exp["id"] and chain["decision"]["verdict"] == "keep"
            assert chain["winner"]["commit"] == winner["commit_sha"]
            assert chain["hypothesis"]["id"] == hyp["hypothesis"]
            assert [e["id"] for e in chain["evidence"]] == [hit["id"]]
            assert chain["evidence"][0]["source"]["title"] == "Warm-up loops that measure nothing"

            # and the report, as a resource
            report = await client.read_resource(f"autoresearch://runs/{started['run']}/report")
            text = "".join(getattr(c, "text", "") for c in report.contents)
            assert "Skip the unused warm-up of the hash chain" in text and "kept" in text
        print(f"start_run answered in {took:.2f} s")

    anyio.run(cycle)
