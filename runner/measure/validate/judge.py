"""Judging a measurement under the current settings: per-metric figures (noise, the resolution in
`policy.max_pairs` pairs) and the problems (`run` refuses) and advice (numbers to act on)."""

from __future__ import annotations

import math
import statistics

from kb.config import Settings
from kb.vocabulary import reads_like_time
from runner import stats
from runner.fleet.registry import configured
from runner.measure.common import policy_of
from runner.measure.validate.advice import (
    KEEP_POWER,
    MEDIAN_SE,
    fleet_advice,
    hidden_advice,
    noise_advice,
    num,
    secs,
    timeout_advice,
)
from runner.measure.validate.model import Call, Finding, Measurement, MetricFigures, Report
from runner.measure.validate.parsing import parse_check

#: Metrics the research phase reads (memory- or compute-bound), never worth a guard.
RESEARCH_METRICS = ("bytes_per_iter", "mem_bw_gbs")


def _log_sd(values: list[float]) -> float | None:
    logs = [math.log(v) for v in values if v > 0]
    if len(logs) < 2 or len(logs) != len(values):
        return None
    return statistics.stdev(logs)


def _figures(name: str, primary: bool, calls: list[Call], policy: stats.Policy) -> MetricFigures:
    per_call_samples = [[s.value for s in c.samples if s.metric == name] for c in calls]
    per_call_samples = [v for v in per_call_samples if v]
    values = [v for vs in per_call_samples for v in vs]
    per_call = [stats.side_value(vs) for vs in per_call_samples]
    within = [n for n in (stats.noise(vs) for vs in per_call_samples) if n is not None]
    sample_noise = math.sqrt(sum(n * n for n in within) / len(within)) if within else None
    samples_per_call = len(values) / len(per_call_samples) if per_call_samples else 0.0
    sd = _log_sd(per_call)
    if sd is not None and sample_noise is not None and samples_per_call >= 1:
        # A call's median varies at least as the median of its samples does by chance: a spread of
        # the calls below that is the luck of a few calls, or a number printed with few digits
        # (6.48 GB/s in every call while the samples vary by 2%). A run's pairs would see more.
        sd = max(sd, MEDIAN_SE * sample_noise / math.sqrt(samples_per_call))
    pair_sd = sd * math.sqrt(2) if sd is not None else None
    figures = MetricFigures(
        name=name,
        primary=primary,
        values=values,
        per_call=per_call,
        samples_per_call=samples_per_call,
        sample_noise=sample_noise,
        call_noise=stats.noise(per_call),
        pair_sd=pair_sd,
    )
    if pair_sd is not None:
        res = stats.resolution(pair_sd, policy, power=KEEP_POWER)
        figures.floor, figures.keepable = res.floor, res.keepable
        figures.pairs_for_min_effect = stats.pairs_to_resolve(pair_sd, policy.min_effect, policy)
    seen: set[str] = set()
    for call in calls:
        for s in call.samples:
            key = s.source if s.source is not None else s.line
            if s.metric == name and key not in seen and len(figures.examples) < 3:
                seen.add(key)
                figures.examples.append({"value": s.value, "metric_line": s.line, "source": s.source})
    return figures


