"""Runner overhead per experiment, and parallel efficiency of a wave on the local fleet.

Everything is real: a gcc-built C target (tests/runner/runner_target.py), git worktrees, job
sessions running the rendered experiment template, SQLite. Each experiment is one batch of PAIRS
pairs (min_pairs = max_pairs), no self-test, no final stack, so its work is known:

- overhead: experiments run one at a time (`--parallel 1`). For each experiment, its wall time
  (prepare start to decision) minus the time its build, benchmark and checks steps took (measured
  by the run script's markers). Also the whole run's wall time minus all steps, per experiment
  (includes run start-up, wave bookkeeping and worktree removal). Goal: <= 1 s per experiment.
- parallel efficiency: the same K experiments on 1 slot, then on K slots:
  T(1 slot) / (K * T(K slots)). Goal: >= 90% for K = cores. Measured twice: with the CPU-bound C
  benchmark (on a machine shared with other work this also measures the machine), and with a
  benchmark that sleeps and nothing to build or check (pure scheduling: what the runner itself
  costs in parallel). For reference, the machine's own efficiency on the same CPU work without
  any runner (K shells at once versus one) is printed too: the runner cannot beat it.

    .venv/bin/python benchmarks/bench_runner_overhead.py [--experiments N] [--pairs P] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.db import rows  # noqa: E402
from runner.hypotheses import add_hypothesis, add_patch  # noqa: E402
from runner.measure.run import RunOptions, start_run  # noqa: E402
from tests.runner.runner_target import git, make_target, make_workspace  # noqa: E402

SLEEP_BENCH = """#!/usr/bin/env bash
# Benchmark that costs no CPU: what remains is the runner's own cost.
sleep 0.05
echo "METRIC throughput=$((100 + RANDOM % 3))"
"""


def variants(ws_target: Path, count: int) -> list[str]:
    """`count` distinct no-op patches (a comment each), so every experiment builds and runs."""
    diffs = []
    path = ws_target / "prog.c"
    original = path.read_text()
    for i in range(count):
        path.write_text(f"/* variant {i} */\n{original}")
        diffs.append(git(ws_target, "diff"))
    path.write_text(original)
    return diffs


def one_run(root: Path, experiments: int, pairs: int, parallel: int, *, sleep_bench: bool) -> dict[str, Any]:
    policy = {"min_pairs": pairs, "batch_pairs": 1, "max_pairs": pairs}
    if sleep_bench:
        # Nothing to build or check either: what is left is the runner's own work.
        ws, target = make_workspace(
            root,
            bench=SLEEP_BENCH,
            policy=policy,
            fleet={"parallel": parallel},
            target={"build_cmd": "true", "checks_script": "checks-ok.sh"},
        )
        (ws.root / "checks-ok.sh").write_text("#!/bin/sh\nexit 0\n")
    else:
        ws, target = make_workspace(root, policy=policy, fleet={"parallel": parallel})
    db = ws.db()
    for i, diff in enumerate(variants(target, experiments)):
        hid = add_hypothesis(db, f"variant {i}", status="approved", priority=-i)
        assert hid is not None
        add_patch(db, hid, diff, author_kind="manual")
    started = time.monotonic()
    summary = start_run(ws, RunOptions(self_test=False, final=False)).execute()
    wall = time.monotonic() - started
    assert summary.status == "finished", summary
    per_exp: list[float] = []
    steps_total = 0.0
    for exp in rows(
        db, "SELECT * FROM experiments WHERE run_id = ? AND kind = 'candidate'", [summary.run_id]
    ):
        meta = json.loads(exp["meta"])
        steps = sum(meta["seconds"].values())
        steps_total += steps
        per_exp.append(exp["ended_at"] - exp["started_at"] - steps)
    waves = rows(db, "SELECT started_at, ended_at FROM waves WHERE run_id = ?", [summary.run_id])
    return {
        "wall": wall,
        "waves": sum(w["ended_at"] - w["started_at"] for w in waves),
        "steps": steps_total,
        "overhead_per_experiment": per_exp,
        "experiments": len(per_exp),
    }


def machine_efficiency(root: Path, k: int, runs: int) -> dict[str, float]:
    """The same CPU work without any runner: K shells running the benchmark at once versus one
    shell running all of it. What the machine allows (other work on it included)."""
    import subprocess

    target = make_target(root / "machine")
    subprocess.run(["make", "-s"], cwd=target, check=True)
    loop = f"for i in $(seq {runs}); do ./prog > /dev/null; done"
    started = time.monotonic()
    subprocess.run(["bash", "-c", " ; ".join([loop] * k)], cwd=target, check=True)
    serial = time.monotonic() - started
    started = time.monotonic()
    procs = [subprocess.Popen(["bash", "-c", loop], cwd=target) for _ in range(k)]
    for proc in procs:
        proc.wait()
    parallel = time.monotonic() - started
    return {"t_serial_s": serial, "t_parallel_s": parallel, "efficiency": serial / (k * parallel)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=6, help="experiments per overhead run")
    parser.add_argument("--pairs", type=int, default=6, help="pairs per experiment (one batch)")
    parser.add_argument("--slots", type=int, default=os.cpu_count() or 2, help="K (default: cores)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    results: dict[str, Any] = {"cores": os.cpu_count(), "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="bench-runner-") as tmp:
        base = Path(tmp)
        serial = one_run(base / "serial", args.experiments, args.pairs, 1, sleep_bench=False)
        over = serial["overhead_per_experiment"]
        results["overhead"] = {
            "experiments": serial["experiments"],
            "pairs": args.pairs,
            "per_experiment_median_s": statistics.median(over),
            "per_experiment_max_s": max(over),
            "whole_run_per_experiment_s": (serial["wall"] - serial["steps"]) / serial["experiments"],
        }
        k = args.slots
        for label, sleep in (("cpu", False), ("sleep", True)):
            one_slot = one_run(base / f"{label}-1", k, args.pairs, 1, sleep_bench=sleep)
            k_slots = one_run(base / f"{label}-k", k, args.pairs, k, sleep_bench=sleep)
            # The same K experiments as K waves of one on one slot, then as one wave on K slots.
            results[f"parallel_{label}"] = {
                "k": k,
                "t_one_slot_s": one_slot["waves"],
                "t_k_slots_s": k_slots["waves"],
                "efficiency": one_slot["waves"] / (k * k_slots["waves"]),
                "efficiency_whole_run": one_slot["wall"] / (k * k_slots["wall"]),
            }
        results["machine"] = machine_efficiency(base, k, 4 * args.pairs)
    results["load_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    o = results["overhead"]
    print(
        f"cores {results['cores']}, load average {results['load_before']:.1f} -> {results['load_after']:.1f}"
    )
    print(
        f"overhead per experiment ({o['experiments']} experiments x {o['pairs']} pairs, one slot): "
        f"median {o['per_experiment_median_s']:.3f} s, max {o['per_experiment_max_s']:.3f} s; "
        f"whole run {o['whole_run_per_experiment_s']:.3f} s per experiment (goal <= 1 s)"
    )
    for label in ("cpu", "sleep"):
        p = results[f"parallel_{label}"]
        print(
            f"parallel efficiency, {label} benchmark, K={p['k']}: {p['efficiency']:.0%} of the wave, "
            f"{p['efficiency_whole_run']:.0%} of the whole run "
            f"(1 slot {p['t_one_slot_s']:.2f} s, {p['k']} slots {p['t_k_slots_s']:.2f} s; goal >= 90%)"
        )

    m = results["machine"]
    print(
        f"the machine itself, same CPU work without a runner: {m['efficiency']:.0%} "
        f"(serial {m['t_serial_s']:.2f} s, {results['parallel_cpu']['k']} at once {m['t_parallel_s']:.2f} s)"
    )


if __name__ == "__main__":
    main()
