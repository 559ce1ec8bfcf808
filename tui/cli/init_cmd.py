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
@click.option("--parallel", type=count(), default=None, help="Local fleet parallelism (default: by cores).")
@click.option(
    "--bench-cmd",
    default=None,
    help="Scaffold the benchmark script: this command, run in the tree's root after the build.",
)
@click.option(
    "--metric-regex",
    default=None,
    help="With --bench-cmd: Python regex over the command's output lines, one group around the "
    "number (or named groups, one metric each); without it the command prints METRIC lines.",
)
@click.option("--check-cmd", default=None, help="Scaffold the checks script: fails on a wrong result.")
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=None,
    help="With --bench-cmd: times one benchmark call runs the command (default 5; AR_SAMPLES).",
)
@click.option("--draft-scripts", is_flag=True, help="Ask the model for a first draft of the scripts.")
@click.option("--model", default=None, help="litellm model for --draft-scripts (also written as llm.model).")
@click.option("--api-base", default=None, help="API base of an OpenAI-compatible server (llm.api_base).")
@click.option("--yes", "-y", is_flag=True, help="Accept the model's draft without asking.")
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
    bench_cmd: str | None,
    metric_regex: str | None,
    check_cmd: str | None,
    samples: int | None,
    draft_scripts: bool,
    model: str | None,
    api_base: str | None,
    yes: bool,
    as_json: bool,
) -> None:
    """Create a workspace in DIRECTORY (default: here) for the target repository.

    The workspace holds autoresearch.toml, the database, a bare mirror of the target, and folders
    for logs, worktrees, patches and reports. Nothing is left behind if any step fails.

    A target without benchmark or checks scripts gets them scaffolded into the workspace from
    --bench-cmd / --metric-regex / --check-cmd (or a model's draft, --draft-scripts); then
    `autoresearch validate` tries them on the baseline before the first run.
    """
    from kb.errors import UserError
    from kb.init import TargetSpec, create_workspace, uncommitted
    from runner.harness.scaffold import DEFAULT_SAMPLES, ScaffoldRequest, make_prepare
    from tui.cli.common import confirm as ask
    from tui.cli.common import echo, echo_json

    if (metric_regex is not None or samples is not None) and bench_cmd is None and not draft_scripts:
        raise UserError("--metric-regex and --samples: only with --bench-cmd (or --draft-scripts)")
    if yes and not draft_scripts:
        raise UserError("--yes: only with --draft-scripts")

    overrides: dict[str, object] = {}
    extra: dict[str, object] = {}
    files: dict[str, Path] = {}
    if recipe == "llama.cpp":
        from runner.recipes.cli import prepare_llamacpp

        def progress(message: str) -> None:
            echo(message, err=True)

        target, extra, files = prepare_llamacpp(directory, target, gguf, progress)
    elif target is None:
        raise click.UsageError("--target is required (or use --recipe)")
    if build_cmd is not None:
        overrides["build_cmd"] = build_cmd
    if bench_script is not None:
        overrides["bench_script"] = bench_script
    if checks_script is not None:
        overrides["checks_script"] = checks_script
    request = ScaffoldRequest(
        bench_cmd=bench_cmd,
        metric_regex=metric_regex,
        check_cmd=check_cmd,
        samples=samples or DEFAULT_SAMPLES,
        draft=draft_scripts,
        model=model,
        api_base=api_base,
    )

    def say(line: str) -> None:
        echo(line, err=as_json)

    def confirm(question: str) -> bool:
        return yes or ask(question)

    # `run` refuses to start until `autoresearch validate` passed on these scripts and settings.
    extra = {**extra, "validation": {"required": True}}
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
        prepare=make_prepare(request, say, confirm),
    )
    ws = create_workspace(directory, spec)
    settings = ws.settings
    dirty = uncommitted(settings.target.path, settings.target.baseline_commit, ws.mirror_path)
    # The workspace's scripts: the recipe's own (copied), else scaffolded from the commands given.
    scripts = [
        (name, "the llama.cpp recipe's" if Path(name).name in files else "scaffolded")
        for name in (settings.target.bench_script, settings.target.checks_script)
        if (ws.root / name).is_file()
    ]
    scaffolded = [name for name, how in scripts if how == "scaffolded"]
    if as_json:
        echo_json(
            {
                "workspace": str(ws.root),
                "config": str(ws.config_path),
                "database": str(ws.db_path),
                "target": settings.target.path,
                "baseline": settings.target.baseline,
                "baseline_commit": settings.target.baseline_commit,
                "scripts": [name for name, _ in scripts],
                "scaffolded": scaffolded,
                "protect": settings.target.protect,
                "parallel": settings.fleet.parallel,
                "uncommitted": dirty,
            }
        )
        return
    echo(f"Created workspace {ws.root}")
    echo(f"  target    {settings.target.path} @ {settings.target.baseline_commit[:12]}")
    echo(f"  config    {ws.config_path} (every key explained: README, section Configuration)")
    echo(f"  database  {ws.db_path}")
    for name, how in scripts:
        echo(f"  script    {ws.root / name} ({how})")
    if settings.target.protect:
        echo(f"  protected {', '.join(settings.target.protect)}")
    echo(f"  parallel  {settings.fleet.parallel} worker(s)")
    if dirty:
        shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
        echo(
            f"note: {len(dirty)} tracked file(s) of the target differ from its HEAD ({shown}): the "
            f"baseline is the commit {settings.target.baseline_commit[:12]} without those edits; "
            "commit them and run init again to measure them"
        )
    echo(
        "Next: autoresearch validate (build, benchmark and checks once on the baseline, with advice), "
        "then autoresearch kb add-paper URL, autoresearch kb inventory, autoresearch run"
    )
