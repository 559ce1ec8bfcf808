"""Create a workspace, all or nothing: on any failure, what was created is removed again."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb import gitrepo
from kb.config import CONFIG_NAME, dump_settings, parse_settings
from kb.db import connect
from kb.errors import UserError
from kb.workspace import Workspace

if TYPE_CHECKING:
    import git


@dataclass
class Prepared:
    """What a caller's `prepare` step adds once the mirror and the database exist."""

    data: dict[str, Any] = field(default_factory=dict)
    """Config sections merged over the spec's (e.g. target.protect, target.build_cmd)."""
    texts: dict[str, str] = field(default_factory=dict)
    """Workspace files to write, executable (scaffolded benchmark and checks scripts)."""
    notes: dict[str, str] = field(default_factory=dict)
    """Comments for the config file by dotted key: why a value was chosen."""


Prepare = Callable[[Workspace, "git.Repo", str, dict[str, Any]], Prepared]
"""(workspace, mirror, baseline commit, config data so far) -> what to add. Runs inside init's
all-or-nothing step: raising removes everything init made."""


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
    prepare: Prepare | None = None
    """A step that needs the mirror or the database (scaffolding scripts, a model's draft)."""


def _normalise_location(location: str) -> str:
    if gitrepo.is_url(location):
        return location
    path = Path(location).expanduser().resolve()
    gitrepo.open_repo(path)  # clear error when it is not a repository
    return str(path)


def uncommitted(location: str, baseline_commit: str, mirror: Path) -> list[str]:
    """Tracked files of a local target whose work tree differs from the baseline commit, when the
    baseline is the target's HEAD: edits the user may think are measured, and are not. Read
    through the workspace's `mirror`: no command of the target's own repository runs (hooks,
    core.fsmonitor, filters; `kb add-fork` reads a repository as safely)."""
    if gitrepo.is_url(location):
        return []
    repo = gitrepo.open_repo(Path(location))
    if repo.bare or gitrepo.commit_of(repo, "HEAD") != baseline_commit or repo.working_tree_dir is None:
        return []
    return gitrepo.worktree_changes(gitrepo.open_repo(mirror), Path(repo.working_tree_dir), baseline_commit)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _fitted(repo: git.Repo, commit: str, data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Defaults that fit this target and this machine, for what the spec leaves open: config
    sections and the notes that explain them in the file."""
    fitted: dict[str, Any] = {}
    notes: dict[str, str] = {}
    if "parallel" not in data.get("fleet", {}):
        cores = os.cpu_count() or 1
        parallel = max(1, min(2, cores // 2))
        fitted["fleet"] = {"parallel": parallel}
        notes["fleet.parallel"] = (
            f"{parallel} for the {cores} cores of the machine that ran `init`: two CPU-bound "
            "benchmarks at once share the cores and each measures the other's load. "
            "`autoresearch validate` measures the benchmark's own threads and says how many fit."
        )
    if "inventory" not in data.get("kb", {}) and not _ggml_layout(repo, commit):
        fitted["kb"] = {"inventory": {"single_ops": [], "view_ops": []}}
        notes["kb.inventory"] = (
            "No compute backends in this tree: `kb inventory` looked for ggml-<name>/ folders "
            "with sources under ggml/src/, src/ and the root. For another layout set "
            "backends_root (the folder holding one folder per backend), backend_dir_pattern and "
            "a [[kb.inventory.rules]] table (README, section Configuration, has an example); "
            "ggml's op lists are left empty here."
        )
    return fitted, notes


def _ggml_layout(repo: git.Repo, commit: str) -> bool:
    """Does the tree have backends in the layout the built-in (ggml) inventory rules read?"""
    from kb.config import InventorySettings
    from kb.inventory import find_layout

    return find_layout(gitrepo.list_files(repo, commit), InventorySettings()) is not None


def _write_script(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


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
            if not gitrepo.run(mirror, "for-each-ref", "--count=1").strip():
                raise UserError(
                    f"{location}: the repository has no commit yet; commit its sources first "
                    "(git add -A && git commit -m 'import'): the baseline is a commit"
                ) from None
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
            data["metric"] = {k: v for k, v in (("primary", spec.metric), ("direction", spec.direction)) if v}
        if spec.parallel:
            data["fleet"] = {"parallel": spec.parallel}
        data = _merge(data, spec.extra)
        fitted, notes = _fitted(mirror, baseline_commit, data)
        data = _merge(fitted, data)
        settings = parse_settings(data, "options")
        for folder in ws.folders():
            folder.mkdir(exist_ok=True)
        connect(ws.db_path).conn.close()
        for name, source in spec.files.items():
            shutil.copy2(source, root / name)
        if spec.prepare is not None:
            prepared = spec.prepare(ws, mirror, baseline_commit, data)
            data = _merge(data, prepared.data)
            notes.update(prepared.notes)
            settings = parse_settings(data, "options")
            for name, text in prepared.texts.items():
                _write_script(root / name, text)
        # The config is written last: its presence is what makes the folder a workspace.
        ws.config_path.write_text(dump_settings(settings, notes), encoding="utf-8")
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
