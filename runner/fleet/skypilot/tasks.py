"""Task shaping: the `resources:` of `fleet.skypilot`, the rendered task as the fleet sends it (a
valid name, the workdir sync prelude before `run`) and the manifest that prelude reads."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from kb.config import SkyPilotSettings
from kb.errors import UserError
from runner.fleet.skypilot import sdk
from runner.harness.template import RenderedTask

MANIFEST = ".autoresearch-manifest"
DEFAULT_ORIGIN = "runner/harness/experiment.yaml"

# The workdir sync (rsync) only adds and updates files. When this cluster switches to another tree,
# delete what the previous one left behind (build outputs, files a previous candidate added) and
# its build stamps, so each experiment starts from exactly its own synced tree.
SYNC_PRELUDE = """\
# autoresearch SkyPilot fleet: start from exactly the synced tree when it differs from the last one.
ar_tree={tree}
if [ "$(cat .autoresearch/tree 2>/dev/null)" != "$ar_tree" ]; then
  if [ -f {manifest} ]; then
    ar_present=$(mktemp)
    find . -mindepth 1 \\( -path ./{manifest} -o -path ./.autoresearch \\) -prune -o \\
      \\( -type f -o -type l \\) -printf '%P\\0' | LC_ALL=C sort -z > "$ar_present"
    LC_ALL=C sort -z {manifest} | LC_ALL=C comm -z -23 "$ar_present" - | xargs -0 -r rm -f --
    rm -f "$ar_present"
  fi
  rm -rf .autoresearch
  mkdir -p .autoresearch && printf '%s\\n' "$ar_tree" > .autoresearch/tree
fi
unset ar_tree ar_present
"""


def resources_config(conf: SkyPilotSettings) -> dict[str, Any]:
    """The `fleet.skypilot` resource keys that are set, as SkyPilot's `resources:` mapping."""
    wanted = {
        "infra": conf.infra,
        "cpus": conf.cpus,
        "memory": conf.memory,
        "accelerators": conf.accelerators,
    }
    return {key: value for key, value in wanted.items() if value}


def check_resources(conf: SkyPilotSettings) -> None:
    """A malformed `fleet.skypilot` resource spec is a one-line UserError (nothing is launched)."""
    spec = resources_config(conf)
    try:
        sdk.resources(spec)
    except UserError:  # SkyPilot itself is missing: its own message
        raise
    except Exception as exc:  # noqa: BLE001 - SkyPilot raises ValueError and its own config errors
        shown = ", ".join(f"{k}={v!r}" for k, v in spec.items()) or "defaults"
        raise UserError(f"fleet.skypilot ({shown}): invalid resources ({sdk.error_line(exc)})") from None


def task_name(name: str) -> str:
    """A valid SkyPilot task name (letters, digits, `.`, `_`, `-`; no runs of three `-` or `_`)."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "-", name)
    clean = re.sub(r"([-_])\1{2,}", r"\1\1", clean).strip("._-")
    return clean or "autoresearch"


def sync_prelude(tree: str) -> str:
    return SYNC_PRELUDE.format(tree=tree, manifest=MANIFEST)


def tree_id(workdir: Path) -> str:
    """Names one prepared tree (an experiment's folder is never reused for another experiment)."""
    return hashlib.sha1(str(workdir).encode()).hexdigest()[:16]


def for_cluster(rendered: RenderedTask) -> RenderedTask:
    """The rendered task as the fleet sends it: a valid name and the sync prelude before `run`."""
    run = sync_prelude(tree_id(rendered.workdir)) + rendered.run
    name = task_name(rendered.name)
    return replace(rendered, name=name, run=run, config={**rendered.config, "name": name, "run": run})


def sky_task(rendered: RenderedTask, origin: str) -> Any:
    """A validated `sky.Task` from a rendered task; any invalid field is a one-line UserError."""
    try:
        return sdk.task(rendered.config)
    except UserError:  # SkyPilot itself is missing: its own message
        raise
    except Exception as exc:  # noqa: BLE001 - ValueError, InvalidSkyPilotConfigError, catalog errors
        raise UserError(f"{origin}: not a valid SkyPilot task ({sdk.error_line(exc)})") from None


def write_manifest(tree: Path) -> int:
    """List every file and symlink of the tree (NUL-separated, relative) for the sync prelude."""
    names: list[str] = []
    for folder, dirs, files in os.walk(tree):
        rel = os.path.relpath(folder, tree)
        if rel == ".":
            dirs[:] = [d for d in dirs if d != ".autoresearch"]
            files = [f for f in files if f != MANIFEST]
        for name in list(dirs):
            if os.path.islink(os.path.join(folder, name)):  # rsync copies the link, not its target
                dirs.remove(name)
                files.append(name)
        names.extend(name if rel == "." else os.path.join(rel, name) for name in files)
    (tree / MANIFEST).write_bytes(b"".join(os.fsencode(name) + b"\0" for name in names))
    return len(names)
