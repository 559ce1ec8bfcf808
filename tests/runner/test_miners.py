"""Miners on a real KB: a real target repository with a fork branch, commits rows made from its commits."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kb import gitrepo
from kb.db import one, rows, update
from runner.demo import DEMO_INVENTORY
from runner.research.miners import mine
from runner.research.miners.forks import claimed_effect
from runner.research.priority import priority
from tests.runner.research_support import make_target, make_workspace, seed_kb


def _evidence(db, hid: int) -> set[int]:  # type: ignore[no-untyped-def]
    return {
        r["evidence_id"]
        for r in rows(db, "SELECT evidence_id FROM hypothesis_evidence WHERE hypothesis_id = ?", [hid])
    }


def test_miners_turn_gaps_and_fork_commits_into_hypotheses(tmp_path: Path) -> None:
    target = make_target(tmp_path)
    ws = make_workspace(tmp_path, target)
    kb = seed_kb(ws, target)
    db = ws.db()

    report = mine(ws, db)

    # One gap is missing in the target backend (cpu); the other is missing elsewhere only.
    assert len(report.added["gap"]) == 1
    gap_h = one(db, "SELECT * FROM hypotheses WHERE id = ?", [report.added["gap"][0]])
    assert gap_h is not None
    assert gap_h["title"] == "Fuse RMS_NORM+MUL in the cpu backend"
    assert gap_h["origin"] == "miner:gap" and gap_h["status"] == "proposed"
    assert "src/backend-accel/accel.c:4" in gap_h["rationale"]
    assert _evidence(db, gap_h["id"]) == {kb.gap, kb.fusions["accel"], kb.fusions["gpu"]}
    assert gap_h["priority"] == priority(0.02, 0.6, 1.5)

    # Fork commits: quant applies, norm conflicts; docs, bench, util are skipped for their reasons.
    by_sha = {
        r["author"]: r
        for r in rows(
            db,
            "SELECT p.*, h.title, h.expected_effect, h.origin FROM patches p "
            "JOIN hypotheses h ON h.id = p.hypothesis_id",
        )
    }
    assert set(by_sha) == {target.fork["quant"], target.fork["norm"]}
    quant = by_sha[target.fork["quant"]]
    assert quant["apply_status"] == "ok" and quant["apply_error"] is None
    assert quant["author_kind"] == "fork_commit" and quant["origin"] == "miner:fork"
    assert quant["title"].startswith(f"Port fastfork@{target.fork['quant'][:10]}: quant: unroll")
    assert quant["expected_effect"] == 0.12  # "12% faster" in the commit message
    assert json.loads(quant["files"]) == ["src/quant.c"]
    assert _evidence(db, quant["hypothesis_id"]) == {kb.commits["quant"]}
    norm = by_sha[target.fork["norm"]]
    assert norm["apply_status"] == "conflict"
    assert "src/backend-cpu/ops-norm.c" in norm["apply_error"]
    assert report.details["conflicts"] == [norm["hypothesis_id"]]
    assert report.skipped == {
        "not_missing_in_target": 1,
        "outside_paths_of_interest": 1,
        "protected_path": 1,
        "already_in_baseline": 1,
    }
    sources = rows(db, "SELECT ref FROM hypothesis_sources WHERE hypothesis_id = ?", [quant["hypothesis_id"]])
    assert sources == [{"ref": f"fork:fastfork@{target.fork['quant']}"}]

    # Re-running adds nothing.
    count = one(db, "SELECT count(*) AS n FROM hypotheses")
    again = mine(ws, db)
    assert again.added == {"gap": [], "fork": []}
    assert again.skipped["already_mined"] == 3
    assert one(db, "SELECT count(*) AS n FROM hypotheses") == count
    assert one(db, "SELECT count(*) AS n FROM events WHERE kind = 'hypotheses.mine'") == {"n": 2}


def test_a_mined_fork_patch_applies_to_a_worktree_of_the_baseline(tmp_path: Path) -> None:
    target = make_target(tmp_path)
    ws = make_workspace(tmp_path, target)
    seed_kb(ws, target)
    db = ws.db()
    mine(ws, db)
    patch = one(db, "SELECT * FROM patches WHERE author = ?", [target.fork["quant"]])
    assert patch is not None

    repo = gitrepo.open_repo(ws.mirror_path)
    tree = gitrepo.worktree_add(repo, ws.worktrees_dir / "check", ws.settings.target.baseline_commit)
    try:
        subprocess.run(["git", "apply", "-"], cwd=tree, input=patch["diff"], text=True, check=True)
        assert "#pragma GCC unroll 8" in (tree / "src/quant.c").read_text()
        # The same path the runner takes to build a candidate: a commit on the baseline in the mirror.
        sha = gitrepo.commit_patch(repo, ws.settings.target.baseline_commit, patch["diff"], "candidate")
        assert "#pragma GCC unroll 8" in (gitrepo.show_file(repo, sha, "src/quant.c") or "")
    finally:
        gitrepo.worktree_remove(repo, tree)


def test_upstreamed_and_truncated_commits_are_not_mined(tmp_path: Path) -> None:
    target = make_target(tmp_path)
    ws = make_workspace(tmp_path, target)
    kb = seed_kb(ws, target)
    db = ws.db()
    db.execute("UPDATE commits SET upstreamed = 1 WHERE evidence_id = ?", [kb.commits["quant"]])
    db.execute("UPDATE commits SET diff_truncated = 1 WHERE evidence_id = ?", [kb.commits["norm"]])
    report = mine(ws, db)
    assert report.added["fork"] == []
    assert report.skipped["upstreamed"] == 1 and report.skipped["truncated_diff"] == 1


def test_paths_of_interest_empty_means_everything(tmp_path: Path) -> None:
    target = make_target(tmp_path)
    ws = make_workspace(tmp_path, target)
    seed_kb(ws, target)
    text = ws.config_path.read_text().replace('paths_of_interest = ["src/"]', "paths_of_interest = []")
    ws.config_path.write_text(text)
    ws2 = type(ws)(ws.root)  # fresh settings
    report = mine(ws2, ws2.db())
    assert "outside_paths_of_interest" not in report.skipped
    # quant and norm; the docs commit touches only docs: left out of the queue (hypotheses.skip_areas)
    assert len(report.added["fork"]) == 2
    assert report.skipped["skipped_area"] == 1 and report.left_out == {"docs": 1}


def test_gap_rows_in_the_other_meta_shapes(tmp_path: Path) -> None:
    """ops as a string or only in the title, backends as comma-separated text."""
    target = make_target(tmp_path)
    ws = make_workspace(tmp_path, target)
    kb = seed_kb(ws, target)
    db = ws.db()
    update(db, "evidence", kb.gap, {"meta": {"present": "accel, gpu", "missing": "cpu"}})
    report = mine(ws, db)
    assert len(report.added["gap"]) == 1
    assert _evidence(db, report.added["gap"][0]) == {kb.gap, kb.fusions["accel"], kb.fusions["gpu"]}


def test_claimed_effect() -> None:
    assert claimed_effect("quant: unroll\n\nThis is 12% faster on AVX2.") == 0.12
    assert claimed_effect("gives a speedup of 4.5% in tg") == 0.045
    assert claimed_effect("300% faster (sure)") == 0.3  # capped
    assert claimed_effect("fix a typo in 100% of the comments") is None


def test_priority() -> None:
    assert priority(0.03, 0.5, 1.0) == 1.5
    assert priority(0.03, 0.5, 2.0) == 0.75
    assert priority(-0.05, 0.9, 1.0) == 0.0
    assert priority(None, None, None) == priority(0.01, 0.3, 1.0)
    assert priority(0.02, 0.5, 0.0) == priority(0.02, 0.5, 0.1)  # cost floored


DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"


def test_miners_on_the_demo_through_the_kb_ingestion_modules(tmp_path: Path) -> None:
    """The bundled demo: its fork read by kb.forks, its backends scanned by kb.inventory."""
    if not (DEMO / "build_repos.py").is_file():
        pytest.skip("examples/demo is not in this checkout")
    import importlib.util

    from kb.forks import add_fork
    from kb.init import TargetSpec, create_workspace
    from kb.inventory import scan_workspace
    from kb.inventory.store import store

    spec = importlib.util.spec_from_file_location("demo_build_repos", DEMO / "build_repos.py")
    assert spec is not None and spec.loader is not None
    build_repos = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_repos)
    upstream, fork = build_repos.build(tmp_path / "repos")
    ws = create_workspace(
        tmp_path / "ws",
        TargetSpec(
            location=str(upstream),
            target_overrides={"paths_of_interest": ["src/"]},
            extra={"kb": {"inventory": DEMO_INVENTORY}},
        ),
    )
    db = ws.db()
    add_fork(ws, db, "demo-fork", str(fork))
    store(db, scan_workspace(ws), ref="src")

    report = mine(ws, db)

    [gap_h] = report.added["gap"]
    gap = one(db, "SELECT id FROM evidence WHERE kind = 'gap' AND title = 'RMS_NORM+MUL'")
    accel = one(
        db,
        "SELECT evidence_id FROM fusions WHERE backend = 'accel' AND ops = 'RMS_NORM+MUL' AND kind = 'graph'",
    )
    assert gap is not None and accel is not None
    assert _evidence(db, gap_h) == {gap["id"], accel["evidence_id"]}
    patches = {
        r["subject"]: r["apply_status"]
        for r in rows(
            db,
            "SELECT c.subject, p.apply_status FROM patches p JOIN commits c ON c.sha = p.author "
            "WHERE p.author_kind = 'fork_commit'",
        )
    }
    # Five fork commits touch src/; the sixth changes only the benchmark script (outside src/).
    assert len(patches) == 5 and report.skipped.get("outside_paths_of_interest") == 1
    assert patches["cpu: fuse RMS_NORM + MUL into one pass"] == "ok"
    assert patches["cpu: walk Q8_0 weights row by row in mul_mat"] == "ok"
    assert mine(ws, db).added["fork"] == []
