"""Where the workspace is: stdlib only, so the console's start-up path can use it before the
database and config modules load (pydantic and sqlite_utils cost most of a second)."""

from __future__ import annotations

import os
from pathlib import Path

from kb.errors import WorkspaceNotFound

CONFIG_NAME = "autoresearch.toml"
ENV_VAR = "AUTORESEARCH_WORKSPACE"


def workspace_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """--workspace, else $AUTORESEARCH_WORKSPACE, else the current folder and its parents."""
    given = explicit or os.environ.get(ENV_VAR)
    if given:
        root = Path(given).expanduser().resolve()
        if not (root / CONFIG_NAME).is_file():
            raise WorkspaceNotFound(f"{root}: not a workspace (no {CONFIG_NAME}; run autoresearch init)")
        return root
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_NAME).is_file():
            return folder
    raise WorkspaceNotFound(
        f"{here}: no workspace here or above (no {CONFIG_NAME}); "
        "pass --workspace, set AUTORESEARCH_WORKSPACE, or run autoresearch init"
    )
