"""`autoresearch history`, `report`, `redecide` and `import`: past runs, offline.

Each command opens the workspace database in its own process and only reads, except `import` and
`redecide --save`, which write in one transaction.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kb.textsafe import utc_time
from kb.vocabulary import STOP_MEANINGS, gain_words, help_epilog, legend
from runner.stats import cell_interval, cell_pct
from tui.cli.common import echo, echo_json, echo_table, json_option, workspace
from tui.cli.params import TEXT, Number, PathArg, count

if TYPE_CHECKING:
    import sqlite_utils

    from runner.record.history import RunInfo


def _when(ts: float | None) -> str:
    return utc_time(ts, none="")


def _short(sha: str | None) -> str:
    return (sha or "")[:12]


def _print_run(db: sqlite_utils.Database, run: RunInfo, *, with_samples: bool) -> None:
    from runner.record import history

    stopped = f" ({run.stop_reason}: {STOP_MEANINGS.get(run.stop_reason, '')})" if run.stop_reason else ""
    echo(f"Run {run.id} {run.name}: {run.status}{stopped}")
    echo(f"  started {_when(run.started_at)}, ended {_when(run.ended_at) or '-'}")
    if run.imported_from:
        from runner.record.import_summary import summary_lines

        echo(f"  imported from {run.imported_from}")
        for line in summary_lines(run.summary):
            echo(f"  {line}")
    if run.branch:
        echo(f"  branch {run.branch}: {_short(run.baseline_commit)} -> {_short(run.head_commit)}")
    if run.policy:
        echo(f"  policy {run.policy_shown}")
    if run.self_test:
        passed = run.self_test.get("passed")
        echo(
            f"  self-test {'passed' if passed else 'failed' if passed is False else '?'}: "
            f"noise floor ±{cell_pct(run.noise_floor).lstrip('+')}"
        )
    exps = history.experiments(db, run.id)
    isolation = history.isolation_summary(exps)
    if isolation:
        echo(f"  isolation {isolation}")
    echo("")
    wave_rows = history.waves(db, run.id)
    if wave_rows:
        echo_table(
            ["WAVE", "BASELINE", "STATUS", "EXPERIMENTS", "KEPT", "STARTED"],
            [
                (w.number, _short(w.baseline_commit), w.status, w.experiments, w.kept, _when(w.started_at))
                for w in wave_rows
            ],
        )
        echo("")
    echo_table(
        ["ID", "WAVE", "KIND", "STATUS", "VERDICT", "EFFECT", "CI", "PAIRS", "TITLE"],
        [
            (
                e.id,
                e.wave if e.wave is not None else "-",
                e.kind,
                e.status
                + (f": {e.reason}" if e.reason else "")
                + (f" ({e.phase})" if e.status == "running" else ""),
                e.decision.verdict if e.decision else "",
                history.effect_cell(e),
                cell_interval(*e.ci),
                e.pairs or "",
                e.title,
            )
            for e in exps
        ],
    )
    if any(e.effect is not None for e in exps):
        direction = str(run.policy.get("direction") or "higher")
        echo(f"  EFFECT: the {gain_words(run.metric or 'the primary metric', direction)}")
    meanings = legend(e.status for e in exps)
    if meanings:  # what each status word in the table means, one line each
        echo("")
        echo("Statuses:")
        for line in meanings:
            echo(f"  {line}")
    winners = history.winners(db, run.id)
    if winners:
        echo("")
        echo("Winners:")
        for w in winners:
            echo(f"  {w['position']}. {_short(w['commit_sha'])} #{w['experiment_id']} {w['title']}")
            echo(f"     {w['patch_file']}")
    if with_samples:
        for e in exps:
            found = history.samples(db, e.id)
            if not found:
                continue
            echo("")
            echo(f"Samples of #{e.id} {e.title}:")
            echo_table(
                ["PAIR", "SIDE", "METRIC", "SEQ", "VALUE"],
                [(s.pair, s.side, s.metric, s.seq, s.value) for s in found],
            )


@click.command("history", epilog=help_epilog())
@click.option("--run", "run_ref", type=TEXT, default=None, help="A run id or name (default: list every run).")
@click.option("--samples", is_flag=True, help="Also print the raw samples (always in --json).")
@json_option
@click.pass_context
def history(ctx: click.Context, run_ref: str | None, samples: bool, as_json: bool) -> None:
    """Runs, waves, experiments, decisions and raw samples.

    Without --run, one line per run; with --run, the run's waves, experiments (status, verdict,
    effect, interval, pairs) and winners. --json prints everything, raw samples included; every
    experiment carries id, title, status, effect, ci, pairs, hypothesis, sources and log_dir.
    """
    from runner.record import history as hist

    ws = workspace(ctx)
    db = ws.db()
    if as_json:
        run_id = hist.find_run(db, run_ref).id if run_ref is not None else None
        echo_json(hist.history_json(db, run_id))
        return
    if run_ref is not None:
        _print_run(db, hist.find_run(db, run_ref), with_samples=samples)
        return
    found = hist.runs(db)
    if not found:
        echo("No runs yet. Start one with: autoresearch run")
        return
    echo_table(
        ["ID", "NAME", "STATUS", "STARTED", "WAVES", "EXPERIMENTS", "KEPT", "WINNERS", "NOISE FLOOR"],
        [
            (
                r.id,
                r.name,
                r.status
                + (" (imported)" if r.imported_from else "")
                + (f" ({r.stop_reason})" if r.stop_reason else ""),
                _when(r.started_at),
                r.waves,
                r.experiments,
                r.kept,
                r.winners,
                cell_pct(r.noise_floor).lstrip("+"),
            )
            for r in found
        ],
    )


@click.command("report")
@click.argument("run_ref", type=TEXT, metavar="RUN")
@click.option("--format", "fmt", type=click.Choice(["md", "html"]), default="md", show_default=True)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Report file (default: the workspace's reports/<run>.<format>).",
)
@json_option
@click.pass_context
def report(ctx: click.Context, run_ref: str, fmt: str, output: Path | None, as_json: bool) -> None:
    """Write RUN's report: runs, waves and experiments tables, a plot of the primary metric's effect
    per experiment with its interval, the self-test noise floor, the final stack and ablation, and
    the provenance of every winner."""
    from runner.record.report import write_report

    ws = workspace(ctx)
    written = write_report(ws, ws.db(), run_ref, fmt=fmt, output=output)
    if as_json:
        echo_json({"report": str(written.path), "plot": str(written.plot) if written.plot else None})
        return
    echo(f"Wrote {written.path}")
    if written.plot:
        echo(f"  plot {written.plot}")


def _fallback_policy(ctx: click.Context) -> dict[str, Any]:
    """The workspace config's policy and metric, for runs whose stored policy lacks a key."""
    from runner.record.redecide import fallback_policy

    return fallback_policy(workspace(ctx).settings)


