"""The fork miner does not queue a commit that adds a symlink onto the benchmark (issue 29): its
names (`src/bench.sh`) touch nothing protected, where the link points does. The runner would refuse
it later; the miner now reads the link from the commit and skips it as a protected path."""

from __future__ import annotations

import os
from pathlib import Path

from kb.db import rows
from runner.research.miners import mine
from tests.runner.research_support import git, make_target, make_workspace, seed_kb


def test_a_fork_commit_linking_onto_the_benchmark_is_not_queued(tmp_path: Path) -> None:
    target = make_target(tmp_path)
    git(target.path, "checkout", "-q", "fork")
    os.symlink("../autoresearch.sh", target.path / "src" / "bench.sh")
    (target.path / "src" / "escape.sh").symlink_to("/etc/passwd")
    git(target.path, "add", "-A")
    git(target.path, "commit", "-q", "-m", "src: a shortcut to the benchmark")
    target.fork["link"] = git(target.path, "rev-parse", "HEAD").strip()
    git(target.path, "checkout", "-q", "main")
    ws = make_workspace(tmp_path, target)
    seed_kb(ws, target)
    db = ws.db()

    report = mine(ws, db)

    authors = {r["author"] for r in rows(db, "SELECT author FROM patches")}
    assert target.fork["link"] not in authors
    assert target.fork["quant"] in authors  # the others are mined as before
    assert report.skipped["protected_path"] == 2  # the benchmark commit and the link
