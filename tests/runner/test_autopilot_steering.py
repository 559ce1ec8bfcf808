"""Steering the autopilot through the database (`autoresearch steer`): focus and avoid notes reach
the research prompt, approval on keeps generated hypotheses waiting for a person, and the CLI
refuses what cannot be done with a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kb.db import one, rows
from tests.runner.autopilot_agent import SIMD, Agent
from tests.runner.research_support import ScriptedLLM
from tests.runner.runner_target import must
from tests.runner.test_autopilot import autopilot_workspace, paper_passage, run_autopilot
from tui.cli import main


def steer(ws_root: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["-w", str(ws_root), "steer", *args])
    return result.exit_code, result.output


def test_focus_avoid_and_approval_reach_the_next_research_phase(tmp_path: Path) -> None:
    with ScriptedLLM([]) as llm:
        ws = autopilot_workspace(tmp_path, llm)
        llm.script = Agent(paper_passage(ws))
        # Nothing runs yet: the notes wait for the next run, which reads them before researching.
        assert steer(ws.root, "focus", "memory traffic of the warm-up")[0] == 0
        assert steer(ws.root, "avoid", "SIMD micro-tuning")[0] == 0
        code, out = steer(ws.root, "approval", "on", "--json")
        assert code == 0 and json.loads(out)["status"] == "pending"
        summary, lines = run_autopilot(ws)
    db = ws.db()
    run = must(one(db, "SELECT * FROM runs WHERE id = ?", [summary.run_id]))
    assert json.loads(run["steering"]) == {
        "focus": ["memory traffic of the warm-up"],
        "avoid": ["SIMD micro-tuning"],
        "approval": True,
    }
    assert {c["status"] for c in rows(db, "SELECT status FROM commands")} == {"done"}
    research = next(r for r in llm.requests if "hypotheses, best first" in json.dumps(r["messages"]))
    prompt = json.dumps(research["messages"])
    assert "Focus requested by the engineer: memory traffic of the warm-up" in prompt
    assert "The engineer asks to avoid: SIMD micro-tuning" in prompt
    # Approval on: the generated idea waits for a person, nothing is measured, and the run says why.
    simd = must(one(db, "SELECT * FROM hypotheses WHERE title = ?", [SIMD]))
    assert simd["status"] == "proposed"
    assert not rows(db, "SELECT id FROM experiments WHERE kind = 'candidate'")
    assert run["stop_reason"] == "no_hypotheses", "\n".join(lines)


def test_steer_refuses_what_cannot_be_done(tmp_path: Path) -> None:
    ws = autopilot_workspace(tmp_path, None)
    code, out = steer(ws.root, "pause")
    assert code == 1 and out.strip().splitlines()[-1].startswith("Error: steer pause: no run is going")
    code, out = steer(ws.root, "budget")
    assert code == 1 and "give --usd and/or --minutes" in out
    code, out = steer(ws.root, "budget", "--usd", "-3")
    assert code == 2
    code, out = steer(ws.root, "focus", "   ")  # the text parameter refuses a blank, as a usage error
    assert code == 2
    assert not rows(ws.db(), "SELECT id FROM commands")  # nothing refused was queued
