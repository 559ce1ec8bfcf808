"""`autoresearch validate`: build, benchmark and checks tried on the baseline, with advice.

    measurement = measure(ws, calls=4, progress=print)   # runs the template's jobs on the baseline
    report = evaluate(measurement, ws.settings)           # problems and advice, with numbers
    save(ws, measurement, report)                         # validation.json in the workspace
    gate(ws, parallel=None, backend=None)                 # what `run` checks before it starts

The baseline is checked out once (runner/harness/prepare.py, the scripts placed as in every experiment),
and the experiment template runs exactly as the local fleet runs it, in two jobs like a run's
batches: the first builds the tree and runs the checks (no pairs), the second runs the benchmark
in pairs (A B, B A) with the builds cached; both sides are the same tree. So what validate sees is
what the A/A self-test will see, minus a second build.

The measurement (what ran, every sample with the line it came from, durations, CPU time) is stored
with a fingerprint of what it depends on: the baseline, the build command, the environment, the
scripts and the template. `run` refuses to start when the fingerprint no longer matches (validate
again) or when the stored measurement, judged under the *current* settings, has problems: so
raising `policy.min_effect` or lowering `fleet.parallel` needs no new measurement.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import secrets
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kb import gitrepo
from kb.config import Settings
from kb.db import now
from kb.errors import UserError
from kb.workspace import Workspace
from runner import stats
from runner.fleet.local import WRAPPER, kill_session
from runner.harness import metric_filter
from runner.harness.prepare import A_DIR, prepare_workdir, remove_workdir, resolve_scripts, template_path
from runner.harness.protocol import MARKER_PREFIX, NUMBER, LogParser, LogState
from runner.harness.scaffold import has_no_checks, read_bench_script
from runner.harness.template import RenderedTask, default_template_text, load_template, render

Progress = Callable[[str], None]

VALIDATION_FILE = "validation.json"
VERSION = 1
DEFAULT_CALLS = 4
EXPERIMENT_ID = "validate"
#: Below this a benchmark call is short: start-up, timer resolution and scheduling weigh in.
SHORT_CALL_SECONDS = 1.0
#: Metrics the research phase reads (memory- or compute-bound), never worth a guard.
RESEARCH_METRICS = ("bytes_per_iter", "mem_bw_gbs")
_TIME_NAME = re.compile(r"(?i)(^|[_.])(time|ms|us|ns|sec|secs|seconds|latency|duration|elapsed)($|[_.])")
_JOB_MARGIN = 120
#: The advice says which true gain is kept this often by the cap.
KEEP_POWER = 0.8


# --- what ran ------------------------------------------------------------------------------------


@dataclass
class Sample:
    metric: str
    value: float
    line: str
    """The METRIC line as printed."""
    source: str | None
    """For scaffolded scripts: the command's own output line the regex matched."""


@dataclass
class Call:
    """One benchmark invocation."""

    pair: int
    side: str
    rc: int
    seconds: float | None
    samples: list[Sample] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    """Malformed METRIC lines, with the reason."""
    tail: list[str] = field(default_factory=list)
    """Its last output lines (kept when it failed)."""
    profile: dict[str, float] = field(default_factory=dict)
    """Its PROFILE lines: symbol -> share of the call's time (optional; runner/profile.py)."""


@dataclass
class StepResult:
    name: str
    rc: int | None
    seconds: float | None
    tail: list[str] = field(default_factory=list)


@dataclass
class Measurement:
    fingerprint: str
    inputs: dict[str, Any]
    baseline_commit: str
    created_at: float
    calls_asked: int
    log_dir: str
    status: str
    """`done`, or `failed` with `reason` (setup, build, checks, benchmark, timeout)."""
    reason: str | None = None
    steps: list[StepResult] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    bench_cpu_seconds: float | None = None
    """CPU time of the benchmark job (its processes, all cores): / wall time = cores busy."""
    bench_wall_seconds: float | None = None
    scaffold: dict[str, Any] | None = None
    """The scaffolded benchmark's command, regex, metric and samples (None: a hand-written script)."""
    no_checks: bool = False
    accepted_parse: bool = False
    """The user looked at the matched lines and accepted them (`validate --accept-parse`)."""
    cores: int = 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        raw = dict(data)
        raw["steps"] = [StepResult(**s) for s in raw.get("steps", [])]
        raw["calls"] = [
            Call(**{**c, "samples": [Sample(**s) for s in c.get("samples", [])]})
            for c in raw.get("calls", [])
        ]
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**known)


