"""A workspace: a folder with autoresearch.toml, the database, the target mirror, logs and worktrees."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from kb.config import Settings, load_settings
from kb.db import DB_NAME, connect
from kb.locate import CONFIG_NAME, workspace_root

if TYPE_CHECKING:
    import sqlite_utils


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def db_path(self) -> Path:
        return self.root / DB_NAME

    @property
    def mirror_path(self) -> Path:
        """Bare clone of the target: baseline, forks (refs/forks/<name>/*), run branches."""
        return self.root / "mirror.git"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def worktrees_dir(self) -> Path:
        return self.root / "worktrees"

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    @property
    def reports_dir(self) -> Path:
        return self.root / "reports"

    @cached_property
    def settings(self) -> Settings:
        return load_settings(self.config_path)

    def db(self) -> sqlite_utils.Database:
        """A new connection for the calling thread (never share one across threads). The database
        must be there: `autoresearch init` made it, and a missing one is an error, not a new one."""
        return connect(self.db_path, create=False)

    def folders(self) -> list[Path]:
        return [self.logs_dir, self.worktrees_dir, self.patches_dir, self.reports_dir]


def find_workspace(explicit: str | os.PathLike[str] | None = None) -> Workspace:
    """--workspace, else $AUTORESEARCH_WORKSPACE, else the current folder and its parents."""
    return Workspace(workspace_root(explicit))