@click.command("redecide")
@click.argument("run_ref", type=TEXT, metavar="RUN")
@click.option("--min-effect", type=Number(), default=None, help="Smallest effect worth keeping (0.01 = 1%).")
@click.option(
    "--alpha", type=Number(), default=None, help="Error rate (false keeps controlled across a wave)."
)
@click.option("--max-pairs", type=count(), default=None, help="The cap on pairs per experiment.")
@click.option("--save", is_flag=True, help="Store the new verdicts (origin redecide, not final).")
@click.option("--all", "show_all", is_flag=True, help="List every experiment, not only the flips.")
@click.option(
    "--check",
    is_flag=True,
    help="Replay every look the run recorded through the same judge, on the same samples; exit 1 "
    "if any differs.",
)
@json_option
@click.pass_context
def redecide(
    ctx: click.Context,
    run_ref: str,
    min_effect: float | None,
    alpha: float | None,
    max_pairs: int | None,
    save: bool,
    show_all: bool,
    check: bool,
    as_json: bool,
) -> None:
    """Re-decide every experiment of RUN from its stored samples under another policy; list what
    flips (old verdict -> new verdict). The run's own decisions and statuses are never changed.

    With --check, nothing is re-decided: every look the loop recorded is judged again from the
    stored samples, with the policy, guards and wave it was judged with, and must come out the same."""
    from runner.record.redecide import format_flip
    from runner.record.redecide import redecide as run_redecide

    ws = workspace(ctx)
    if check:
        if min_effect is not None or alpha is not None or max_pairs is not None or save:
            raise click.UsageError(
                "--check replays the run's own policy: it takes no policy option or --save"
            )
        _check(ws.db(), run_ref, as_json)
        return
    result = run_redecide(
        ws.db(),
        run_ref,
        min_effect=min_effect,
        alpha=alpha,
        max_pairs=max_pairs,
        save=save,
        fallback_policy=_fallback_policy(ctx),
    )
    if as_json:
        echo_json(result.to_json())
        return
    p = result.policy
    echo(
        f"Run {result.run.name}: {len(result.items)} experiments re-decided on {result.metric} "
        f"(min_effect {p.min_effect:.2%}, alpha {p.alpha}, max_pairs {p.max_pairs}): "
        f"{len(result.flips)} flip(s)"
    )
    for item in result.items if show_all else result.flips:
        echo(("  * " if item.flipped else "    ") + format_flip(item))
    if result.skipped:
        echo(f"  {len(result.skipped)} not re-decided:")
        for why, n in Counter(str(s["why"]) for s in result.skipped).most_common():
            echo(f"    {n} x {why}")
    if save:
        echo(f"  saved {result.saved} decisions (origin redecide)")


