"""Start-up cost of the command line: `autoresearch --help` and `autoresearch kb --help`.

Run: .venv/bin/python benchmarks/bench_startup.py [--runs N]
Prints the first, median and p95 wall time of fresh processes (goal: --help under 0.5 s). The
first process of a series is the coldest one (after an install it also writes the bytecode cache);
`make startup` and `make check` run it.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def measure(cmd: list[str], runs: int) -> list[float]:
    """Wall times of `runs` fresh processes, in the order they ran."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    exe = shutil.which("autoresearch") or str(Path(sys.executable).parent / "autoresearch")
    print(f"{'command':<32} {'first':>8} {'median':>8} {'p95':>8}  ({args.runs} fresh processes)")
    for argv in (["--help"], ["kb", "--help"], ["run", "--help"]):
        times = measure([exe, *argv], args.runs)
        ordered = sorted(times)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        label = "autoresearch " + " ".join(argv)
        print(
            f"{label:<32} {times[0] * 1000:>6.0f}ms {statistics.median(times) * 1000:>6.0f}ms "
            f"{p95 * 1000:>6.0f}ms"
        )


if __name__ == "__main__":
    main()
