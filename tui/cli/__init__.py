"""The `autoresearch` command line.

Subcommands live in their own modules and are imported only when invoked, so `autoresearch --help`
stays fast: nothing heavy (litellm, sky, textual, trafilatura, git) is imported on that path.
"""

from __future__ import annotations

import sys

import click

from tui.cli.lazy import CommandMap, LazyGroup

COMMANDS: CommandMap = {
    "init": ("tui.cli.init_cmd", "cli", "Create a workspace for a target repository."),
    "kb": ("tui.cli.kb_cmd", "cli", "Knowledge base: papers, forks, backend inventory, search."),
    "hypotheses": ("tui.cli.hypotheses_cmd", "cli", "Mine, generate, list and steer hypotheses."),
    "queue": ("tui.cli.queue_cmd", "cli", "Add patches to the experiment queue by hand."),
    "validate": ("tui.cli.validate_cmd", "cli", "Try build, benchmark and checks on the baseline."),
    "run": ("tui.cli.run_cmd", "cli", "Run experiment waves (or --resume an interrupted run)."),
    "steer": (
        "tui.cli.steer_cmd",
        "cli",
        "Steer the going run: pause, stop, focus, avoid, approval, budget.",
    ),
    "history": ("tui.cli.history_cmd", "history", "Runs, waves, experiments, decisions, samples."),
    "report": ("tui.cli.history_cmd", "report", "Write a run's report (markdown or HTML)."),
    "redecide": ("tui.cli.history_cmd", "redecide", "Re-decide a past run under another policy."),
    "import": ("tui.cli.history_cmd", "import_", "Import an autoresearch.jsonl log into history."),
    "analyze": ("tui.cli.analyze_cmd", "cli", "Decide keep/discard offline from raw samples."),
    "llm": ("tui.cli.llm_cmd", "cli", "LLM calls log."),
    "fleet": ("tui.cli.fleet_cmd", "cli", "Fleet workers and clusters: status, down."),
    "tui": ("tui.cli.tui_cmd", "cli", "Open the Textual console on a workspace."),
    "mcp": ("tui.cli.mcp_cmd", "cli", "Serve the workspace to coding agents over MCP (stdio or HTTP)."),
    "demo": ("tui.cli.demo_cmd", "cli", "Run the whole loop on the bundled example target."),
    "doctor": ("tui.cli.doctor_cmd", "cli", "Print paths, versions and terminal settings."),
}


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--workspace",
    "-w",
    type=click.Path(file_okay=False, path_type=str),
    envvar="AUTORESEARCH_WORKSPACE",
    help="Workspace folder (default: $AUTORESEARCH_WORKSPACE, else the current folder upwards).",
)
@click.version_option(package_name="autoresearch")
@click.pass_context
def main(ctx: click.Context, workspace: str | None) -> None:
    """autoresearch: read first, then patch, then measure honestly.

    A literature-guided autoresearch console: a knowledge base of papers, fork diffs and backend
    fusion gaps; a hypothesis queue; experiment waves on a local fleet or SkyPilot clusters, with
    paired statistics that survive noise; winners kept with provenance.
    """
    ctx.obj = {"workspace": workspace}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