# --- the fingerprint ------------------------------------------------------------------------------


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def inputs_of(ws: Workspace, settings: Settings) -> dict[str, Any]:
    """What a measurement depends on: change any of these and it must be made again."""
    repo = gitrepo.open_repo(ws.mirror_path)
    baseline = settings.target.baseline_commit or gitrepo.resolve(repo, settings.target.baseline)
    scripts = resolve_scripts(ws, settings)
    found: dict[str, Any] = {
        "baseline_commit": baseline,
        "build_cmd": settings.target.build_cmd,
        "env": dict(sorted(settings.target.env.items())),
    }
    for script in (scripts.bench, scripts.checks):
        if script.source is not None:
            content: bytes | None = script.source.read_bytes()
            where = "workspace"
        else:
            text = gitrepo.show_file(repo, baseline, script.path)
            content = text.encode() if text is not None else None
            where = "tree"
        found[f"{script.role}_script"] = {
            "path": script.path,
            "from": where,
            "sha256": _sha(content) if content is not None else None,
        }
    template = template_path(ws, settings)
    try:
        text = template.read_text(encoding="utf-8") if template else default_template_text()
    except OSError:
        text = ""
    found["template"] = {
        "path": str(template) if template else "runner/harness/experiment.yaml",
        "sha256": _sha(text.encode()),
    }
    return found


def fingerprint(inputs: dict[str, Any]) -> str:
    return _sha(json.dumps(inputs, sort_keys=True).encode())


_INPUT_NAMES = {
    "baseline_commit": "target.baseline_commit",
    "build_cmd": "target.build_cmd",
    "env": "target.env",
    "benchmark_script": "the benchmark script",
    "checks_script": "the checks script",
    "template": "the experiment template",
}


def changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints' inputs, in words."""
    return [_INPUT_NAMES.get(k, k) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


# --- running the template ---------------------------------------------------------------------------


@dataclass
class _Job:
    rc: int | None
    cpu_seconds: float
    wall_seconds: float
    state: LogState
    lines: list[str]
    timed_out: bool


def _run_job(
    task: RenderedTask,
    job_dir: Path,
    log_path: Path,
    *,
    setup: bool,
    limit: float,
    parser: LogParser,
    progress: Progress,
) -> _Job:
    """Run one rendered task as the local fleet does, tailing its log into the parser."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "job.sh").write_text(WRAPPER, encoding="utf-8")
    (job_dir / "run.sh").write_text(task.run, encoding="utf-8")
    (job_dir / "task.yaml").write_text(task.to_yaml(), encoding="utf-8")
    if setup and task.setup.strip():
        (job_dir / "setup.sh").write_text(task.setup, encoding="utf-8")
    env = {
        **os.environ,
        **task.envs,
        # What a one-node SkyPilot job sees (the local fleet sets the same).
        "SKYPILOT_NODE_RANK": "0",
        "SKYPILOT_NUM_NODES": "1",
        "SKYPILOT_TASK_ID": f"autoresearch-validate-{job_dir.name}",
    }
    started = time.monotonic()
    with open(log_path, "ab") as log:
        child = subprocess.Popen(
            ["bash", str(job_dir / "job.sh"), str(job_dir), str(task.workdir)],
            cwd=job_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    reported = 0
    offset = 0
    timed_out = False
    status = 0
    usage = None
    try:
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            offset = _feed(log_path, offset, parser)
            reported = _report(parser.state, reported, progress)
            if pid:
                break
            if time.monotonic() - started > limit:
                timed_out = True
                kill_session(child.pid)
                _, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.1)
    except BaseException:
        kill_session(child.pid)
        with contextlib.suppress(ChildProcessError):
            os.wait4(child.pid, 0)
        raise
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting
    kill_session(child.pid)  # anything the job left behind in its session
    offset = _feed(log_path, offset, parser)
    parser.finish()
    _report(parser.state, reported, progress)
    cpu = (usage.ru_utime + usage.ru_stime) if usage is not None else 0.0
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    return _Job(child.returncode, cpu, time.monotonic() - started, parser.state, lines, timed_out)


def _feed(path: Path, offset: int, parser: LogParser) -> int:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return offset
    parser.feed(data)
    return offset + len(data)


def _report(state: LogState, reported: int, progress: Progress) -> int:
    """Say each step once it ended (builds, checks, benchmark calls)."""
    done = [s for s in state.steps if s.rc is not None]
    for step in done[reported:]:
        if step.cached:
            continue  # builds the template skips (the second job, and the side sharing the tree)
        took = f"{step.seconds:.2f} s" if step.seconds is not None else "?"
        outcome = "ok" if step.rc == 0 else f"exit {step.rc}"
        name = "build" if step.name.startswith("build") else step.name.replace("bench-", "call ")
        progress(f"  {name}: {outcome}, {took}")
    return len(done)


def _tail(lines: list[str], first: int, last: int | None, count: int = 15) -> list[str]:
    """A step's last output lines (log lines first..last, 1-based, markers left out)."""
    end = last if last is not None else len(lines)
    body = [ln for ln in lines[first : max(first, end - 1)] if not ln.startswith(MARKER_PREFIX)]
    return body[-count:]


def _calls(job: _Job) -> list[Call]:
    out: list[Call] = []
    steps = {s.name: s for s in job.state.steps}
    for inv in job.state.invocations:
        step = steps.get(f"bench-{inv.pair}-{inv.side}")
        first = step.first_line if step else 0
        call = Call(inv.pair, inv.side, inv.rc, inv.seconds)
        for s in inv.samples:
            text = job.lines[s.line - 1] if 0 < s.line <= len(job.lines) else ""
            source = None
            for back in range(s.line - 2, first - 1, -1):  # the nearest `# matched:` line above
                if back < 0 or back >= len(job.lines):
                    break
                if job.lines[back].startswith(metric_filter.MATCHED):
                    source = job.lines[back][len(metric_filter.MATCHED) :]
                    break
                if job.lines[back].startswith(MARKER_PREFIX):
                    break
            call.samples.append(Sample(s.metric, s.value, text, source))
        call.rejected = [f"{r.text.strip()[:160]}: {r.reason}" for _line, r in inv.rejected]
        call.profile = {
            p.symbol: p.share for p in job.state.profile if (p.pair, p.side) == (inv.pair, inv.side)
        }
        if inv.rc != 0 or not inv.samples:
            call.tail = _tail(job.lines, first, step.last_line if step else None)
        out.append(call)
    return out


def measure(
    ws: Workspace,
    *,
    calls: int = DEFAULT_CALLS,
    accept_parse: bool = False,
    progress: Progress | None = None,
) -> Measurement:
    """Build, checks and `calls` benchmark calls (rounded up to whole pairs) on the baseline."""
    say: Progress = progress or (lambda _line: None)
    if calls < 1:
        raise UserError(f"--runs {calls}: must be at least 1")
    settings = ws.settings
    inputs = inputs_of(ws, settings)
    baseline = inputs["baseline_commit"]
    repo = gitrepo.open_repo(ws.mirror_path)
    scripts = resolve_scripts(ws, settings)
    template = load_template(template_path(ws, settings))
    pairs = math.ceil(calls / 2)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = ws.logs_dir / "validate" / stamp
    log_dir.mkdir(parents=True, exist_ok=True)
    workdir = ws.worktrees_dir / "validate"
    if workdir.exists():
        remove_workdir(repo, workdir)  # a validation killed before its clean-up
    say(f"validate: baseline {baseline[:12]}, checked out in {workdir}")
    try:
        prepare_workdir(repo, workdir, baseline, baseline, scripts)
        # One tree serves both sides: the pairs measure the baseline against itself, like the A/A
        # self-test, with one build instead of two.
        gitrepo.worktree_remove(repo, workdir / "b")
        (workdir / ".autoresearch").mkdir(exist_ok=True)
        (workdir / ".autoresearch" / f"built-{EXPERIMENT_ID}-B").touch()
        t = settings.timeouts

        def task(batch: int, count: int, checks: bool, nonce: str) -> RenderedTask:
            return render(
                template,
                name=f"ar-validate-b{batch}",
                workdir=workdir,
                envs={
                    **settings.target.env,
                    "EXPERIMENT_ID": EXPERIMENT_ID,
                    "EXPERIMENT_DESC": "validate: the baseline",
                    "BUILD_CMD": settings.target.build_cmd,
                    "BUILD_TIMEOUT": t.build,
                    "BENCH_TIMEOUT": t.bench,
                    "CHECK_TIMEOUT": t.check,
                    "BENCH_SCRIPT": scripts.bench.path,
                    "CHECKS_SCRIPT": scripts.checks.path,
                    "A_DIR": A_DIR,
                    "B_DIR": A_DIR,
                    "BATCH": batch,
                    "PAIR_START": 0,
                    "PAIRS": count,
                    "RUN_CHECKS": int(checks),
                    "AUTORESEARCH_NONCE": nonce,
                },
            )

        nonce = secrets.token_hex(8)
        say("  build and checks")
        first = _run_job(
            task(0, 0, True, nonce),
            log_dir / "jobs" / "build",
            log_dir / "build-and-checks.log",
            setup=True,
            limit=2 * (t.build + 5) + t.check + 5 + _JOB_MARGIN,
            parser=LogParser(nonce),
            progress=say,
        )
        result = Measurement(
            fingerprint=fingerprint(inputs),
            inputs=inputs,
            baseline_commit=baseline,
            created_at=now(),
            calls_asked=calls,
            log_dir=str(log_dir),
            status="done",
            accepted_parse=accept_parse,
            cores=os.cpu_count() or 1,
        )
        for step in first.state.steps:
            if step.cached:
                continue
            tail = _tail(first.lines, step.first_line, step.last_line) if step.rc else []
            result.steps.append(StepResult(step.name.replace("-A", ""), step.rc, step.seconds, tail))
        built = first.state.builds.get("A") == 0
        if not built or first.timed_out or (first.state.status != "done" and first.state.reason != "checks"):
            result.status, result.reason = "failed", _why(first, "build")
            if not result.steps:  # it died before any step: the setup, most likely
                result.steps.append(StepResult("setup", first.rc, first.wall_seconds, first.lines[-15:]))
        else:
            nonce = secrets.token_hex(8)
            say(f"  benchmark: {2 * pairs} calls ({pairs} pairs, as a run measures them)")
            second = _run_job(
                task(1, pairs, False, nonce),
                log_dir / "jobs" / "bench",
                log_dir / "benchmark.log",
                setup=False,
                limit=pairs * 2 * (t.bench + 5) + _JOB_MARGIN,
                parser=LogParser(nonce),
                progress=say,
            )
            result.calls = _calls(second)
            bench = [c.seconds for c in result.calls if c.seconds is not None]
            result.bench_cpu_seconds = round(second.cpu_seconds, 3)
            result.bench_wall_seconds = round(sum(bench), 3) if bench else None
            if first.state.status != "done":
                result.status, result.reason = "failed", "checks"
            elif second.timed_out or second.state.status != "done":
                result.status, result.reason = "failed", _why(second, "benchmark")
    finally:
        if workdir.exists():
            with contextlib.suppress(UserError):
                remove_workdir(repo, workdir)
    bench_text = _script_text(ws, repo, baseline, scripts.bench.source, scripts.bench.path)
    checks_text = _script_text(ws, repo, baseline, scripts.checks.source, scripts.checks.path)
    spec = read_bench_script(bench_text) if bench_text else None
    result.scaffold = asdict(spec) if spec else None
    result.no_checks = bool(checks_text and has_no_checks(checks_text))
    return result


def _why(job: _Job, default: str) -> str:
    if job.timed_out:
        return "timeout"
    return job.state.reason or default


def _script_text(ws: Workspace, repo: Any, baseline: str, source: Path | None, path: str) -> str | None:
    if source is not None:
        return source.read_text(encoding="utf-8", errors="replace")
    return gitrepo.show_file(repo, baseline, path)


# --- judging it -----------------------------------------------------------------------------------


@dataclass
class Finding:
    kind: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class MetricFigures:
    name: str
    primary: bool
    values: list[float]
    per_call: list[float]
    samples_per_call: float
    sample_noise: float | None
    """Per-sample coefficient of variation within a call (pooled over the calls)."""
    call_noise: float | None
    """Coefficient of variation of the calls' medians (what one side of a pair varies by)."""
    pair_sd: float | None
    """Estimated spread of a pair's log ratio: sqrt(2) x the calls' spread on the log scale."""
    floor: float | None = None
    keepable: float | None = None
    pairs_for_min_effect: int | None = None
    examples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Report:
    passed: bool
    problems: list[Finding]
    advice: list[Finding]
    metrics: list[MetricFigures]
    call_seconds: float | None
    cores_busy: float | None
    parallel: int
    backend: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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
    sd = _log_sd(per_call)
    pair_sd = sd * math.sqrt(2) if sd is not None else None
    figures = MetricFigures(
        name=name,
        primary=primary,
        values=values,
        per_call=per_call,
        samples_per_call=len(values) / len(per_call_samples) if per_call_samples else 0.0,
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


def parse_doubts(regex: str, primary: str, source: str) -> tuple[list[str], str]:
    """What makes a matched line doubtful for one regex: (problems, the line with the capture marked).

    A problem: the regex matches more than one place on the line (it takes the first, which may not
    be the one meant: the 14-vs-52 case), or a capture is only part of a number on the line."""
    pattern = re.compile(regex)
    problems: list[str] = []
    matches = list(pattern.finditer(source))
    got = metric_filter.metrics_of(source, pattern, primary) or []
    if len(matches) > 1:
        taken = ", ".join(repr(m.group(0)) for m in matches[:4])
        problems.append(f"the regex matches {len(matches)} places on the line ({taken}) and takes the first")
    numbers = [(m.start(), m.end()) for m in NUMBER.finditer(source)]
    for name, text, (start, end) in got:
        whole = next(((a, b) for a, b in numbers if a <= start < b or a < end <= b), None)
        if whole is not None and (whole[0] < start or whole[1] > end) and text.strip():
            problems.append(
                f"{name}: the capture {text!r} is part of the number {source[whole[0] : whole[1]]!r}"
            )
        elif (start > 0 and source[start - 1].isalpha()) or (end < len(source) and source[end].isalpha()):
            before = re.search(r"\w*\Z", source[:start])
            after = re.match(r"\w*", source[end:])
            word = (before.group(0) if before else "") + text + (after.group(0) if after else "")
            problems.append(
                f"{name}: the capture {text!r} is part of the word {word!r} (a label, not a result)"
            )
    marked = source
    for _name, _text, (start, end) in sorted(got, key=lambda g: -g[2][0]):
        marked = f"{marked[:start]}[{marked[start:end]}]{marked[end:]}"
    return problems, marked


def evaluate(
    m: Measurement, settings: Settings, *, parallel: int | None = None, backend: str | None = None
) -> Report:
    """Problems (run refuses) and advice (numbers to act on) for a measurement under `settings`."""
    problems: list[Finding] = []
    advice: list[Finding] = []
    primary = settings.metric.primary
    policy = stats.Policy(
        min_effect=settings.policy.min_effect,
        alpha=settings.policy.alpha,
        max_pairs=settings.policy.max_pairs,
        min_pairs=min(settings.policy.min_pairs, settings.policy.max_pairs),
        batch=settings.policy.batch_pairs,
        direction=settings.metric.direction,
    )
    workers = parallel or settings.fleet.parallel
    fleet = backend or settings.fleet.backend
    log = m.log_dir
    for step in m.steps:
        if step.rc not in (0, None):
            why = "timed out" if step.rc in (124, 137) else f"exited {step.rc}"
            problems.append(
                Finding(
                    f"{step.name}_failed",
                    f"{step.name} {why} after {_secs(step.seconds)} (log: {log}); last lines: "
                    + " | ".join(step.tail[-5:]),
                    {"rc": step.rc, "tail": step.tail},
                )
            )
    for call in m.calls:
        if call.rc != 0:
            why = "timed out" if call.rc in (124, 137) else f"exited {call.rc}"
            problems.append(
                Finding(
                    "benchmark_failed",
                    f"benchmark call {call.pair}{call.side} {why} after {_secs(call.seconds)} (log: {log}): "
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
                f"{main.name} is {_num(main.values[0])} in all {len(main.values)} samples: a measured time "
                "or rate varies from run to run, a constant is usually a label or a count (check the "
                "parsed lines above)",
            )
        )
    if main is not None:
        _parse_check(m, main, primary, problems, advice)
        _noise_advice(m, main, policy, call_seconds, problems, advice)
        if settings.metric.direction == "higher" and _TIME_NAME.search(main.name):
            advice.append(
                Finding(
                    "direction",
                    f"metric.direction is `higher` but {main.name!r} reads like a time: if smaller is "
                    'better set metric.direction = "lower"',
                )
            )
    _fleet_advice(m, fleet, workers, busy, problems, advice)
    _timeout_advice(m, settings, problems, advice)
    guarded = {g.metric for g in settings.metric.guards}
    for f in figures:
        if f.primary or f.name in guarded or f.name in RESEARCH_METRICS:
            continue
        advice.append(
            Finding(
                "guard",
                f"the benchmark also prints {f.name} (median {_num(statistics.median(f.values))}): "
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


def _parse_check(
    m: Measurement, main: MetricFigures, primary: str, problems: list[Finding], advice: list[Finding]
) -> None:
    """The cross-check: which output line each number came from, and whether the regex is sure."""
    if not m.scaffold or not m.scaffold.get("regex"):
        return
    regex = str(m.scaffold["regex"])
    # Lines of different kinds feeding one metric (`result 990502` and `... 52.0 MB/s`): the regex
    # is loose, whatever each line looks like.
    shapes = list(
        dict.fromkeys(
            NUMBER.sub("N", s.source)
            for c in m.calls
            for s in c.samples
            if s.metric == primary and s.source is not None
        )
    )
    if len(shapes) > 1 and not m.accepted_parse:
        problems.append(
            Finding(
                "ambiguous_parse",
                f"the regex {regex!r} takes {primary} from {len(shapes)} kinds of output line "
                f"({'; '.join(repr(x) for x in shapes[:3])}): make it match only the line that holds "
                "the result (put the unit or the label next to the group), or accept it: "
                "autoresearch validate --accept-parse",
                {"shapes": shapes},
            )
        )
    for example in main.examples:
        source = example.get("source")
        if source is None:
            continue
        doubts, marked = parse_doubts(regex, primary, source)
        example["marked"] = marked
        if doubts and not m.accepted_parse:
            problems.append(
                Finding(
                    "ambiguous_parse",
                    f"the regex {regex!r} may take the wrong number from {source!r}: {'; '.join(doubts)}. "
                    "Tighten it (put the unit or the label next to the group) in the benchmark script, "
                    "or check the marked line and accept it: autoresearch validate --accept-parse",
                    {"line": source, "marked": marked, "doubts": doubts},
                )
            )
            return


def _noise_advice(
    m: Measurement,
    main: MetricFigures,
    policy: stats.Policy,
    call_seconds: float | None,
    problems: list[Finding],
    advice: list[Finding],
) -> None:
    samples = m.scaffold.get("samples") if m.scaffold else None
    knob = (
        f"more runs per call (AR_SAMPLES in [target.env]; the scaffold runs the command {samples} times)"
        if samples
        else "more samples per call in the benchmark script (their median is the call's value)"
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
                f"raise policy.max_pairs to {needed} (about {_minutes(needed * pair_time)} per experiment)"
            )
        fixes.append(f"lower the noise: {knob}")
        problems.append(
            Finding(
                "too_noisy_for_min_effect",
                f"policy.min_effect {policy.min_effect:.1%} is below what this benchmark resolves in "
                f"{policy.max_pairs} pairs: ±{main.floor:.1%} "
                f"(calls vary by {_pct(main.call_noise)}){rough}; "
                "even a patch that changes nothing could not be discarded, and every experiment would "
                "end inconclusive. Either " + ", or ".join(fixes),
                {"floor": main.floor, "min_effect": policy.min_effect, "pairs_needed": needed},
            )
        )
    else:
        advice.append(
            Finding(
                "resolution",
                f"in {policy.max_pairs} pairs (about {_minutes(policy.max_pairs * pair_time)} of benchmark "
                f"per experiment) this resolves ±{main.floor:.2%}; a true gain of {main.keepable:.1%} is "
                f"kept {KEEP_POWER:.0%} of the time; policy.min_effect {policy.min_effect:.1%} fits" + rough,
                {"floor": main.floor, "keepable": main.keepable},
            )
        )
    # More samples per call help only as far as the calls vary by what their samples explain.
    if main.sample_noise and main.call_noise is not None and main.samples_per_call >= 1:
        explained = 1.25 * main.sample_noise / math.sqrt(main.samples_per_call)
        if main.call_noise > 1.5 * explained and main.call_noise > 0.005:
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
            want = math.ceil(samples * (main.floor / max(policy.min_effect, 1e-6)) ** 2)
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


def _fleet_advice(
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


def _timeout_advice(
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


def _secs(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} s"


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.1%}"


def _num(value: float) -> str:
    return f"{value:.4g}"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


# --- stored, and checked before a run ------------------------------------------------------------


def path_of(ws: Workspace) -> Path:
    return ws.root / VALIDATION_FILE


def save(ws: Workspace, measurement: Measurement, report: Report) -> Path:
    path = path_of(ws)
    data = {"version": VERSION, "measurement": measurement.to_json(), "report": report.to_json()}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load(ws: Workspace) -> Measurement | None:
    path = path_of(ws)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); run `autoresearch validate` again") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return None
    return Measurement.from_json(data["measurement"])


@dataclass
class Gate:
    ok: bool
    reason: str
    """Why not, in one line with what to do; empty when ok."""
    report: Report | None = None


def gate(ws: Workspace, *, parallel: int | None = None, backend: str | None = None) -> Gate:
    """May a new run start? (validation.required; the stored measurement, judged under the current
    settings and for the run's parallel and backend.)"""
    settings = ws.settings
    if not settings.validation.required:
        return Gate(True, "")
    stored = load(ws)
    if stored is None:
        return Gate(
            False,
            "the benchmark, checks and settings of this workspace were never validated: run "
            "`autoresearch validate` (build, benchmark and checks once on the baseline, with advice)",
        )
    now_inputs = inputs_of(ws, settings)
    if fingerprint(now_inputs) != stored.fingerprint:
        what = ", ".join(changed(stored.inputs, now_inputs)) or "the inputs"
        return Gate(False, f"{what} changed since the last `autoresearch validate`: run it again")
    report = evaluate(stored, settings, parallel=parallel, backend=backend)
    if not report.passed:
        first = report.problems[0].message
        more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        return Gate(
            False,
            f"validation failed: {first}{more}; fix it and run `autoresearch validate` again",
            report,
        )
    return Gate(True, "", report)
