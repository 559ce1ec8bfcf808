"""`autoresearch init`: create a workspace for a target repository."""

from __future__ import annotations

from pathlib import Path

import click

from tui.cli.params import PathArg, count


@click.command("init")
@click.argument("directory", default=".", type=PathArg(file_okay=False, path_type=Path))
@click.option("--target", default=None, help="Target repository: a local path or a git URL.")
@click.option(
    "--recipe",
    type=click.Choice(["llama.cpp"]),
    default=None,
    help="Prepare a known target (tree, model, scripts, config).",
)
@click.option(
    "--gguf",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="llama.cpp recipe: benchmark model (default: Gemma 3 270M Q4_K_M from PyPI).",
)
@click.option("--baseline", default="HEAD", show_default=True, help="Baseline ref (branch, tag, sha).")
@click.option("--build-cmd", default=None, help="Command that builds the target in a tree.")
@click.option("--metric", default=None, help="Primary metric name (from METRIC lines).")
@click.option("--direction", type=click.Choice(["higher", "lower"]), default=None)
@click.option("--protect", multiple=True, help="Extra protected path (repeatable).")
@click.option("--bench-script", default=None, help="Benchmark script (default autoresearch.sh).")
@click.option("--checks-script", default=None, help="Checks script (default autoresearch.checks.sh).")
@click.option("--parallel", type=count(), default=None, help="Local fleet parallelism.")
@click.option("--json", "as_json", is_flag=True, help="Print the workspace as JSON.")
def cli(
    directory: Path,
    target: str | None,
    recipe: str | None,
    gguf: Path | None,
    baseline: str,
    build_cmd: str | None,
    metric: str | None,
    direction: str | None,
    protect: tuple[str, ...],
    bench_script: str | None,
    checks_script: str | None,
    parallel: int | None,
    as_json: bool,
) -> None:
    """Create a workspace in DIRECTORY (default: here) for the target repository.

    The workspace holds autoresearch.toml, the database, a bare mirror of the target, and folders
    for logs, worktrees, patches and reports. Nothing is left behind if any step fails.
    """
    from kb.init import TargetSpec, create_workspace
    from tui.cli.common import echo_json

    overrides: dict[str, object] = {}
    extra: dict[str, object] = {}
    files: dict[str, Path] = {}
    if recipe == "llama.cpp":
        from runner.recipes.cli import prepare_llamacpp

        def progress(message: str) -> None:
            click.echo(message, err=True)

        target, extra, files = prepare_llamacpp(directory, target, gguf, progress)
    elif target is None:
        raise click.UsageError("--target is required (or use --recipe)")
    if build_cmd is not None:
        overrides["build_cmd"] = build_cmd
    if bench_script is not None:
        overrides["bench_script"] = bench_script
    if checks_script is not None:
        overrides["checks_script"] = checks_script
    spec = TargetSpec(
        location=target,
        baseline=baseline,
        protect=list(protect),
        metric=metric,
        direction=direction,
        parallel=parallel,
        target_overrides=overrides,
        extra=extra,
        files=files,
    )
    ws = create_workspace(directory, spec)
    settings = ws.settings
    if as_json:
        echo_json(
            {
                "workspace": str(ws.root),
                "config": str(ws.config_path),
                "database": str(ws.db_path),
                "target": settings.target.path,
                "baseline": settings.target.baseline,
                "baseline_commit": settings.target.baseline_commit,
            }
        )
        return
    click.echo(f"Created workspace {ws.root}")
    click.echo(f"  target    {settings.target.path} @ {settings.target.baseline_commit[:12]}")
    click.echo(f"  config    {ws.config_path}")
    click.echo(f"  database  {ws.db_path}")
    click.echo("Next: autoresearch kb add-paper URL, autoresearch kb inventory, autoresearch run")
