"""Whole runs on the local fleet: real gcc builds, real benchmark processes, real git, real SQLite."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kb import gitrepo
from kb.db import one, rows
from kb.workspace import Workspace
from runner import commands
from runner.harness.batch import pair_order
from runner.harness.protocol import LogParser
from runner.measure.run import Runner, RunOptions, start_run
from tests.runner.runner_target import live_processes_under, make_workspace, must, queue


def by_patch(ws: Workspace, run_id: int) -> dict[int, dict[str, Any]]:
    db = ws.db()
    found = rows(db, "SELECT * FROM experiments WHERE run_id = ? AND kind = 'candidate'", [run_id])
    return {e["patch_id"]: e for e in found}


def final_decision(ws: Workspace, exp_id: int) -> dict[str, Any] | None:
    return one(ws.db(), "SELECT * FROM decisions WHERE experiment_id = ? AND is_final = 1", [exp_id])


def assert_logs_match_samples(ws: Workspace, run_id: int) -> int:
    """Every sample in the job logs is in the database, and nothing else is: re-parse every log."""
    db = ws.db()
    expected: set[tuple[Any, ...]] = set()
    for job in rows(db, "SELECT * FROM jobs WHERE run_id = ?", [run_id]):
        parser = LogParser(job["nonce"])
        invocations = parser.feed(Path(job["log_path"]).read_bytes()) + parser.finish()
        for inv in invocations:
            expected |= {
                (job["experiment_id"], s.pair, s.side, s.metric, s.seq, s.value) for s in inv.samples
            }
    stored = {
        (r["experiment_id"], r["pair"], r["side"], r["metric"], r["seq"], r["value"])
        for r in rows(
            db,
            "SELECT s.* FROM samples s JOIN experiments e ON e.id = s.experiment_id WHERE e.run_id = ?",
            [run_id],
        )
    }
    assert stored == expected
    return len(stored)


def assert_clean(ws: Workspace, run_id: int) -> None:
    """Nothing left running, no worktree left, every experiment final, no pair measured twice."""
    assert live_processes_under(ws.root) == []
    repo = gitrepo.open_repo(ws.mirror_path)
    assert gitrepo.run(repo, "worktree", "list").strip().count("\n") == 0  # the bare mirror only
    assert not list((ws.worktrees_dir / f"run{run_id}").glob("exp*"))
    db = ws.db()
    live = rows(
        db,
        "SELECT id, status FROM experiments WHERE run_id = ? AND status IN ('queued', 'running')",
        [run_id],
    )
    assert live == []
    assert (
        rows(db, "SELECT id FROM jobs WHERE run_id = ? AND status IN ('submitting', 'running')", [run_id])
        == []
    )
    for exp in rows(db, "SELECT id FROM experiments WHERE run_id = ?", [run_id]):
        spans = [
            range(j["pair_start"], j["pair_start"] + j["pairs"])
            for j in rows(db, "SELECT * FROM jobs WHERE experiment_id = ? ORDER BY batch", [exp["id"]])
        ]
        pairs = [p for span in spans for p in span]
        assert len(pairs) == len(set(pairs)), f"experiment {exp['id']} measured a pair twice: {spans}"
    late = rows(
        db,
        "SELECT j.id FROM jobs j JOIN experiments e ON e.id = j.experiment_id "
        "WHERE e.run_id = ? AND j.submitted_at > e.ended_at",
        [run_id],
    )
    assert late == [], "a job was submitted for an experiment that had already ended"


@pytest.mark.slow
def test_a_run_gives_every_status_its_due(tmp_path: Path) -> None:
    # Checks get 5 s: the hanging candidate's are ended at that limit (its core busy, and the
    # other worker's pairs waiting on the machine lock, for 5 s rather than the usual 30).
    ws, target = make_workspace(tmp_path, timeouts={"check": 5})
    names = ["wrong", "slowdown", "inflate", "hang", "nan", "noisy", "stale", "noop", "speedup"]
    patches = queue(ws, target, names)
    lines: list[str] = []
    runner = start_run(ws, RunOptions(), progress=lines.append)
    summary = runner.execute()
    assert summary.status == "finished", "\n".join(lines)
    run_id = summary.run_id
    db = ws.db()
    run = one(db, "SELECT * FROM runs WHERE id = ?", [run_id])
    assert run is not None
    self_test = json.loads(run["self_test"])
    assert self_test["passed"] and self_test["pairs"] == 8
    assert run["noise_floor"] is not None and run["noise_floor"] > 0

    exps = by_patch(ws, run_id)
    status = {name: (exps[pid]["status"], exps[pid]["reason"]) for name, pid in patches.items()}
    assert status["speedup"] == ("kept", None), lines
    assert status["noop"][0] in ("discarded", "inconclusive")
    assert status["wrong"] == ("checks_failed", None)
    assert status["slowdown"] == ("discarded", None)
    assert status["inflate"][0] == "refused" and "autoresearch.sh" in status["inflate"][1]
    assert status["hang"] == ("checks_failed", "timeout")  # the checks run first, and hang
    assert status["nan"] == ("crashed", "no_metric")
    assert status["noisy"] == ("inconclusive", None)
    assert status["stale"] == ("crashed", "does_not_apply")

    # Early stops and the cap.
    policy = ws.settings.policy
    speedup = final_decision(ws, exps[patches["speedup"]]["id"])
    slowdown = final_decision(ws, exps[patches["slowdown"]]["id"])
    noisy = final_decision(ws, exps[patches["noisy"]]["id"])
    assert speedup is not None and slowdown is not None and noisy is not None
    assert slowdown["pairs"] == policy.min_pairs < policy.max_pairs  # a clear loss stops at the first look
    assert speedup["pairs"] < policy.max_pairs and speedup["effect"] > 0.5  # so does a clear win
    assert speedup["ci_low"] > 0 and speedup["q_value"] is not None
    assert noisy["pairs"] == policy.max_pairs and "cap" in noisy["reason"]

    # The refused and non-applying patches never ran; the rejected sample was reported, not stored.
    for name in ("inflate", "stale"):
        assert not rows(db, "SELECT id FROM jobs WHERE experiment_id = ?", [exps[patches[name]]["id"]])
    nan_id = exps[patches["nan"]]["id"]
    warnings = rows(db, "SELECT * FROM events WHERE kind = 'metric_rejected' AND experiment_id = ?", [nan_id])
    assert warnings and "throughput=nan" in warnings[0]["message"] and warnings[0]["level"] == "warning"
    assert not rows(db, "SELECT id FROM samples WHERE experiment_id = ? AND side = 'B'", [nan_id])

    # The winner is a commit on the run branch; the wave after it measured against it.
    winner = one(db, "SELECT * FROM winners WHERE run_id = ?", [run_id])
    assert winner is not None and winner["experiment_id"] == exps[patches["speedup"]]["id"]
    repo = gitrepo.open_repo(ws.mirror_path)
    assert (
        gitrepo.branch_head(repo, f"autoresearch/{run['name']}") == winner["commit_sha"] == run["head_commit"]
    )
    stack = one(db, "SELECT * FROM experiments WHERE run_id = ? AND kind = 'stack'", [run_id])
    assert stack is not None and stack["status"] == "kept"
    assert (
        stack["baseline_commit"] == run["baseline_commit"] and stack["candidate_commit"] == run["head_commit"]
    )
    assert json.loads(run["summary"])["stack"]["experiment"] == stack["id"]

    # Logs of every step are kept and linked.
    wrong = exps[patches["wrong"]]
    meta = json.loads(wrong["meta"])
    for step in ("batch-0", "build-A", "build-B", "checks"):
        assert Path(meta["logs"][step]).is_file(), step
    assert "wrong result" in Path(meta["logs"]["checks"]).read_text()
    # The checks run before the pairs: a wrong candidate costs no benchmark time.
    assert meta["seconds"]["bench"] == 0 and meta["seconds"]["build"] > 0 and meta["seconds"]["checks"] > 0
    assert_logs_match_samples(ws, run_id)
    assert_clean(ws, run_id)


@pytest.mark.slow
def test_winners_move_the_baseline_and_are_measured_stacked_and_left_out(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, fleet={"parallel": 1})
    patches = queue(ws, target, ["speedup", "speedup2"])
    lines: list[str] = []
    result = start_run(ws, RunOptions(self_test=False), progress=lines.append).execute()
    assert result.status == "finished", lines
    exps = by_patch(ws, result.run_id)
    first, second = exps[patches["speedup"]], exps[patches["speedup2"]]
    assert first["status"] == "kept" and second["status"] == "kept", lines
    db = ws.db()
    w1 = one(db, "SELECT * FROM winners WHERE experiment_id = ?", [first["id"]])
    assert w1 is not None
    # The second wave measured against the first winner, not the original baseline.
    assert second["baseline_commit"] == w1["commit_sha"] != first["baseline_commit"]
    summary = json.loads(must(one(db, "SELECT summary FROM runs WHERE id = ?", [result.run_id]))["summary"])
    assert summary["stack"]["status"] == "kept"
    assert {a["left_out"] for a in summary["ablation"]} == {first["id"], second["id"]}
    assert all(a["effect"] is not None and a["effect"] > 0 for a in summary["ablation"]), summary
    assert_clean(ws, result.run_id)


def test_editing_the_template_changes_what_the_local_fleet_runs(tmp_path: Path) -> None:
    from runner.harness.template import default_template_text

    ws, target = make_workspace(
        tmp_path,
        fleet={"template": "my-experiment.yaml"},
        policy={"min_pairs": 3, "batch_pairs": 1, "max_pairs": 3},
    )
    text = default_template_text().replace(
        "run: |\n",
        'run: |\n  echo "EDITED-TEMPLATE exp=$EXPERIMENT_ID pairs=$PAIRS in $(basename $(pwd))"\n',
        1,
    )
    (ws.root / "my-experiment.yaml").write_text(text)
    queue(ws, target, ["slowdown"])
    result = start_run(ws, RunOptions(self_test=False, final=False)).execute()
    (exp,) = [e for e in result.experiments if e["kind"] == "candidate"]
    log = Path(exp["log_dir"], "batch-0.log").read_text()
    assert f"EDITED-TEMPLATE exp={exp['id']} pairs=3 in exp{exp['id']}" in log
    task = (Path(exp["log_dir"]) / "jobs" / "batch-0" / "task.yaml").read_text()
    assert "EDITED-TEMPLATE" in task
    # And the default template does not have the line.
    assert "EDITED-TEMPLATE" not in default_template_text()


def run_in_thread(runner: Runner) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["summary"] = runner.execute()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def wait_for(condition: Any, timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_steering_pause_cancel_prioritize_and_stop(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, fleet={"parallel": 1}, timeouts={"bench": 30})
    patches = queue(ws, target, ["hang", "noop", "slowdown", "wrong"])
    runner = start_run(ws, RunOptions(self_test=False))
    db = ws.db()
    thread, out = run_in_thread(runner)
    # The hanging candidate runs first (its checks hang, before any pair); cancel it while it hangs.
    hang = wait_for(
        lambda: one(
            db, "SELECT * FROM experiments WHERE patch_id = ? AND phase = 'checks'", [patches["hang"]]
        ),
        what="the hang experiment to reach its checks",
    )
    job = wait_for(
        lambda: one(
            db, "SELECT * FROM jobs WHERE experiment_id = ? AND backend_job_id IS NOT NULL", [hang["id"]]
        ),
        what="its job",
    )
    # Re-prioritise: `wrong` goes before `noop` and `slowdown` from now on.
    hyp_wrong = must(one(db, "SELECT hypothesis_id FROM patches WHERE id = ?", [patches["wrong"]]))[
        "hypothesis_id"
    ]
    commands.send(db, "prioritize", hyp_wrong, {"priority": 100})
    hyp_noop = must(one(db, "SELECT hypothesis_id FROM patches WHERE id = ?", [patches["noop"]]))[
        "hypothesis_id"
    ]
    commands.send(db, "reject", hyp_noop)
    from runner.hypotheses import add_hypothesis

    idea = add_hypothesis(db, "An idea without a patch yet")
    assert idea is not None
    commands.send(db, "approve", idea)
    commands.send(db, "pause")
    commands.send(db, "cancel", hang["id"])
    wait_for(
        lambda: (
            must(one(db, "SELECT status FROM experiments WHERE id = ?", [hang["id"]]))["status"]
            == "cancelled"
        ),
        what="the cancel",
    )
    from runner.fleet.local import session_members

    assert session_members(int(job["backend_job_id"])) == []
    wait_for(
        lambda: must(one(db, "SELECT status FROM runs WHERE id = ?", [runner.run_id]))["status"] == "paused"
    )
    time.sleep(1.0)
    # Paused: nothing new started.
    running = "SELECT count(*) AS n FROM experiments WHERE run_id = ? AND status = 'running'"
    assert must(one(db, running, [runner.run_id]))["n"] == 0
    commands.send(db, "resume")
    nxt = wait_for(
        lambda: one(db, "SELECT * FROM experiments WHERE run_id = ? AND status = 'running'", [runner.run_id]),
        what="the next experiment",
    )
    assert nxt["patch_id"] == patches["wrong"]  # the re-prioritised one
    commands.send(db, "stop")
    thread.join(60)
    assert not thread.is_alive() and "error" not in out, out
    run = must(one(db, "SELECT * FROM runs WHERE id = ?", [runner.run_id]))
    assert run["status"] == "finished" and json.loads(run["summary"])["stopped_by"] == "stopped"
    handled = rows(db, "SELECT kind, status FROM commands ORDER BY id")
    assert all(c["status"] == "done" for c in handled), handled
    statuses = {r["id"]: r["status"] for r in rows(db, "SELECT id, status FROM hypotheses")}
    assert statuses[hyp_noop] == "rejected" and statuses[idea] == "approved"
    assert not one(db, "SELECT id FROM experiments WHERE patch_id = ?", [patches["noop"]])
    assert_clean(ws, runner.run_id)


def test_waves_limit(tmp_path: Path) -> None:
    ws, target = make_workspace(
        tmp_path, fleet={"parallel": 1}, policy={"min_pairs": 3, "batch_pairs": 1, "max_pairs": 3}
    )
    queue(ws, target, ["slowdown", "noop"])
    result = start_run(ws, RunOptions(self_test=False, waves=1, final=False)).execute()
    assert result.summary is not None and result.summary["stopped_by"] == "waves: 1"
    assert len([e for e in result.experiments if e["kind"] == "candidate"]) == 1


def test_max_experiments_budget(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, policy={"min_pairs": 3, "batch_pairs": 1, "max_pairs": 3})
    queue(ws, target, ["slowdown", "noop", "wrong"])
    result = start_run(ws, RunOptions(self_test=False, max_experiments=1, final=False)).execute()
    candidates = [e for e in result.experiments if e["kind"] == "candidate"]
    assert len(candidates) == 1
    assert result.summary is not None and result.summary["stopped_by"].startswith("budget: max experiments")


def test_a_vanished_batch_is_measured_again_without_losing_pairs(tmp_path: Path) -> None:
    from runner.fleet.local import kill_session

    ws, target = make_workspace(
        tmp_path, fleet={"parallel": 1}, policy={"min_pairs": 6, "batch_pairs": 2, "max_pairs": 8}
    )
    patches = queue(ws, target, ["slowdown"])
    runner = start_run(ws, RunOptions(self_test=False, final=False))
    db = ws.db()
    thread, out = run_in_thread(runner)
    job = wait_for(
        lambda: one(
            db,
            "SELECT j.* FROM jobs j JOIN samples s ON s.experiment_id = j.experiment_id "
            "WHERE j.backend_job_id IS NOT NULL LIMIT 1",
        ),
        what="a job with samples",
    )
    kill_session(int(job["backend_job_id"]))  # the machine lost the job
    thread.join(120)
    assert "error" not in out, out
    exp = by_patch(ws, runner.run_id)[patches["slowdown"]]
    jobs = rows(db, "SELECT * FROM jobs WHERE experiment_id = ? ORDER BY batch", [exp["id"]])
    assert jobs[0]["status"] == "lost" and jobs[1]["pair_start"] == jobs[0]["pair_start"] + jobs[0]["pairs"]
    assert exp["status"] in ("discarded", "inconclusive")
    assert_logs_match_samples(ws, runner.run_id)
    assert_clean(ws, runner.run_id)


def test_time_budget_ends_the_wave_without_starting_more(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, fleet={"parallel": 1, "wave_size": 2})
    patches = queue(ws, target, ["noisy", "slowdown"])
    result = start_run(ws, RunOptions(self_test=False, budget_minutes=0.01)).execute()
    assert result.summary is not None and result.summary["stopped_by"] == "budget: 0.01 minutes"
    exps = by_patch(ws, result.run_id)
    assert exps[patches["noisy"]]["status"] == "inconclusive"  # decided with the pairs it had
    assert (exps[patches["slowdown"]]["status"], exps[patches["slowdown"]]["reason"]) == (
        "cancelled",
        "budget",
    )
    assert not result.winners and result.summary.get("stack") is None


def test_usd_budget_counts_llm_cost(tmp_path: Path) -> None:
    from kb.db import insert, now

    ws, target = make_workspace(tmp_path)
    queue(ws, target, ["slowdown"])
    runner = start_run(ws, RunOptions(budget_usd=0.5))
    insert(
        ws.db(),
        "llm_calls",
        {
            "purpose": "patch",
            "model": "m",
            "prompt": "[]",
            "cost_usd": 0.75,
            "run_id": runner.run_id,
            "created_at": now(),
        },
    )
    result = runner.execute()
    assert result.summary is not None and result.summary["stopped_by"].startswith("budget: $0.5"), result
    assert [e for e in result.experiments if e["kind"] == "candidate"] == []


def test_an_interrupted_run_must_be_resumed_first(tmp_path: Path) -> None:
    from kb.errors import UserError

    ws, target = make_workspace(tmp_path)
    queue(ws, target, ["slowdown"])
    runner = start_run(ws, RunOptions())
    ws.db().execute("UPDATE runs SET status = 'interrupted' WHERE id = ?", [runner.run_id])
    with pytest.raises(UserError, match="was interrupted: continue it with `autoresearch run --resume`"):
        start_run(ws, RunOptions())


BIASED_BENCH = """#!/usr/bin/env bash
# A broken measurement: the candidate tree always looks faster than the baseline tree.
case "$(basename "$PWD")" in
  a) echo "METRIC throughput=$((100 + RANDOM % 5))" ;;
  *) echo "METRIC throughput=150" ;;
