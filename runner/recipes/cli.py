"""Recipe set-up as the CLI runs it: where caches live, which scripts go into the workspace."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kb.errors import UserError
from kb.packaged import LLAMACPP_SCRIPTS, llamacpp_script
from runner.recipes import llamacpp


def cache_dir() -> Path:
    """$AUTORESEARCH_CACHE, else $XDG_CACHE_HOME/autoresearch, else ~/.cache/autoresearch."""
    given = os.environ.get("AUTORESEARCH_CACHE")
    if given:
        return Path(given)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "autoresearch"


def prepare_llamacpp(
    directory: Path, target: str | None, gguf: Path | None, progress: Callable[[str], None]
) -> tuple[str, dict[str, Any], dict[str, Path]]:
    """Tree, model and reference scripts for the llama.cpp recipe.

    Returns the target location, the config sections, and the files to copy into the workspace.
    """
    cache = cache_dir()
    if target is None:
        target = str(llamacpp.prepare_tree(cache / f"llama.cpp-{llamacpp.UPSTREAM_COMMIT}", cache, progress))
    if gguf is not None:
        if not gguf.is_file():
            raise UserError(f"{gguf}: no such model file")
        model = gguf.resolve()
    else:
        model = llamacpp.prepare_model(cache / "models" / llamacpp.MODEL_NAME, cache, progress)
    root = directory.expanduser().resolve()
    extra = llamacpp.settings_overrides(model)
    files = {name: llamacpp_script(name) for name in LLAMACPP_SCRIPTS}
    extra["target"]["bench_script"] = str(root / "autoresearch.sh")
    extra["target"]["checks_script"] = str(root / "autoresearch.checks.sh")
    extra["target"]["env"]["AUTORESEARCH_GOLDEN"] = str(root / "golden-generation.txt")
    return target, extra, files
