"""`autoresearch demo [DIR]`: the whole loop on the bundled example target (runner.demo)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from tui.cli.common import echo, echo_json, json_option
from tui.cli.params import PathArg


@click.command("demo")
@click.argument("directory", required=False, type=PathArg(path_type=Path), metavar="[DIR]")
@click.option("--force", is_flag=True, help="Replace an earlier demo in DIR (only what the demo made).")
@click.option("--model", default=None, help="litellm model: also generate hypotheses and patches with it.")
@click.option("--api-base", default=None, help="API base URL for --model (e.g. a local server).")
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Local workers measuring at once.",
)
@json_option
def cli(
    directory: Path | None,
    force: bool,
    model: str | None,
    api_base: str | None,
    parallel: int,
    as_json: bool,
) -> None:
    """Run the whole loop on the bundled example: read, hypothesize, measure in waves, keep.

    Makes DIR (default ./autoresearch-demo) a workspace on a small C project and its fork, reads
    four articles, scans which backend fuses what, then runs the autopilot: a research phase mines
    hypotheses from the gaps and the fork's commits, a wave measures them against the baseline on
    this machine, its post-mortem is stored, a second research phase looks again (with --model the
    model also writes hypotheses, patches and repairs), the winners are committed with their
    provenance, and a report is written. No network, no API key (unless --model). A few minutes
    on 2 cores. Progress goes to stdout (stderr with --json, which prints the result at the end).
    """
    from runner.demo import DEFAULT_DIR, DemoOptions, run_demo, summary_lines

    options = DemoOptions(
        directory=directory or Path(DEFAULT_DIR),
        force=force,
        model=model,
        api_base=api_base,
        parallel=parallel,
    )
    started = time.monotonic()
    stage_started = {"at": started}

    def progress(stage: str, line: str) -> None:
        if not line.startswith(" "):  # a stage headline
            stage_started["at"] = time.monotonic()
            line = f"==> {line}"
        else:
            line = f"{_clock(time.monotonic() - started)} {line}"
        echo(line, err=as_json)
        sys.stdout.flush()

    try:
        result = run_demo(options, progress)
    except KeyboardInterrupt:
        echo(_after_interrupt(options.directory.expanduser().resolve()), err=True)
        sys.exit(130)
    if as_json:
        echo_json(result.to_json())
    else:
        echo("")
        for line in summary_lines(result):
            echo(line)
    if result.run_status == "failed":
        raise click.ClickException(f"the demo's run failed: {result.error}")


def _after_interrupt(root: Path) -> str:
    """What to do next: resume the run if it had started, else start again."""
    from kb.db import DB_NAME, connect
    from kb.store.runs import latest_run_id

    if (root / DB_NAME).is_file():
        db = connect(root / DB_NAME, readonly=True)
        try:
            run = latest_run_id(db)
        finally:
            db.conn.close()
        if run is not None:
            return (
                f"interrupted; continue the run with: autoresearch --workspace {root} run --resume\n"
                f"then write its report with: autoresearch --workspace {root} report demo"
            )
    return f"interrupted before the run started; start again with: autoresearch demo {root} --force"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"[{minutes:d}:{secs:02d}]"