esac
"""


def test_the_self_test_catches_a_biased_measurement(tmp_path: Path) -> None:
    ws, target = make_workspace(tmp_path, bench=BIASED_BENCH, policy={"self_test_pairs": 6})
    queue(ws, target, ["slowdown"])
    lines: list[str] = []
    result = start_run(ws, RunOptions(), progress=lines.append).execute()
    assert result.status == "failed" and result.error is not None
    assert result.error.startswith("self-test failed: the baseline differs from itself"), result.error
    attempts = [e for e in result.experiments if e["kind"] == "self_test"]
    assert len(attempts) == 2 and any("measuring again" in line for line in lines)
    assert [e["status"] for e in attempts] == ["failed", "failed"]  # the A/A's own words
    assert [e["status"] for e in result.experiments if e["kind"] == "candidate"] == []
    assert result.self_test is not None and not result.self_test["passed"]


def drifting_bench(clock: Path) -> str:
    """A machine that slows down steadily: each benchmark run, either tree, is 0.5% slower."""
    return f"""#!/usr/bin/env bash
n=$(cat {clock} 2>/dev/null || echo 0)
echo $((n + 1)) > {clock}
echo "METRIC throughput=$((100000 - 500 * n))"
"""


def test_pairs_come_in_balanced_blocks_so_a_steady_drift_favours_neither_side(tmp_path: Path) -> None:
    # Always A then B, B would run 0.5% slower in every pair: an A/A "difference" of -0.5% with a
    # tiny interval. In blocks of A B, B A (or B A, A B) the drift cancels and the self-test passes.
    bench = drifting_bench(tmp_path / "clock")
    ws, target = make_workspace(tmp_path, bench=bench, policy={"self_test_pairs": 8})
    queue(ws, target, ["slowdown"])
    result = start_run(ws, RunOptions(waves=0, final=False)).execute()
    assert result.self_test is not None and result.self_test["passed"], result.self_test
    assert abs(result.self_test["effect"]) < 0.001
    job = must(one(ws.db(), "SELECT * FROM jobs WHERE run_id = ? ORDER BY id LIMIT 1", [result.run_id]))
    log = Path(job["log_path"]).read_text().splitlines()
    order = [line.split()[-2:] for line in log if " BEGIN " in line]
    # Blocks of two pairs, one A B and one B A each; which comes first is the batch's draw.
    sides = [side for _, side in order]
    assert [p for p, _ in order] == [str(p) for p in range(8) for _ in (0, 1)]
    blocks = ["".join(sides[k : k + 4]) for k in range(0, 16, 4)]
    assert set(blocks) <= {"ABBA", "BAAB"}, blocks
    assert " ".join("".join(sides[k : k + 2]) for k in range(0, 16, 2)) == pair_order(job["nonce"], 8)


def test_failing_checks_on_the_baseline_end_the_run_at_once(tmp_path: Path) -> None:
    ws, target = make_workspace(
        tmp_path, target={"checks_script": "strict-checks.sh"}, policy={"self_test_pairs": 3}
    )
    (ws.root / "strict-checks.sh").write_text("#!/bin/sh\necho 'reference mismatch'\nexit 1\n")
    queue(ws, target, ["slowdown"])
    result = start_run(ws, RunOptions()).execute()
    assert result.status == "failed" and result.error is not None
    assert result.error.startswith("self-test checks_failed"), result.error
    assert len([e for e in result.experiments if e["kind"] == "self_test"]) == 1
    assert_clean(ws, result.run_id)


SLOW_NAN_BENCH = """#!/usr/bin/env bash
# A malformed metric first, the real one a moment later (the runner reads the log in between).
echo "METRIC x=nan"
sleep 0.3
./prog | sed -n 's/^throughput=/METRIC throughput=/p'
"""


def test_rejected_samples_are_warned_once_each(tmp_path: Path) -> None:
    ws, target = make_workspace(
        tmp_path, bench=SLOW_NAN_BENCH, policy={"min_pairs": 3, "batch_pairs": 1, "max_pairs": 3}
    )
    queue(ws, target, ["slowdown"])
    result = start_run(ws, RunOptions(self_test=False, final=False)).execute()
    (exp,) = [e for e in result.experiments if e["kind"] == "candidate"]
    assert exp["status"] in ("discarded", "inconclusive")  # the valid samples decided
    db = ws.db()
    warnings = rows(
        db, "SELECT data FROM events WHERE kind = 'metric_rejected' AND experiment_id = ?", [exp["id"]]
    )
    lines = [json.loads(w["data"])["line"] for w in warnings]
    assert len(lines) == 6 == len(set(lines))  # 3 pairs x 2 sides, each once
    assert not rows(db, "SELECT id FROM samples WHERE metric = 'x'")