def evaluate(
    m: Measurement, settings: Settings, *, parallel: int | None = None, backend: str | None = None
) -> Report:
    """Problems (run refuses) and advice (numbers to act on) for a measurement under `settings`."""
    problems: list[Finding] = []
    advice: list[Finding] = []
    primary = settings.metric.primary
    policy = policy_of(settings)
    workers = parallel or settings.fleet.parallel
    fleet = configured(settings, backend).name
    log = m.log_dir
    for step in m.steps:
        if step.rc not in (0, None):
            why = "timed out" if step.rc in (124, 137) else f"exited {step.rc}"
            where = (
                f"; the command is target.build_cmd = {settings.target.build_cmd!r} in autoresearch.toml"
                if step.name.startswith("build")
                else ""
            )
            problems.append(
                Finding(
                    f"{step.name}_failed",
                    f"{step.name} {why} after {secs(step.seconds)} (log: {log}); last lines: "
                    + " | ".join(step.tail[-5:])
                    + where,
                    {"rc": step.rc, "tail": step.tail},
                )
            )
    hidden_advice(m, advice)
    for call in m.calls:
        if call.rc != 0:
            why = "timed out" if call.rc in (124, 137) else f"exited {call.rc}"
            problems.append(
                Finding(
                    "benchmark_failed",
                    f"benchmark call {call.pair}{call.side} {why} after {secs(call.seconds)} (log: {log}): "
                    + " | ".join(call.tail[-5:]),
                    {"rc": call.rc, "tail": call.tail},
                )
            )
            break
        if call.rejected:
            problems.append(
                Finding(
                    "malformed_metric",
                    f"malformed METRIC line (the runner ignores it): {call.rejected[0]}",
                    {"lines": call.rejected},
                )
            )
            break
    if m.status == "failed" and not problems:
        problems.append(Finding(f"{m.reason}_failed", f"the {m.reason} step failed (log: {log})"))
    names = list(dict.fromkeys(s.metric for c in m.calls for s in c.samples))
    good_calls = [c for c in m.calls if c.rc == 0]
    if good_calls and len(good_calls) == len(m.calls) and primary not in names:
        problems.append(
            Finding(
                "no_primary_metric",
                f"the benchmark printed no METRIC {primary}="
                + (
                    f" (it printed {', '.join(names)}: set metric.primary)"
                    if names
                    else " nor any METRIC line"
                ),
                {"printed": names},
            )
        )
    figures = [
        _figures(n, n == primary, good_calls, policy) for n in sorted(names, key=lambda n: n != primary)
    ]
    seconds = [c.seconds for c in good_calls if c.seconds is not None]
    call_seconds = statistics.median(seconds) if seconds else None
    busy = (
        m.bench_cpu_seconds / m.bench_wall_seconds
        if m.bench_cpu_seconds is not None and m.bench_wall_seconds
        else None
    )
    main = next((f for f in figures if f.primary), None)
    if main is not None and len(main.values) > 1 and len(set(main.values)) == 1:
        advice.append(
            Finding(
                "constant_metric",
                f"{main.name} is {num(main.values[0])} in all {len(main.values)} samples: a measured time "
                "or rate varies from run to run, a constant is usually a label or a count (check the "
                "parsed lines above)",
            )
        )
    if main is not None:
        parse_check(m, main, primary, problems, advice)
        if settings.metric.direction == "higher" and reads_like_time(main.name):
            advice.append(  # first of the noise's: a wrong direction keeps every slowdown
                Finding(
                    "direction",
                    f"metric.direction is `higher` but {main.name!r} reads like a time: if smaller is "
                    'better set metric.direction = "lower" (else a run keeps what makes it slower)',
                )
            )
        noise_advice(m, main, policy, call_seconds, problems, advice)
    fleet_advice(m, fleet, workers, busy, problems, advice)
    timeout_advice(m, settings, problems, advice)
    guarded = {g.metric for g in settings.metric.guards}
    for f in figures:
        if f.primary or f.name in guarded or f.name in RESEARCH_METRICS:
            continue
        advice.append(
            Finding(
                "guard",
                f"the benchmark also prints {f.name} (median {num(statistics.median(f.values))}): "
                f"to keep it from regressing while {primary} improves, add "
                f'[[metric.guards]] metric = "{f.name}" max_regression = 0.02 '
                "(guards move the same way as the primary metric)",
                {"metric": f.name},
            )
        )
    for g in settings.metric.guards:
        if m.calls and g.metric not in names:
            problems.append(
                Finding("guard_missing", f"metric.guards names {g.metric}, which the benchmark never printed")
            )
    if m.no_checks:
        advice.append(
            Finding(
                "no_checks",
                "the checks script checks nothing: a fast but wrong patch can be kept; give it a command "
                "that fails on a wrong result (the tree's tests, a comparison with the baseline's output)",
            )
        )
    return Report(
        passed=not problems,
        problems=problems,
        advice=advice,
        metrics=figures,
        call_seconds=call_seconds,
        cores_busy=round(busy, 2) if busy is not None else None,
        parallel=workers,
        backend=fleet,
    )
