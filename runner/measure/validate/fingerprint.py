"""The fingerprint of a measurement: what it depends on (the baseline, the build command, the
environment, the scripts, the template, the sandbox's settings), so `run` knows when it must be
made again."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kb import gitrepo
from kb.config import Settings
from kb.workspace import Workspace
from runner.harness.prepare import resolve_scripts, template_path
from runner.harness.template import default_template_text


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def inputs_of(ws: Workspace, settings: Settings) -> dict[str, Any]:
    """What a measurement depends on: change any of these and it must be made again."""
    repo = gitrepo.open_repo(ws.mirror_path)
    baseline = settings.target.baseline_commit or gitrepo.resolve(repo, settings.target.baseline)
    scripts = resolve_scripts(ws, settings)
    found: dict[str, Any] = {
        "baseline_commit": baseline,
        "build_cmd": settings.target.build_cmd,
        "env": dict(sorted(settings.target.env.items())),
    }
    for script in (scripts.bench, scripts.checks):
        if script.source is not None:
            content: bytes | None = script.source.read_bytes()
            where = "workspace"
        else:
            text = gitrepo.show_file(repo, baseline, script.path)
            content = text.encode() if text is not None else None
            where = "tree"
        found[f"{script.role}_script"] = {
            "path": script.path,
            "from": where,
            "sha256": _sha(content) if content is not None else None,
        }
    # What the steps may see and run as: validate's steps run in the run's sandbox. Left out while
    # it is the default, so measurements stored before it was counted still match.
    sandbox = settings.sandbox.model_dump()
    if sandbox != type(settings.sandbox)().model_dump():
        found["sandbox"] = sandbox
    template = template_path(ws, settings)
    try:
        text = template.read_text(encoding="utf-8") if template else default_template_text()
    except OSError:
        text = ""
    found["template"] = {
        "path": str(template) if template else "runner/harness/experiment.yaml",
        "sha256": _sha(text.encode()),
    }
    return found


def fingerprint(inputs: dict[str, Any]) -> str:
    return _sha(json.dumps(inputs, sort_keys=True).encode())


_INPUT_NAMES = {
    "baseline_commit": "target.baseline_commit",
    "build_cmd": "target.build_cmd",
    "env": "target.env",
    "benchmark_script": "the benchmark script",
    "checks_script": "the checks script",
    "template": "the experiment template",
    "sandbox": "the [sandbox] settings",
}


def changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints' inputs, in words."""
    return [_INPUT_NAMES.get(k, k) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
