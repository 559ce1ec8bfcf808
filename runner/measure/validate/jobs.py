"""Measuring: the baseline checked out once, and the experiment template run on it as the local
fleet runs it, in two jobs like a run's batches (build and checks, then the benchmark in pairs with
the builds cached; both sides the same tree)."""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kb import gitrepo
from kb.db import now
from kb.errors import UserError
from kb.workspace import Workspace
from runner.fleet.local import kill_session, start_job
from runner.harness import metric_filter
from runner.harness.batch import Timeouts, batch_envs
from runner.harness.prepare import prepare_workdir, remove_workdir, resolve_scripts, template_path
from runner.harness.protocol import MARKER_PREFIX, LogParser, LogState
from runner.harness.sandbox import sandbox_envs
from runner.harness.scaffold import MARK, BenchSpec, has_no_checks, read_bench_script, read_check_command
from runner.harness.template import RenderedTask, load_template, render
from runner.measure.validate.fingerprint import fingerprint, inputs_of
from runner.measure.validate.hidden import hidden_tools
from runner.measure.validate.model import Call, Measurement, Sample, StepResult

Progress = Callable[[str], None]

DEFAULT_CALLS = 4
EXPERIMENT_ID = "validate"
_JOB_MARGIN = 120


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
    """Run one rendered task as the local fleet does (runner.fleet.local.start_job), tailing its
    log into the parser."""
    started = time.monotonic()
    child = start_job(task, job_dir, log_path, setup=setup, task_id=f"autoresearch-validate-{job_dir.name}")
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
                envs=batch_envs(
                    ws,
                    settings,
                    scripts,
                    Timeouts.of(settings, {}),
                    experiment_id=EXPERIMENT_ID,
                    title="validate: the baseline",
                    batch=batch,
                    pair_start=0,
                    pairs=count,
                    run_checks=checks,
                    nonce=nonce,
                    one_tree=True,
                ),
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
        result.isolation = first.state.isolation
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
    if result.isolation not in (None, "none"):
        result.hidden_tools = _hidden(ws, spec, [t for t in (bench_text, checks_text) if t])
    return result


def _hidden(ws: Workspace, spec: BenchSpec | None, scripts: list[str]) -> list[dict[str, Any]]:
    """The programs of the build command and the scripts that the sandbox hides from the steps:
    a scaffolded script's command (and the filter's python3), a script of the user's own line by
    line."""
    settings = ws.settings
    commands = [settings.target.build_cmd]
    for text in scripts:
        command = read_check_command(text) if MARK in text else None
        if MARK not in text:
            commands += [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        elif command is not None:
            commands.append(command)
    if spec is not None:
        commands.append(spec.command)
    envs = sandbox_envs(ws)
    exposed = [
        Path(p) for key in ("AUTORESEARCH_EXPOSE", "AUTORESEARCH_SHARED") for p in envs[key].split(":") if p
    ]
    # What harness.sh hides from every step (ar_hidden, and the private /tmp of ar_plan).
    hidden = [Path.home(), ws.root, Path("/tmp"), Path("/var/tmp")]
    found = hidden_tools(commands, hidden, exposed)
    if spec is not None:  # the scaffold's filter needs a python3, any: only none is a problem
        interpreter = settings.target.env.get("AR_PYTHON", "python3")
        found += [
            t for t in hidden_tools([interpreter], hidden, exposed) if t.instead is None and t not in found
        ]
    return [asdict(tool) for tool in found]


def _why(job: _Job, default: str) -> str:
    if job.timed_out:
        return "timeout"
    return job.state.reason or default


def _script_text(ws: Workspace, repo: Any, baseline: str, source: Path | None, path: str) -> str | None:
    if source is not None:
        return source.read_text(encoding="utf-8", errors="replace")
    return gitrepo.show_file(repo, baseline, path)
