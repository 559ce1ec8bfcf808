"""`autoresearch run`: experiment waves until the queue is empty or a budget is spent."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from tui.cli.common import echo, echo_json, json_option, workspace
from tui.cli.params import ROW_ID, TEXT, Number, count

_POSITIVE_INT = count(1)
_POSITIVE = Number(min=0, min_open=True)


@click.command("run")
@click.option("--waves", type=_POSITIVE_INT, help="Stop after this many waves.")
@click.option("--parallel", type=_POSITIVE_INT, help="Workers (local slots or clusters) at once.")
@click.option("--budget-minutes", type=_POSITIVE, help="Wall-clock budget; nothing new starts after it.")
@click.option("--budget-usd", type=_POSITIVE, help="VM and LLM cost budget, together.")
@click.option("--max-experiments", type=_POSITIVE_INT, help="Candidate experiments at most.")
@click.option("--bench-timeout", type=_POSITIVE_INT, help="Seconds one benchmark invocation may take.")
@click.option("--check-timeout", type=_POSITIVE_INT, help="Seconds the checks may take.")
@click.option("--build-timeout", type=_POSITIVE_INT, help="Seconds one build may take.")
@click.option("--backend", type=click.Choice(["local", "skypilot"]), help="Fleet (default: the config's).")
@click.option("--name", type=TEXT, help="Run name (branch autoresearch/NAME); default: the start time.")
@click.option("--skip-self-test", is_flag=True, help="Do not measure the baseline against itself first.")
@click.option("--no-final", is_flag=True, help="Do not measure the stacked winners and ablations at the end.")
@click.option("--detach", is_flag=True, help="Run in the background (outlives this shell); print its log.")
@click.option(
    "--from-winners",
    "from_winners",
    metavar="RUN",
    help="Start from an earlier run's head (its winners) instead of the original baseline.",
)
@click.option(
    "--skip-validate", is_flag=True, help="Start even without a passing `autoresearch validate` (warns)."
)
@click.option(
    "--autopilot/--no-autopilot",
    "autopilot_on",
    default=None,
    help="Research, patch, repair and port between waves by itself, until a stop condition "
    "(default: autopilot.enabled).",
)
@click.option("--model", type=TEXT, help="Model for this run (litellm name; overrides llm.model).")
@click.option(
    "--api-base", "api_base", type=TEXT, help="OpenAI-compatible server URL (overrides llm.api_base)."
)
@click.option("--resume", is_flag=True, help="Continue an interrupted run (after a crash or kill).")
@click.option("--run", "run_id", type=ROW_ID, help="With --resume: which run (default: the latest).")
@json_option
@click.pass_context
def cli(
    ctx: click.Context,
    waves: int | None,
    parallel: int | None,
    budget_minutes: float | None,
    budget_usd: float | None,
    max_experiments: int | None,
    bench_timeout: int | None,
    check_timeout: int | None,
    build_timeout: int | None,
    backend: str | None,
    name: str | None,
    skip_self_test: bool,
    no_final: bool,
    detach: bool,
    from_winners: str | None,
    skip_validate: bool,
    autopilot_on: bool | None,
    model: str | None,
    api_base: str | None,
    resume: bool,
    run_id: int | None,
    as_json: bool,
) -> None:
    """Run experiment waves on the queued patches (with --autopilot: the whole loop).

    First the baseline is measured against itself (it must show no difference; the noise floor is
    stored), then each wave measures up to PARALLEL patches against the current baseline, pair by
    pair, and keeps, discards or calls inconclusive. Winners are committed on autoresearch/<run>.
    Progress goes to stdout (stderr with --json, which prints the run's summary at the end).

    With --autopilot (or autopilot.enabled) the run also researches: before the first wave and
    whenever fewer candidates are ready than workers, it refreshes the miners and, with a model,
    repairs patches that failed, ports those a winner made conflict, and proposes and patches new
    hypotheses from what it has learnt. It stops on a stop condition (its stop_reason): the queue or
    the ideas run out, a budget, --waves, --max-experiments, a plateau, or `autoresearch steer stop`.

    A new run starts from the original baseline (target.baseline_commit), or with --from-winners
    RUN from that run's head; it says which. With validation.required (what `init` writes), it
    starts only after a passing `autoresearch validate` of the current scripts and settings.
    """
    from kb.errors import UserError
    from runner import autopilot
    from runner.measure.run import RunOptions

    ws = workspace(ctx)
    run_options: dict[str, Any] = {
        "waves": waves,
        "parallel": parallel,
        "budget_minutes": budget_minutes,
        "budget_usd": budget_usd,
        "max_experiments": max_experiments,
        "bench_timeout": bench_timeout,
        "check_timeout": check_timeout,
        "build_timeout": build_timeout,
        "backend": backend,
        "name": name,
        "autopilot": autopilot_on,
        "model": model,
        "api_base": api_base,
    }
    given = [f"--{k.replace('_', '-')}" for k, v in run_options.items() if v is not None]
    given += [flag for flag, on in (("--skip-self-test", skip_self_test), ("--no-final", no_final)) if on]
    given += ["--from-winners"] if from_winners else []
    if resume and given:
        raise UserError(f"{given[0]}: --resume continues with the run's own options; drop it")
    if run_id is not None and not resume:
        raise UserError("--run: only with --resume")
    if not resume:
        _check_validation(ws, parallel, backend, skip_validate, as_json)
    if detach:
        _detach(ctx, ws.root, ws.logs_dir, ws.db_path, as_json)
        return

    def progress(line: str) -> None:
        echo(line, err=as_json)

    if resume:
        runner = autopilot.resume(ws, run_id, progress=progress)
    else:
        baseline, origin = _baseline(ws, from_winners)
        options = RunOptions(
            **run_options,
            self_test=not skip_self_test,
            final=not no_final,
            baseline=baseline,
            from_winners=from_winners,
        )
        runner = autopilot.start(ws, options, progress=progress)
        progress(f"baseline {runner.ctx.state.baseline[:12]}: {origin}")
    try:
        summary = runner.execute()
    except KeyboardInterrupt:
        echo(f"interrupted; continue with: autoresearch run --resume --run {runner.run_id}", err=True)
        sys.exit(130)
    if as_json:
        echo_json(summary.to_json())
    else:
        _print_summary(summary.to_json())
    if summary.status == "failed":
        raise click.ClickException(f"run {summary.name} failed: {summary.error}")


def _check_validation(ws: Any, parallel: int | None, backend: str | None, skip: bool, as_json: bool) -> None:
    """Refuse a new run that `autoresearch validate` has not passed (validation.required)."""
    from kb.errors import UserError
    from runner.measure.validate import gate

    verdict = gate(ws, parallel=parallel, backend=backend)
    if verdict.ok:
        return
    if skip:
        echo(f"warning: --skip-validate: starting anyway, but {verdict.reason}", err=True)
        return
    raise UserError(f"run refused: {verdict.reason} (or start anyway: run --skip-validate)")


def _baseline(ws: Any, from_winners: str | None) -> tuple[str | None, str]:
    """The commit a new run starts from (None: the config's) and where it comes from, in words."""
    from kb import gitrepo
    from kb.errors import UserError
    from kb.store import runs

    db = ws.db()
    settings = ws.settings
    try:
        if from_winners is None:
            origin = f"target.baseline {settings.target.baseline!r} of autoresearch.toml (resolved at init)"
            earlier = runs.last_run_with_winners(db)
            if earlier:
                name, n = earlier
                origin += (
                    f"; run {name} kept {n} winner(s) on autoresearch/{name}, which "
                    f"this run does not include (--from-winners {name} starts from them)"
                )
            return None, origin
        run = runs.run_by_ref(db, from_winners)
        if run is None:
            raise UserError(f"--from-winners {from_winners}: no such run (see autoresearch history)")
        if run.status in ("running", "paused"):
            raise UserError(f"--from-winners {from_winners}: the run is still {run.status}; wait for it")
        repo = gitrepo.open_repo(ws.mirror_path)
        head = (gitrepo.branch_head(repo, run.branch) if run.branch else None) or run.head_commit
        if not head:
            raise UserError(f"--from-winners {from_winners}: the run has no head commit")
        kept = runs.winner_count(db, run.id)
        origin = (
            f"the head of run {run.name} ({run.branch}: {kept} winner(s) on top of "
            f"{(run.baseline_commit or '?')[:12]})"
        )
        return head, origin
    finally:
        db.conn.close()


def _print_summary(data: dict[str, Any]) -> None:
    kept = [e for e in data["experiments"] if e["status"] == "kept" and e["kind"] == "candidate"]
    counts: dict[str, int] = {}
    for exp in data["experiments"]:
        if exp["kind"] == "candidate":
            counts[exp["status"]] = counts.get(exp["status"], 0) + 1
    shown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no experiments"
    stopped = f" ({data['stop_reason']})" if data.get("stop_reason") else ""
    echo(f"run {data['name']}: {data['status']}{stopped}; {shown}")
    echo(f"  branch {data['branch']}: {data['baseline_commit'][:12]} -> {data['head_commit'][:12]}")
    for exp in kept:
        echo(f"  kept exp {exp['id']} {exp['title']!r}: {exp['effect']:+.2%} after {exp['pairs']} pairs")


def _detach(ctx: click.Context, root: Path, logs_dir: Path, db_path: Path, as_json: bool) -> None:
    """Start this same command without --detach in its own session, output to a log file."""
    from kb.db import connect
    from kb.store.runs import run_of_pid
    from runner.measure.runlock import check_free

    check_free(root)  # a run going here: refused now, in the words the runner would use
    # The child runs this same command, without --detach, on the same workspace.
    argv = [sys.executable, "-m", "tui.cli", "--workspace", str(root), "run", *_subcommand_args(ctx)]
    logs_dir.mkdir(parents=True, exist_ok=True)
    log_path = logs_dir / f"runner-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    with open(log_path, "ab") as log:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            cwd=root,
        )
    run: tuple[int, str] | None = None
    deadline = time.monotonic() + 20
    db = connect(db_path, create=False)
    while time.monotonic() < deadline and child.poll() is None:
        run = run_of_pid(db, child.pid)
        if run:
            break
        time.sleep(0.1)
    if child.poll() is not None and child.returncode != 0 and run is None:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise click.ClickException(f"the detached runner exited {child.returncode}: {tail[0]}")
    info = {
        "pid": child.pid,
        "log": str(log_path),
        "run": run[0] if run else None,
        "name": run[1] if run else None,
    }
    if as_json:
        echo_json(info)
    else:
        which = f"run {run[1]} (id {run[0]})" if run else "the runner"
        echo(f"{which} started in the background, pid {child.pid}; log: {log_path}")


def _subcommand_args(ctx: click.Context) -> list[str]:
    """The `run` options as given, without --detach and --json."""
    out: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in (None, "detach", "as_json"):
            continue
        value = ctx.params.get(param.name)
        flag = param.opts[0]
        if param.is_flag:
            if value:
                out.append(flag)
        elif value is not None:
            out.extend([flag, str(value)])
    return out
