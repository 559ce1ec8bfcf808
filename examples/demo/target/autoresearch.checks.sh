#!/usr/bin/env bash
# Correctness checks of the demo target for autoresearch: every op, every fused pair and the
# whole graph of each backend against the reference implementation. Exits non-zero, naming
# the op, on any mismatch. Needs ./bench built with `make -j2`.
set -euo pipefail

# The tree to run is the current folder when it holds the build, else the script's folder.
if [[ ! -x ./bench ]]; then
    cd "$(dirname "${BASH_SOURCE[0]}")"
fi
if [[ ! -x ./bench ]]; then
    echo "autoresearch.checks.sh: ./bench is not built (run make -j2 first)" >&2
    exit 1
fi
exec ./bench --check
