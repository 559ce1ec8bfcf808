"""Render the experiment task template (runner/harness/experiment.yaml) for one experiment batch.

The result is a SkyPilot task config (`sky.Task.from_yaml_config` takes `RenderedTask.config`) with
an absolute workdir and every env var a string; the local fleet runs its `setup` and `run` with its
`envs`, so both backends execute the same rendered text.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kb.errors import UserError
from kb.packaged import packaged

DEFAULT_TEMPLATE = "experiment.yaml"
REQUIRED_ENVS = (
    "EXPERIMENT_ID",
    "EXPERIMENT_DESC",
    "BUILD_CMD",
    "BUILD_TIMEOUT",
    "BENCH_TIMEOUT",
    "CHECK_TIMEOUT",
)


@dataclass(frozen=True)
class RenderedTask:
    name: str
    workdir: Path
    envs: dict[str, str]
    setup: str
    run: str
    config: dict[str, Any]
    """The whole rendered task, as SkyPilot reads it."""

    def to_yaml(self) -> str:
        """The rendered task as a SkyPilot YAML file (scripts as readable block literals)."""
        import yaml

        dumper_class: Any = type("Dumper", (yaml.SafeDumper,), {})  # not the global SafeDumper

        def text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
            style = "|" if "\n" in data else None
            return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

        dumper_class.add_representer(str, text)
        return str(yaml.dump(self.config, Dumper=dumper_class, sort_keys=False, allow_unicode=True))


def default_template_text() -> str:
    return packaged("runner.harness", DEFAULT_TEMPLATE).read_text(encoding="utf-8")


def load_template(path: Path | None = None) -> dict[str, Any]:
    """Read and check a template: a YAML mapping with a `run` script and an `envs` mapping."""
    import yaml

    origin = str(path) if path else f"runner/{DEFAULT_TEMPLATE}"
    try:
        text = path.read_text(encoding="utf-8") if path else default_template_text()
    except OSError as exc:
        raise UserError(f"{origin}: cannot read the experiment template ({exc.strerror})") from None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{origin}: malformed YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise UserError(f"{origin}: the experiment template must be a YAML mapping")
    if not isinstance(config.get("run"), str) or not config["run"].strip():
        raise UserError(f"{origin}: the experiment template needs a `run` script")
    if config.get("setup") is not None and not isinstance(config["setup"], str):
        raise UserError(f"{origin}: `setup` must be a script (a string)")
    envs = config.get("envs") or {}
    if not isinstance(envs, dict):
        raise UserError(f"{origin}: `envs` must be a mapping")
    missing = [name for name in REQUIRED_ENVS if name not in envs]
    if missing:
        raise UserError(f"{origin}: `envs` lacks {', '.join(missing)}")
    return config


def render(
    template: dict[str, Any],
    *,
    name: str,
    workdir: Path,
    envs: dict[str, Any],
    resources_override: dict[str, Any] | None = None,
) -> RenderedTask:
    """The template with this batch's values: envs override the template's defaults."""
    if not workdir.is_absolute():
        raise UserError(f"{workdir}: the task workdir must be an absolute path")
    config = copy.deepcopy(template)
    merged = {str(k): "" if v is None else str(v) for k, v in (config.get("envs") or {}).items()}
    merged.update({str(k): "" if v is None else str(v) for k, v in envs.items()})
    config["name"] = name
    config["workdir"] = str(workdir)
    config["envs"] = merged
    if resources_override:
        current = config.get("resources") or {}
        config["resources"] = {**current, **{k: v for k, v in resources_override.items() if v}}
    return RenderedTask(
        name=name,
        workdir=workdir,
        envs=merged,
        setup=str(config.get("setup") or ""),
        run=str(config["run"]),
        config=config,
    )


def one_line(text: str, limit: int = 200) -> str:
    """Env values travel through shells and YAML: keep descriptions to one printable line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
