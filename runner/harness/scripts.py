"""Which benchmark and checks scripts an experiment runs, and which experiment template.

A script named in the config is a workspace file when one exists there (copied into both trees),
else a file of the target tree. The bottom of the harness: the patch policy (patchpaths), the
harness folder (sandbox) and the workdir (prepare) all read it, and it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from kb.errors import UserError

if TYPE_CHECKING:
    from kb.config import Settings
    from kb.workspace import Workspace


@dataclass(frozen=True)
class Script:
    path: str
    """Where it sits inside each tree (relative, POSIX)."""
    source: Path | None
    """A workspace file copied into both trees; None when it comes with the target tree."""
    role: str


@dataclass(frozen=True)
class Scripts:
    bench: Script
    checks: Script


def _tree_path(configured: str, role: str) -> str:
    path = PurePosixPath(configured)
    if path.is_absolute():
        return path.name
    if ".." in path.parts:
        raise UserError(f"{role} script {configured!r}: must not leave the tree (no '..')")
    return str(path)


def resolve_scripts(ws: Workspace, settings: Settings) -> Scripts:
    """A script named in the config is a workspace file if it exists there, else a tree file."""

    def one(configured: str, role: str) -> Script:
        candidate = Path(configured) if Path(configured).is_absolute() else ws.root / configured
        source = candidate if candidate.is_file() else None
        return Script(_tree_path(configured, role), source, role)

    return Scripts(
        one(settings.target.bench_script, "benchmark"), one(settings.target.checks_script, "checks")
    )


def template_path(ws: Workspace, settings: Settings) -> Path | None:
    """The configured experiment template (None: the packaged one)."""
    configured = settings.fleet.template
    if not configured:
        return None
    path = Path(configured)
    return path if path.is_absolute() else ws.root / path
