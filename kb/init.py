"""Create a workspace, all or nothing: on any failure, what was created is removed again."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb import gitrepo
from kb.config import CONFIG_NAME, dump_settings, parse_settings
from kb.db import connect
from kb.errors import UserError
from kb.workspace import Workspace


@dataclass
class TargetSpec:
    location: str
    baseline: str = "HEAD"
    protect: list[str] = field(default_factory=list)
    metric: str | None = None
    direction: str | None = None
    parallel: int | None = None
    target_overrides: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    """Whole config sections to merge (recipes and the demo set fleet, kb, policy, ...)."""
    files: dict[str, Path] = field(default_factory=dict)
    """Files to copy into the workspace root (a recipe's benchmark and checks scripts)."""


def _normalise_location(location: str) -> str:
    if gitrepo.is_url(location):
        return location
    path = Path(location).expanduser().resolve()
    gitrepo.open_repo(path)  # clear error when it is not a repository
    return str(path)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def create_workspace(directory: Path, spec: TargetSpec) -> Workspace:
    root = directory.expanduser().resolve()
    if (root / CONFIG_NAME).exists():
        raise UserError(f"{root}: already a workspace ({CONFIG_NAME} exists); nothing changed")
    location = _normalise_location(spec.location)
    created_root = not root.exists()
    before = set(os.listdir(root)) if root.exists() else set()
    ws = Workspace(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        mirror = gitrepo.clone_mirror(location, ws.mirror_path)
        try:
            baseline_commit = gitrepo.resolve(mirror, spec.baseline)
        except UserError:
            raise UserError(f"{spec.baseline}: unknown ref in {location}") from None
        target: dict[str, Any] = {
            "path": location,
            "baseline": spec.baseline,
            "baseline_commit": baseline_commit,
            "protect": spec.protect,
            **spec.target_overrides,
        }
        data: dict[str, Any] = {"target": target}
        if spec.metric or spec.direction:
            data["metric"] = {
                k: v for k, v in (("primary", spec.metric), ("direction", spec.direction)) if v
            }
        if spec.parallel:
            data["fleet"] = {"parallel": spec.parallel}
        data = _merge(data, spec.extra)
        settings = parse_settings(data, "options")
        for folder in ws.folders():
            folder.mkdir(exist_ok=True)
        connect(ws.db_path).conn.close()
        for name, source in spec.files.items():
            shutil.copy2(source, root / name)
        # The config is written last: its presence is what makes the folder a workspace.
        ws.config_path.write_text(dump_settings(settings), encoding="utf-8")
    except BaseException:
        if created_root:
            shutil.rmtree(root, ignore_errors=True)
        elif root.exists():
            for name in set(os.listdir(root)) - before:
                path = root / name
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        raise
    return ws
