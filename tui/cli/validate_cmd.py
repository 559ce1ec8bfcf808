"""`autoresearch validate`: build, benchmark and checks tried on the baseline, with advice."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from tui.cli.common import echo, echo_json, json_option, workspace

if TYPE_CHECKING:
    from runner.measure.validate import MetricFigures, Report


@click.command("validate")
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Benchmark calls (rounded up to whole A/B pairs, as a run measures them).",
)
@click.option(
    "--accept-parse",
    is_flag=True,
    help="The matched output lines shown are right: accept a regex that matches more than one number.",
)
@json_option
@click.pass_context
def cli(ctx: click.Context, runs: int, accept_parse: bool, as_json: bool) -> None:
    """Build the baseline, run the checks and the benchmark as an experiment runs them, and report.

    Per metric: its values with the output line each came from, the call's duration, the noise and
    the smallest effect this setup resolves within policy.max_pairs; then advice with numbers
    (samples per call, policy.min_effect, fleet.parallel against the cores, guards, timeouts).
    The result is stored in the workspace (validation.json): `autoresearch run` refuses to start
    while it failed, or after the scripts or the build changed, until validate passes again.
    Exits 1 when it found a problem.
    """
    from runner.measure.validate import evaluate, measure, save

    ws = workspace(ctx)

    def progress(line: str) -> None:
        echo(line, err=True)

    measurement = measure(ws, calls=runs, accept_parse=accept_parse, progress=progress)
    report = evaluate(measurement, ws.settings)
    path = save(ws, measurement, report)
    if measurement.status == "done":
        from runner import profile

        shares = profile.shares(c.profile for c in measurement.calls)
        if profile.record(ws.db(), measurement.baseline_commit, shares, "validate"):
            from runner.rank import rerank

            ranked = rerank(ws, ws.db())  # the hot functions now rank their hypotheses higher
            progress(
                f"profile: {len(shares)} functions recorded with the baseline; {ranked.ranked} ranked again"
            )
    if as_json:
        echo_json({"stored": str(path), "measurement": measurement.to_json(), "report": report.to_json()})
    else:
        _print(report, measurement.to_json(), str(path))
    if not report.passed:
        ctx.exit(1)


def _print(report: Report, measurement: dict[str, Any], stored: str) -> None:
    echo("")
    echo(f"baseline {measurement['baseline_commit'][:12]}; logs in {measurement['log_dir']}")
    for step in measurement["steps"]:
        state = "ok" if step["rc"] == 0 else f"exit {step['rc']}"
        took = "?" if step["seconds"] is None else f"{step['seconds']:.1f} s"
        echo(f"  {step['name']:10} {took:>9}  {state}")
    if report.call_seconds is not None:
        busy = "" if report.cores_busy is None else f", about {report.cores_busy:.1f} cores busy"
        echo(
            f"  {'benchmark':10} {report.call_seconds:>7.2f} s  per call (median of "
            f"{len(measurement['calls'])}){busy}"
        )
    for figures in report.metrics:
        _print_metric(figures)
    if report.problems:
        echo("")
        echo("Problems (`autoresearch run` refuses to start until they are fixed):")
        for finding in report.problems:
            echo(f"  - {finding.message}")
    if report.advice:
        echo("")
        echo("Advice:")
        for finding in report.advice:
            echo(f"  - {finding.message}")
    echo("")
    verdict = "passed" if report.passed else "FAILED"
    echo(f"validation {verdict}; stored in {stored}")


def _print_metric(f: MetricFigures) -> None:
    echo("")
    role = "primary" if f.primary else "secondary"
    echo(f"metric {f.name} ({role}): {len(f.values)} samples, {f.samples_per_call:.0f} per call")
    shown = " ".join(f"{v:.6g}" for v in f.values[:12]) + (" ..." if len(f.values) > 12 else "")
    echo(f"  values    {shown}")
    echo(f"  per call  {' '.join(f'{v:.6g}' for v in f.per_call)}")
    for example in f.examples:
        echo(f"  parsed    {example['metric_line']}")
        if example.get("source") is not None:
            echo(f"    from    {example.get('marked') or example['source']}")
    noise = []
    if f.sample_noise is not None:
        noise.append(f"{f.sample_noise:.2%} per sample")
    if f.call_noise is not None:
        noise.append(f"{f.call_noise:.2%} per call")
    if noise:
        echo(f"  noise     {', '.join(noise)}")
    if f.floor is not None and f.keepable is not None:
        echo(f"  resolves  ±{f.floor:.2%} by the cap; a true +{f.keepable:.1%} is kept 80% of the time")