def _check(db: Any, run_ref: str, as_json: bool) -> None:
    from runner.record.redecide import check

    result = check(db, run_ref)
    if as_json:
        echo_json(result.to_json())
    else:
        echo(
            f"Run {result.run.name}: {len(result.replays)} recorded looks replayed, "
            f"{len(result.mismatches)} differ"
            + (
                f"; {result.unchecked} recorded without their wave (not replayable)"
                if result.unchecked
                else ""
            )
            + (f"; {len(result.unverifiable)} whose samples were withdrawn" if result.unverifiable else "")
        )
        for r in result.mismatches:
            echo(f"  * exp {r.experiment_id} look at {r.pairs} pairs (decision {r.decision_id}): {r.why}")
    if result.mismatches:
        sys.exit(1)


def _skipped(kind: str, n: int) -> str:
    """The lines the import left out on purpose, by result.ignored's key: a line type pi-autoresearch
    skips too (hook, finalize), `comment` or `status WORD` (a status word that means skip)."""
    if kind == "comment":
        return f"{n} comment lines (#) skipped"
    if kind.startswith("status "):
        return f"{n} lines of status {kind.removeprefix('status ')!r} skipped"
    return f"{n} {kind} lines skipped as pi-autoresearch skips them"


@click.command("import")
@click.argument("file", type=PathArg(dir_okay=False, path_type=Path))
@click.option("--name", type=TEXT, default=None, help="Run name (default: import-<config name>).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "jsonl", "tsv"]),
    default="auto",
    show_default=True,
    help="jsonl: pi-autoresearch's autoresearch.jsonl / .auto/log.jsonl; tsv: karpathy/autoresearch's "
    "results.tsv; auto: a .tsv file or a tab-separated header is tsv.",
)
@click.option(
    "--lenient", is_flag=True, help="Skip malformed lines (a warning each) instead of importing nothing."
)
@click.option("--metric", default=None, help="results.tsv: the primary metric column (default: the first).")
@click.option(
    "--direction",
    type=click.Choice(["higher", "lower"]),
    default=None,
    help="results.tsv: which way is better (default: the log's `# metric_direction` comment, else the way "
    "its keeps moved the metric, else lower, as val_bpb).",
)
@click.option(
    "--status",
    "status_words",
    multiple=True,
    metavar="WORD=STATUS",
    help="What a status word of the log means: keep, discard, crash, checks_failed or skip (not "
    "imported). Repeatable; wins over the words the import knows (baseline, revert, timeout, ...).",
)
@json_option
@click.pass_context
def import_(
    ctx: click.Context,
    file: Path,
    name: str | None,
    fmt: str,
    lenient: bool,
    metric: str | None,
    direction: str | None,
    status_words: tuple[str, ...],
    as_json: bool,
) -> None:
    """Import another loop's log into the history: a pi-autoresearch autoresearch.jsonl (or
    .auto/log.jsonl; also the SkyPilot example's) or a karpathy/autoresearch results.tsv. One run
    per config segment, its lines as experiments with a single sample each."""
    from runner.record.importer import import_log
    from runner.record.logformats import cap

    statuses: dict[str, str] = {}
    for pair in status_words:
        word, sep, status = pair.rpartition("=")
        if not sep or not word.strip():
            raise click.BadParameter(
                f"{pair!r}: write WORD=STATUS, e.g. tentative=keep", param_hint="--status"
            )
        statuses[word] = status
    ws = workspace(ctx)
    result = import_log(
        ws.db(),
        file,
        name=name,
        fmt=fmt,
        lenient=lenient,
        metric=metric,
        direction=direction,
        statuses=statuses,
    )
    for s in result.skipped:
        echo(f"warning: {result.path}:{s.line}: {cap(s.reason, 300)}; {s.action}", err=True)
    if as_json:
        echo_json(result.to_json())
        return
    for r in result.runs:
        pi = "" if r.pi_confidence is None else f"; pi confidence {r.pi_confidence:.1f}x"
        echo(
            f"Imported run {r.id} {r.name}: {r.experiments} experiments, {r.kept} kept "
            f"({r.metric}, {r.direction} is better{pi})"
        )
    echo(
        f"{result.lines} lines read ({result.format}), {result.imported_lines} imported as experiments"
        + "".join(f", {_skipped(kind, n)}" for kind, n in result.ignored.items())
        + "".join(f", {n} malformed lines {action} (--lenient)" for action, n in result.malformed.items())
    )
    for note, n in sorted(result.notes.items(), key=lambda item: -item[1]):
        echo(f"  {n} x {note}")
    echo("Browse with: autoresearch history --run NAME; re-analyse with: autoresearch redecide NAME")
