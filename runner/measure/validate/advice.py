"""Advice with numbers: the noise (short calls, the resolution, more or longer samples), the local
fleet's parallelism against the cores, and the timeouts against what the steps took."""

from __future__ import annotations

import math
import os
from typing import Any

from kb.config import Settings
from runner import stats
from runner.measure.validate.model import Finding, Measurement, MetricFigures

#: Below this a benchmark call is short: start-up, timer resolution and scheduling weigh in.
SHORT_CALL_SECONDS = 1.0
#: The advice says which true gain is kept this often by the cap.
KEEP_POWER = 0.8
#: The standard error of the median of n samples is about this times theirs over sqrt(n).
MEDIAN_SE = 1.25


def noise_advice(
    m: Measurement,
    main: MetricFigures,
    policy: stats.Policy,
    call_seconds: float | None,
    problems: list[Finding],
    advice: list[Finding],
) -> None:
    samples: int | None = None
    if m.scaffold:  # what ran: AR_SAMPLES in [target.env] overrides the script's default
        samples = round(main.samples_per_call) if main.samples_per_call >= 1 else m.scaffold.get("samples")
    knob = (
        f"more runs per call (AR_SAMPLES in [target.env]; the scaffold runs the command {samples} times)"
        if samples
        else "more samples per call in the benchmark script (their median is the call's value)"
    )
    if _between_calls(main):  # more samples per call would not help: say what would
        knob = (
            "a longer workload per sample or a quieter machine (the calls vary more than their "
            "samples explain)"
        )
    if call_seconds is not None and call_seconds < SHORT_CALL_SECONDS:
        factor = math.ceil(SHORT_CALL_SECONDS / max(call_seconds, 1e-3))
        how = (
            f'AR_SAMPLES = "{samples * factor}" in [target.env] (the scaffold runs the command {samples} '
            "times per call now)"
            if samples
            else "more samples per call in the benchmark script"
        )
        advice.append(
            Finding(
                "short_call",
                f"a benchmark call takes {call_seconds:.2f} s: in calls under {SHORT_CALL_SECONDS:.0f} s, "
                f"process start-up, timer resolution and scheduling weigh in; make a call about "
                f"{factor}x longer: {how}, or a bigger workload",
                {"seconds": call_seconds, "factor": factor},
            )
        )
    if main.floor is None or main.pair_sd is None:
        advice.append(
            Finding(
                "few_calls",
                "too few benchmark calls to estimate the noise: autoresearch validate --runs 6",
            )
        )
        return
    pair_time = 2 * (call_seconds or 0.0)
    needed = main.pairs_for_min_effect
    rough = f" (from {len(main.per_call)} calls: a rough figure; --runs 10 for a firmer one)"
    if main.floor > policy.min_effect:
        fixes = [f"raise policy.min_effect to {math.ceil(main.floor * 1000) / 10:.1f}%"]
        if needed is not None:
            fixes.append(
                f"raise policy.max_pairs to {needed} (about {minutes(needed * pair_time)} per experiment)"
            )
        fixes.append(f"lower the noise: {knob}")
        problems.append(
            Finding(
                "too_noisy_for_min_effect",
                f"policy.min_effect {policy.min_effect:.1%} is below what this benchmark resolves in "
                f"{policy.max_pairs} pairs: ±{main.floor:.1%} "
                f"(calls vary by {pct(main.call_noise)}){rough}; "
                "even a patch that changes nothing could not be discarded, and every experiment would "
                "end inconclusive. Either " + ", or ".join(fixes),
                {"floor": main.floor, "min_effect": policy.min_effect, "pairs_needed": needed},
            )
        )
    else:
        advice.append(
            Finding(
                "resolution",
                f"in {policy.max_pairs} pairs (about {minutes(policy.max_pairs * pair_time)} of benchmark "
                f"per experiment) this resolves ±{main.floor:.2%}; a true gain of {main.keepable:.1%} is "
                f"kept {KEEP_POWER:.0%} of the time; policy.min_effect {policy.min_effect:.1%} fits" + rough,
                {"floor": main.floor, "keepable": main.keepable},
            )
        )
    # More samples per call help only as far as the calls vary by what their samples explain.
    if main.sample_noise and main.call_noise is not None and main.samples_per_call >= 1:
        if _between_calls(main):
            advice.append(
                Finding(
                    "between_call_noise",
                    f"calls differ by {main.call_noise:.1%}, more than their samples' own spread "
                    f"({main.sample_noise:.1%} over {main.samples_per_call:.0f} samples) explains: more "
                    "samples per call will not help much; a longer workload per sample, a quieter "
                    "machine or pinned CPU frequency will",
                )
            )
        elif main.floor > policy.min_effect and samples:
            want = max(samples + 1, math.ceil(samples * (main.floor / max(policy.min_effect, 1e-6)) ** 2))
            if want > 4 * samples:  # past a few times more, a longer measurement per run is the way
                advice.append(
                    Finding(
                        "longer_samples",
                        f"the samples themselves vary by {main.sample_noise:.1%}: more runs per call would "
                        f"need about {want} to bring the floor near {policy.min_effect:.1%}; make each run "
                        "measure longer (a bigger workload between the timer reads) and the machine quieter",
                        {"samples": want},
                    )
                )
                return
            advice.append(
                Finding(
                    "more_samples",
                    f"the calls vary as their samples do ({main.sample_noise:.1%} per sample): "
                    f'AR_SAMPLES = "{want}" in [target.env] would bring the floor near '
                    f"{policy.min_effect:.1%}",
                    {"samples": want},
                )
            )


