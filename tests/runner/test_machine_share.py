"""Workers that share one machine: a pair runs alone on it, and the side order of the pairs is
drawn per batch, so a neighbour can neither run during a pair nor fall on the same side of every
pair. Real runs of the runner's C target on two local slots; the markers' own timestamps say what
ran when."""

from __future__ import annotations

import itertools
from pathlib import Path

from kb.db import rows
from runner.harness.batch import pair_order
from runner.measure.run import RunOptions, start_run
from tests.runner.runner_target import make_workspace, queue

# A benchmark long enough that two workers' pairs would overlap if nothing kept them apart.
SLOW_BENCH = """#!/usr/bin/env bash
sleep 0.15
./prog | sed -n 's/^throughput=/METRIC throughput=/p'
"""


def test_pair_order_is_balanced_per_block_and_drawn_per_batch() -> None:
    seen_first: set[str] = set()
    for n in range(40):
        order = pair_order(f"nonce{n}", 9).split()
        assert len(order) == 9 and set(order) <= {"AB", "BA"}
        for k in range(0, 8, 2):
            assert sorted(order[k : k + 2]) == ["AB", "BA"]  # one of each: a steady drift cancels
        seen_first.add(order[0])
        assert pair_order(f"nonce{n}", 9) == " ".join(order)  # the batch's nonce decides
    assert seen_first == {"AB", "BA"}  # neither order is fixed: a neighbour cannot keep in step


def _spans(log: Path) -> tuple[list[tuple[float, float]], list[tuple[float, float]], list[list[str]]]:
    """(pair spans, build spans, side orders) of one batch log, from its markers' timestamps."""
    pairs: dict[str, list[float]] = {}
    orders: dict[str, list[str]] = {}
    builds: list[tuple[float, float]] = []
    begun = 0.0
    for line in log.read_text().splitlines():
        if not line.startswith("@@AR "):
            continue
        _, _, when, kind, *rest = line.split()
        t = float(when)
        if kind == "BEGIN":
            pairs.setdefault(rest[0], []).append(t)
            orders.setdefault(rest[0], []).append(rest[1])
        elif kind == "END":
            pairs[rest[0]].append(t)
        elif kind == "BUILD_BEGIN":
            begun = t
        elif kind == "BUILD_END" and "cached" not in rest:
            builds.append((begun, t))
    return [(min(v), max(v)) for v in pairs.values()], builds, list(orders.values())


def _run(tmp_path: Path, exclusive: bool) -> list[tuple[int, Path]]:
    ws, target = make_workspace(
        tmp_path,
        bench=SLOW_BENCH,
        fleet={"parallel": 2, "exclusive_pairs": exclusive},
        policy={"min_pairs": 4, "max_pairs": 4, "batch_pairs": 4},
    )
    queue(ws, target, ["speedup", "slowdown"])
    result = start_run(ws, RunOptions(waves=1, self_test=False, final=False)).execute()
    jobs = rows(
        ws.db(), "SELECT worker_id, log_path, nonce, pairs FROM jobs WHERE run_id = ?", [result.run_id]
    )
    assert len({j["worker_id"] for j in jobs}) == 2, jobs  # both slots ran a batch
    for job in jobs:  # each batch ran the order drawn from its nonce
        orders = _spans(Path(job["log_path"]))[2]
        assert [" ".join(o) for o in orders] == [
            " ".join(o) for o in pair_order(job["nonce"], job["pairs"]).split()
        ]
    return [(j["worker_id"], Path(j["log_path"])) for j in jobs]


def _overlaps(jobs: list[tuple[int, Path]]) -> int:
    """Pairs of one worker during which another worker's pair or build ran."""
    found = 0
    for (worker, log), (other, other_log) in itertools.permutations(jobs, 2):
        if worker == other:
            continue
        mine = _spans(log)[0]
        theirs_pairs, theirs_builds, _ = _spans(other_log)
        for start, end in mine:
            found += any(s < end and start < e for s, e in theirs_pairs + theirs_builds)
    return found


def test_a_pair_runs_alone_on_a_shared_machine(tmp_path: Path) -> None:
    assert _overlaps(_run(tmp_path / "locked", exclusive=True)) == 0


def test_without_the_lock_pairs_overlap(tmp_path: Path) -> None:
    # The control: the same run with `fleet.exclusive_pairs = false` does overlap, so the test
    # above can fail.
    assert _overlaps(_run(tmp_path / "open", exclusive=False)) > 0
