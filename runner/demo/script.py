"""The demo's script: the seven stages, each calling the library its command uses (runner.demo
lists them), on the workspace runner.demo.target set up; runner.demo.summary reads back the result.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb.errors import UserError
from kb.packaged import demo_dir
from runner.demo.summary import DemoResult, bottlenecks, collect_outcomes, waiting_hypotheses
from runner.demo.target import (
    ARTICLES,
    FORK_NAME,
    RUN_NAME,
    DemoOptions,
    DemoProgress,
    check_tools,
    make_workspace,
    prepare_folder,
)

if TYPE_CHECKING:
    import sqlite_utils

    from kb.workspace import Workspace


class _Stages:
    def __init__(self, progress: DemoProgress) -> None:
        self.progress = progress
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str, headline: str) -> Iterator[None]:
        self.progress(name, headline)
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - started, 2)


def run_demo(options: DemoOptions, progress: DemoProgress | None = None) -> DemoResult:
    """Run the whole demo; returns what the summary shows. Bad input raises UserError before
    anything is written; a run that fails returns with `run_status` failed and `error` set."""
    say: DemoProgress = progress or (lambda _stage, _line: None)
    if options.parallel < 1:
        raise UserError(f"--parallel {options.parallel}: must be at least 1")
    if options.bench_reps < 1:
        raise UserError(f"bench_reps {options.bench_reps}: must be at least 1")
    root = options.directory.expanduser().resolve()
    example = demo_dir()
    check_tools()
    started = time.monotonic()
    stages = _Stages(say)
    prepare_folder(root, options.force)

    with stages.stage("workspace", f"1/7 workspace: {root}"):
        ws, upstream, fork = make_workspace(root, example, options, say)
    db = ws.db()

    with stages.stage("papers", "2/7 papers: reading the articles"):
        papers = _ingest_papers(ws, db, say)
    with stages.stage("fork", f"3/7 fork: recording the fork's commits ({fork})"):
        fork_commits = _add_fork(ws, db, fork, say)
    with stages.stage("inventory", "4/7 inventory: which backend fuses what"):
        gaps = _inventory(ws, db, say)
    with stages.stage("hypotheses", "5/7 hypotheses: mining the gaps and the fork"):
        mined = _mine(ws, db, say)
        llm = _generate(ws, db, options, say) if options.model else None

    from runner.autopilot import start
    from runner.measure.run import RunOptions, run_summary

    with stages.stage("run", "6/7 run: self-test, then waves of experiments on the local fleet"):
        runner = start(
            ws,
            RunOptions(
                parallel=options.parallel,
                name=_run_name(db),
                self_test=options.self_test,
                final=options.final,
            ),
            progress=lambda line: say("run", "  " + line),
        )
        summary = runner.execute()
    run_id = summary.run_id

    with stages.stage("report", "7/7 report"):
        from runner.record.report import write_report

        md = write_report(ws, db, run_id, fmt="md")
        html = write_report(ws, db, run_id, fmt="html")
        say("report", f"  {md.path}")
        say("report", f"  {html.path}")

    final = run_summary(db, run_id)
    kept, others = collect_outcomes(db, final.to_json())
    bottleneck, after = bottlenecks(db, final.to_json(), ws.settings.metric.primary)
    stack = (final.summary or {}).get("stack")
    ablation = (final.summary or {}).get("ablation") or []
    result = DemoResult(
        workspace=root,
        run_id=run_id,
        run_name=final.name,
        run_status=final.status,
        seconds=round(time.monotonic() - started, 1),
        stage_seconds=stages.seconds,
        papers=papers,
        fork_commits=fork_commits,
        gaps=gaps,
        mined=mined,
        llm=llm,
        kept=kept,
        others=others,
        waiting=waiting_hypotheses(db),
        self_test=final.self_test,
        stack=stack,
        ablation=ablation,
        bottleneck=bottleneck,
        bottleneck_after=after,
        report=md.path,
        report_html=html.path,
        tui_command=f"autoresearch --workspace {_shell_quote(str(root))} tui",
        error=final.error,
    )
    db.conn.close()
    return result


def _run_name(db: sqlite_utils.Database) -> str:
    from kb.db import one

    if one(db, "SELECT id FROM runs WHERE name = ?", [RUN_NAME]) is None:
        return RUN_NAME
    n = 2
    while one(db, "SELECT id FROM runs WHERE name = ?", [f"{RUN_NAME}-{n}"]):
        n += 1
    return f"{RUN_NAME}-{n}"


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _ingest_papers(ws: Workspace, db: sqlite_utils.Database, say: DemoProgress) -> list[str]:
    from kb.papers import PaperResult, add_papers, expand_inputs

    def show(result: PaperResult) -> None:
        say("papers", f"  {result.message}")

    results = add_papers(db, expand_inputs([str(ws.root / ARTICLES)]), ws.settings.kb, progress=show)
    failed = [r for r in results if r.status == "error"]
    if failed:
        raise UserError(f"demo article {failed[0].input}: {failed[0].message}")
    return [r.title or r.input for r in results]


def _add_fork(ws: Workspace, db: sqlite_utils.Database, fork: Path, say: DemoProgress) -> int:
    from kb.forks import add_fork

    result = add_fork(ws, db, FORK_NAME, str(fork))
    say("fork", f"  {result.message}")
    return int(result.new_commits)


def _inventory(ws: Workspace, db: sqlite_utils.Database, say: DemoProgress) -> list[str]:
    from kb.inventory import scan_workspace
    from kb.inventory.store import store

    inv = scan_workspace(ws)
    _, inv = store(db, inv, ref=ws.settings.target.path)
    say(
        "inventory",
        f"  {len(inv.backends)} backends ({', '.join(inv.backends)}), {len(inv.fusions)} fusion sites, "
        f"{len(inv.gaps)} gap(s)",
    )
    gaps = []
    for gap in inv.gaps:
        text = f"{gap.key}: fused in {', '.join(gap.present)}, not in {', '.join(gap.missing)}"
        gaps.append(text)
        say("inventory", f"  gap #{gap.id} {text}")
    return gaps


def _mine(ws: Workspace, db: sqlite_utils.Database, say: DemoProgress) -> dict[str, Any]:
    from runner.research.miners import mine

    # A fork commit that edits the benchmark is queued too, so the runner refuses it on the record.
    report = mine(ws, db, queue_protected=True)
    say(
        "hypotheses",
        f"  {len(report.gap_added)} from backend gaps, {len(report.fork_added)} from fork commits"
        + (f" ({len(report.conflicts)} do not apply as they are)" if report.conflicts else ""),
    )
    if report.skipped:
        say("hypotheses", "  skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(report.skipped.items())))
    return report.to_json()


def _generate(
    ws: Workspace, db: sqlite_utils.Database, options: DemoOptions, say: DemoProgress
) -> dict[str, Any]:
    """With --model: hypotheses from the KB, then patches for every hypothesis that has none.
    Model trouble is reported and the demo goes on with what it has."""
    from runner.llm import LLMError, client_for
    from runner.research.generate import generate
    from runner.research.patch_writer import write_patches

    out: dict[str, Any] = {"model": options.model, "error": None}
    try:
        client = client_for(db, ws.settings.llm, model=options.model, api_base=options.api_base)
        say("hypotheses", f"  asking {options.model} for hypotheses grounded in the knowledge base")
        report = generate(ws, db, client, n=options.llm_hypotheses)
        out["generated"] = report.to_json()
        say(
            "hypotheses",
            f"  the model proposed {len(report.added)} new, merged {len(report.merged)}, "
            f"{len(report.rejected)} rejected",
        )
        say("hypotheses", f"  asking {options.model} to write patches for hypotheses that have none")
        outcomes = write_patches(ws, db, client)
        out["patches"] = [o.to_json() for o in outcomes]
        for o in outcomes:
            say(
                "hypotheses",
                f"  hypothesis {o.hypothesis_id}: {o.status}" + (f" ({o.reason})" if o.reason else ""),
            )
    except LLMError as exc:
        out["error"] = str(exc)
        say("hypotheses", f"  model unavailable, going on without it: {exc}")
    return out
