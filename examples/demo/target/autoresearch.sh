#!/usr/bin/env bash
# Benchmark of the demo target for autoresearch: runs the already built ./bench (build it with
# `make -j2`) and passes its output through. `METRIC <name>=<number>` lines are the samples;
# every other line is log. BENCH_REPS (default 1) samples, each the median of BENCH_ITERS
# (default 5) graph evaluations. The primary metric is `throughput` (higher is better).
set -euo pipefail

# The tree to run is the current folder when it holds the build, else the script's folder.
if [[ ! -x ./bench ]]; then
    cd "$(dirname "${BASH_SOURCE[0]}")"
fi
if [[ ! -x ./bench ]]; then
    echo "autoresearch.sh: ./bench is not built (run make -j2 first)" >&2
    exit 1
fi
exec ./bench "$@"
