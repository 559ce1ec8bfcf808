"""Two run behaviours of issue 29 on the real local fleet: `--max-experiments N` budgets the
candidates, and the final stack of what they won is still measured; a 100 KB title is one short
quoted line in every progress line, not the whole title again and again."""

from __future__ import annotations

from pathlib import Path

from kb.db import rows
from runner.hypotheses import add_hypothesis, add_patch
from runner.measure.run import RunOptions, start_run
from tests.runner.runner_target import make_diff, make_workspace


def test_max_experiments_budgets_candidates_and_the_final_stack_is_measured(tmp_path: Path) -> None:
    ws, target = make_workspace(
        tmp_path,
        fleet={"parallel": 1},
        policy={"min_effect": 0.05, "min_pairs": 3, "batch_pairs": 3, "max_pairs": 6},
    )
    db = ws.db()
    long_title = "Skip the unused warm-up " + "and more " * 12_000  # ~100 KB
    for i, (name, title) in enumerate([("speedup", long_title), ("noop", "Document reps()")]):
        hid = add_hypothesis(db, title, status="approved", priority=10 - i, source_refs=[f"note:{name}"])
        assert hid is not None
        add_patch(db, hid, make_diff(target, name), author_kind="manual", author=f"{name}.patch")
    lines: list[str] = []
    result = start_run(ws, RunOptions(self_test=False, max_experiments=1), progress=lines.append).execute()

    assert result.summary is not None and result.summary["stopped_by"].startswith("budget: max experiments")
    by_kind = {e["kind"]: e for e in result.experiments}
    assert by_kind["candidate"]["status"] == "kept", by_kind["candidate"]
    assert len([e for e in result.experiments if e["kind"] == "candidate"]) == 1
    stack = by_kind["stack"]
    assert stack["status"] in ("kept", "discarded", "inconclusive"), stack  # measured, not cancelled
    assert rows(db, "SELECT count(*) AS n FROM samples WHERE experiment_id = ?", [stack["id"]])[0]["n"] > 0
    assert any(line.startswith("final: the 1 winners stacked") for line in lines), lines

    titled = [line for line in lines if "Skip the unused warm-up" in line]
    assert titled, lines
    assert max(len(line) for line in titled) < 200, max(titled, key=len)[:300]
    assert all("…'" in line for line in titled)