def _between_calls(main: MetricFigures) -> bool:
    """Do the calls vary clearly more than the medians of their samples would by chance?"""
    if not main.sample_noise or main.call_noise is None or main.samples_per_call < 1:
        return False
    explained = MEDIAN_SE * main.sample_noise / math.sqrt(main.samples_per_call)
    return main.call_noise > 1.5 * explained and main.call_noise > 0.005


def hidden_advice(m: Measurement, advice: list[Finding]) -> None:
    """The programs the steps cannot see (validate/hidden.py), one finding per folder to expose."""
    by_folder: dict[str, list[dict[str, Any]]] = {}
    for tool in m.hidden_tools:
        by_folder.setdefault(str(tool["expose"]), []).append(tool)
    for folder, tools in by_folder.items():
        found = ", ".join(f"`{t['name']}` is {t['found']}" for t in tools)
        instead = ", ".join(f"{t['instead'] or 'no ' + t['name']}" for t in tools)
        advice.append(
            Finding(
                "hidden_tool",
                f"in this shell {found}, inside {tools[0]['under']}, which the sandbox hides from every "
                f"step: the steps run {instead} instead. To run the same, add "
                f'sandbox.expose = ["{folder}"] (read-only in the steps) and validate again',
                {"expose": folder, "tools": tools},
            )
        )


def fleet_advice(
    m: Measurement,
    backend: str,
    workers: int,
    busy: float | None,
    problems: list[Finding],
    advice: list[Finding],
) -> None:
    if backend != "local":
        return
    cores = os.cpu_count() or m.cores
    if workers > cores:
        fits = max(1, cores // max(1, round(busy or 1)))
        problems.append(
            Finding(
                "parallel_above_cores",
                f"fleet.parallel = {workers} local workers on {cores} cores: benchmarks would share "
                f"cores and measure each other; set fleet.parallel = {fits} (or run --parallel {fits})",
                {"parallel": workers, "cores": cores},
            )
        )
        return
    if busy is None:
        return
    threads = max(1, round(busy))
    fits = max(1, cores // threads)
    if workers * threads > cores:
        advice.append(
            Finding(
                "parallel_threads",
                f"a benchmark call keeps about {busy:.1f} cores busy; {workers} workers need about "
                f"{workers * threads} of the {cores} cores: set fleet.parallel = {fits}",
                {"cores_busy": busy, "fits": fits},
            )
        )
    elif workers < fits and workers * threads < cores - 1:
        advice.append(
            Finding(
                "parallel_room",
                f"a benchmark call keeps about {busy:.1f} cores busy and {cores} cores are here: "
                f"fleet.parallel = {fits} would run more experiments at once (at some cost in noise: "
                "builds and the other workers share the memory bus)",
                {"cores_busy": busy, "fits": fits},
            )
        )


def timeout_advice(
    m: Measurement, settings: Settings, problems: list[Finding], advice: list[Finding]
) -> None:
    t = settings.timeouts
    longest_call = max((c.seconds for c in m.calls if c.seconds is not None), default=None)
    if longest_call is not None and longest_call * 3 > t.bench:
        advice.append(
            Finding(
                "bench_timeout",
                f"the longest benchmark call took {longest_call:.1f} s and timeouts.bench is {t.bench} s: "
                f"a loaded machine can pass it; set timeouts.bench = {math.ceil(longest_call * 5)}",
            )
        )
    for step in m.steps:
        limit = t.build if step.name.startswith("build") else t.check if step.name == "checks" else None
        key = "build" if step.name.startswith("build") else "check"
        if limit is not None and step.seconds is not None and step.seconds * 2 > limit:
            advice.append(
                Finding(
                    f"{key}_timeout",
                    f"{step.name} took {step.seconds:.0f} s and timeouts.{key} is {limit} s; a loaded "
                    f"machine can pass it: set timeouts.{key} = {math.ceil(step.seconds * 4)}",
                )
            )


def secs(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} s"


def pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.1%}"


def num(value: float) -> str:
    return f"{value:.4g}"


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
