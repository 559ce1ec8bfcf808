"""`autoresearch doctor`: where things are and what the terminal looks like (for SSH trouble)."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

import click

from tui.cli.common import echo, echo_json, json_option, workspace

TERMINAL_VARS = ("TERM", "COLORTERM", "TEXTUAL_COLOR_SYSTEM", "TEXTUAL_ANIMATIONS", "TEXTUAL_FPS", "ESCDELAY")
PRIVACY_VARS = ("SKYPILOT_DISABLE_USAGE_COLLECTION", "DO_NOT_TRACK", "LITELLM_LOCAL_MODEL_COST_MAP")
PACKAGES = ("textual", "sqlite-utils", "skypilot", "litellm", "trafilatura", "gitpython", "click")


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


@click.command("doctor")
@json_option
@click.pass_context
def cli(ctx: click.Context, as_json: bool) -> None:
    """Print the workspace paths, schema state, package versions and terminal settings."""
    from kb.migrations import applied

    ws = workspace(ctx)
    settings = ws.settings
    db = ws.db()
    info = {
        "workspace": str(ws.root),
        "config": str(ws.config_path),
        "database": str(ws.db_path),
        "migrations": sorted(applied(db)),
        "target": settings.target.path,
        "baseline_commit": settings.target.baseline_commit,
        "fleet": settings.fleet.backend,
        "llm_model": settings.llm.model or None,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in PACKAGES},
        "terminal": {name: os.environ.get(name) for name in TERMINAL_VARS},
        "privacy": {name: os.environ.get(name) for name in PRIVACY_VARS},
    }
    db.conn.close()
    if as_json:
        echo_json(info)
        return
    for key, value in info.items():
        if isinstance(value, dict):
            echo(f"{key}:")
            for sub, sub_value in value.items():
                echo(f"  {sub:<34} {sub_value if sub_value is not None else '-'}")
        else:
            echo(f"{key:<16} {value if value is not None else '-'}")
