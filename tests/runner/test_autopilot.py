"""The autopilot end to end: `run --autopilot` on the runner's small C target (real builds, real
benchmarks on the local fleet), with the model played by a scripted OpenAI-compatible server on
127.0.0.1 reached through litellm (tests/runner/autopilot_agent.py says what it answers).

Assertions are on database rows: experiments, patches and their links, hypotheses, llm_calls,
events and runs.stop_reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kb.db import insert, now, one, rows, transaction
from kb.workspace import Workspace
from runner import autopilot
from runner.measure.run import RunOptions
from tests.runner.autopilot_agent import FUSE, HALVE, SIMD, TILE, UNROLL, Agent
from tests.runner.research_support import ScriptedLLM
from tests.runner.runner_target import git, make_workspace, must


def paper_passage(ws: Workspace) -> int:
    db = ws.db()
    with transaction(db):
        stamp = now()
        source = insert(
            db,
            "sources",
            {
                "kind": "paper",
                "title": "Memory traffic in CPU inference",
                "url": "https://example.invalid/traffic",
                "canonical_url": "https://example.invalid/traffic",
                "created_at": stamp,
                "updated_at": stamp,
            },
        )
        return insert(
            db,
            "evidence",
            {
                "source_id": source,
                "kind": "passage",
                "ref": "1",
                "title": "Memory traffic in CPU inference",
                "section": "4 Fusion",
                "position": 1,
                "body": "Decode is memory-bound: fusing a pass into the next saves a read of the data.",
                "created_at": stamp,
            },
        )


def autopilot_workspace(tmp_path: Path, llm: ScriptedLLM | None, **autopilot_conf: Any) -> Workspace:
    llm_conf = {"model": llm.litellm_model, "api_base": llm.base_url, "max_retries": 0} if llm else {}
    ws, _ = make_workspace(
        tmp_path,
        llm=llm_conf,
        autopilot={"enabled": True, "repairs": 2, "patience": 2, **autopilot_conf},
    )
    return ws


def run_autopilot(ws: Workspace, **options: Any) -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    lines: list[str] = []
    runner = autopilot.start(ws, RunOptions(self_test=False, final=False, **options), progress=lines.append)
    summary = runner.execute()
    return summary, lines


def by_title(db: Any) -> dict[str, dict[str, Any]]:
    return {h["title"]: h for h in rows(db, "SELECT * FROM hypotheses ORDER BY id")}


def experiments_of(db: Any, hypothesis_id: int) -> list[dict[str, Any]]:
    return rows(db, "SELECT * FROM experiments WHERE hypothesis_id = ? ORDER BY id", [hypothesis_id])


def test_the_loop_reads_measures_reflects_repairs_ports_and_stops_on_a_plateau(tmp_path: Path) -> None:
    with ScriptedLLM([]) as llm:
        ws = autopilot_workspace(tmp_path, llm)
        passage = paper_passage(ws)
        agent = Agent(passage)
        llm.script = agent
        summary, lines = run_autopilot(ws)
    db = ws.db()
    run = must(one(db, "SELECT * FROM runs WHERE id = ?", [summary.run_id]))
    assert (run["status"], run["stop_reason"]) == ("finished", "plateau"), "\n".join(lines)
    h = by_title(db)
    wave_of = {
        w["id"]: w["number"]
        for w in rows(db, "SELECT id, number FROM waves WHERE run_id = ?", [summary.run_id])
    }

    # Wave 1: the SIMD micro-tuning, proposed before any wave, is measured and discarded.
    simd = experiments_of(db, h[SIMD]["id"])
    assert [(e["status"], wave_of[e["wave_id"]]) for e in simd] == [("discarded", 1)]
    assert h[SIMD]["wave_id"] is None
    # The post-mortem says memory-bound; the next research prompt carries it and the result.
    notes = rows(db, "SELECT body FROM evidence WHERE kind = 'note' ORDER BY id")
    assert "memory bandwidth" in notes[0]["body"]
    prompts = [
        json.dumps(r["messages"])
        for r in llm.requests
        if "hypotheses, best first" in json.dumps(r["messages"])
    ]
    assert "memory bandwidth" in prompts[1] and f"#{h[SIMD]['id']} exp {simd[0]['id']}" in prompts[1]

    # Wave 2: the fusion, proposed after that post-mortem and citing the paper passage, is kept;
    # its commit names the hypothesis, the passage and the wave whose post-mortem suggested it.
    fuse = h[FUSE]
    first_wave = next(i for i, n in wave_of.items() if n == 1)
    assert fuse["wave_id"] == first_wave
    cited = rows(db, "SELECT evidence_id FROM hypothesis_evidence WHERE hypothesis_id = ?", [fuse["id"]])
    assert [r["evidence_id"] for r in cited] == [passage]
    kept = experiments_of(db, fuse["id"])
    assert [(e["status"], wave_of[e["wave_id"]]) for e in kept] == [("kept", 2)]
    winner = must(one(db, "SELECT * FROM winners WHERE run_id = ?", [summary.run_id]))
    assert winner["experiment_id"] == kept[0]["id"]
    message = git(Path(ws.mirror_path), "log", "-1", "--format=%B", winner["commit_sha"])
    assert f"Hypothesis {fuse['id']}: {FUSE}" in message
    assert f"passage:{passage}" in message and "https://example.invalid/traffic" in message
    assert (
        f"postmortem:{run['name']}/wave1" in message and "suggested by the post-mortem of wave 1" in message
    )
    assert f"postmortem:{run['name']}/wave1" in (ws.root / winner["patch_file"]).read_text()

    # Halving the warm-up was kept in the same wave but conflicts with the winner: `conflict`
    # naming it, the hypothesis waited as needs_port, and the port was measured in a later wave.
    halve = experiments_of(db, h[HALVE]["id"])
    conflict = next(e for e in halve if e["status"] == "conflict")
    assert f"winner exp {kept[0]['id']}" in conflict["reason"]
    port = must(one(db, "SELECT * FROM patches WHERE from_experiment = ?", [conflict["id"]]))
    ported = next(e for e in halve if e["patch_id"] == port["id"])
    assert wave_of[ported["wave_id"]] > wave_of[conflict["wave_id"]]
    assert ported["status"] in ("discarded", "inconclusive")

    # The tiling's first patch did not build; the repair got the compiler's error, is linked to
    # the failed patch and experiment, and was measured.
    attempts = experiments_of(db, h[TILE]["id"])
    assert [(e["status"], e["reason"]) for e in attempts][0] == ("crashed", "build")
    assert attempts[1]["status"] in ("discarded", "inconclusive")
    patches = rows(db, "SELECT * FROM patches WHERE hypothesis_id = ? ORDER BY id", [h[TILE]["id"]])
    assert len(patches) == 2 and patches[1]["repair_of"] == patches[0]["id"]
    assert patches[1]["from_experiment"] == attempts[0]["id"]
    repair_call = must(one(db, "SELECT * FROM llm_calls WHERE purpose = 'repair' AND error IS NULL"))
    assert "error" in repair_call["prompt"] and "tile" in repair_call["prompt"]  # the compiler's words

    # The SIMD idea again: once the model said so (not queued), once under another title with the
    # same change (marked a repeat, never run).
    assert SIMD + " again" not in h
    assert h[UNROLL]["repeat_of"] == h[SIMD]["id"] and experiments_of(db, h[UNROLL]["id"]) == []
    done = [
        json.loads(e["data"])
        for e in rows(db, "SELECT data FROM events WHERE kind = 'research_done' ORDER BY id")
    ]
    assert sum(d["repeats"] for d in done) == 2
    assert sum(d["repaired"] for d in done) == 1 and sum(d["ported"] for d in done) == 1
    # Every model call is logged with the run; the run's phase is cleared at its end.
    assert not rows(db, "SELECT id FROM llm_calls WHERE run_id IS NOT ?", [summary.run_id])
    assert run["phase"] is None


def fork_workspace(tmp_path: Path, llm: ScriptedLLM | None = None) -> Workspace:
    """The C target with a fork whose one commit removes the warm-up (the miners find it)."""
    ws = autopilot_workspace(tmp_path, llm)
    target = Path(ws.settings.target.path)
    fork = tmp_path / "fork"
    git(tmp_path, "clone", "-q", str(target), str(fork))
    (fork / "prog.c").write_text(
        (fork / "prog.c").read_text().replace("    return 9 * n_iter;\n", "    return 0;\n")
    )
    git(fork, "commit", "-q", "-am", "Skip the unused warm-up pass")
    from kb.forks import add_fork

    add_fork(ws, ws.db(), "fast", str(fork))
    return ws


def test_without_a_model_the_miners_feed_the_loop_until_they_are_exhausted(tmp_path: Path) -> None:
    ws = fork_workspace(tmp_path)
    summary, lines = run_autopilot(ws)
    db = ws.db()
    run = must(one(db, "SELECT * FROM runs WHERE id = ?", [summary.run_id]))
    assert (run["status"], run["stop_reason"]) == ("finished", "no_hypotheses"), "\n".join(lines)
    kept = rows(
        db,
        "SELECT e.*, h.origin FROM experiments e JOIN hypotheses h ON h.id = e.hypothesis_id "
        "WHERE e.run_id = ?",
        [summary.run_id],
    )
    assert [(e["origin"], e["status"]) for e in kept] == [("miner:fork", "kept")]
    phases = rows(db, "SELECT data FROM events WHERE kind = 'research_done' ORDER BY id")
    assert [json.loads(p["data"])["mined"] for p in phases] == [1, 0]
    assert not rows(db, "SELECT id FROM llm_calls")


def test_a_model_that_answers_garbage_is_recorded_and_the_miners_carry_on(tmp_path: Path) -> None:
    with ScriptedLLM(["I am not JSON at all, sorry."]) as llm:
        ws = fork_workspace(tmp_path, llm)
        summary, lines = run_autopilot(ws)
    db = ws.db()
    run = must(one(db, "SELECT * FROM runs WHERE id = ?", [summary.run_id]))
    assert run["stop_reason"] == "no_hypotheses", "\n".join(lines)
    assert [
        e["status"] for e in rows(db, "SELECT status FROM experiments WHERE run_id = ?", [summary.run_id])
    ] == ["kept"]
    failures = [
        json.loads(e["data"])["failures"]
        for e in rows(db, "SELECT data FROM events WHERE kind = 'research_done'")
    ]
    assert all(any("generate" in f for f in phase) for phase in failures)
    invalid = rows(db, "SELECT error FROM llm_calls WHERE error LIKE 'invalid answer%'")
    assert len(invalid) >= 3  # each attempt recorded


# --- kill -9 and resume -------------------------------------------------------------------------


def _cli(ws: Workspace, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "--workspace", str(ws.root), "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


@pytest.mark.parametrize("stall", ["research", "patch"])
def test_kill_9_in_a_research_phase_then_resume_pays_no_step_twice(tmp_path: Path, stall: str) -> None:
    held = {"on": True}

    with ScriptedLLM([]) as llm:
        ws = autopilot_workspace(tmp_path, llm, patience=1)
        agent = Agent(paper_passage(ws))

        def script(body: dict[str, Any]) -> str:
            text = agent(body)
            kinds = agent.calls
            if held["on"] and stall in kinds and kinds[stall] == 1:
                time.sleep(60)  # the call in flight when the runner is killed
            return text

        llm.script = script
        proc = _cli(ws, "--autopilot", "--skip-self-test", "--no-final", "--skip-validate")
        deadline = time.monotonic() + 60
        while agent.calls.get(stall, 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert agent.calls.get(stall) == 1, "the stalled call never came"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        held["on"] = False
        before = dict(agent.calls)
        resumed = _cli(ws, "--resume")
        out, _ = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, out.decode()[-3000:]
    db = ws.db()
    run = must(one(db, "SELECT * FROM runs ORDER BY id DESC LIMIT 1"))
    assert run["status"] == "finished" and run["stop_reason"] is not None
    titles = [h["title"] for h in rows(db, "SELECT title FROM hypotheses")]
    assert len(titles) == len(set(titles)) and SIMD in titles  # none twice, none lost
    # The query plan was answered and stored before the kill: the resumed phase did not ask again.
    assert agent.calls["queries"] == before["queries"] == 1
    replayed = rows(db, "SELECT message FROM events WHERE kind = 'llm.replayed'")
    assert replayed, "the resumed phase reused no stored answer"
    steps = [
        c["step"] for c in rows(db, "SELECT step FROM llm_calls WHERE error IS NULL AND step IS NOT NULL")
    ]
    assert len(steps) == len(set(steps)), steps  # one paid answer per step


def test_a_plain_run_with_a_model_repairs_its_own_candidates(tmp_path: Path) -> None:
    """Without --autopilot nothing is mined or generated, but a queued patch that does not build
    goes back to the model (the run's --model) and its repair is measured in the next wave."""
    from runner.hypotheses import add_hypothesis, add_patch
    from tests.runner.autopilot_agent import PATCHES

    with ScriptedLLM([]) as llm:
        ws = autopilot_workspace(tmp_path, None, enabled=False)
        llm.script = Agent(paper_passage(ws))
        db = ws.db()
        hid = add_hypothesis(db, TILE, status="approved")
        assert hid is not None
        broken = add_patch(db, hid, PATCHES["tile-broken"], author_kind="manual")
        summary, lines = run_autopilot(ws, model=llm.litellm_model, api_base=llm.base_url, waves=2)
    db = ws.db()
    run = must(one(db, "SELECT * FROM runs WHERE id = ?", [summary.run_id]))
    assert json.loads(run["options"])["model"] == llm.litellm_model  # stored: --resume continues alike
    assert run["stop_reason"] in ("waves", "queue_empty"), "\n".join(lines)
    exps = experiments_of(db, hid)
    assert [e["status"] for e in exps][0] == "crashed" and len(exps) == 2
    repair = must(one(db, "SELECT * FROM patches WHERE repair_of = ?", [broken]))
    assert exps[1]["patch_id"] == repair["id"] and repair["from_experiment"] == exps[0]["id"]
    assert not rows(db, "SELECT id FROM events WHERE kind = 'hypotheses.mine'")  # no miners in a plain run
    assert not rows(db, "SELECT id FROM llm_calls WHERE purpose IN ('queries', 'research')")
