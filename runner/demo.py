"""`autoresearch demo`: the whole loop on the bundled example target, as one library call.

    result = run_demo(DemoOptions(Path("autoresearch-demo")), progress=lambda stage, line: print(line))
    print("\\n".join(summary_lines(result)))

The CLI and the tests share this function. Each stage calls the library the matching command uses:

1. workspace  - the target and its fork as git repositories, made from `examples/demo`
                (build_repos.py; package data, found by kb.packaged), and a workspace on the
                target with the demo's config;
2. papers     - the articles ingested (kb.papers), as `kb add-paper` does;
3. fork       - the fork's commits recorded (kb.forks), as `kb add-fork`;
4. inventory  - the backend fusion inventory scanned and stored (kb.inventory), as `kb inventory`;
5. hypotheses - mined from the gaps and the fork commits (runner.research.miners); with a model, also
                generated from the KB and patched through the LLM (runner.research.generate,
                runner.research.patch_writer);
6. run        - the self-test, waves (each ending with its post-mortem stored as a KB note), winners
                committed, stack and ablation (runner.measure.loop), as `run`;
7. report     - Markdown and HTML (runner.record.report), as `report`.

The demo's policy is sized for the demo's effects, not for llama.cpp: the real changes move the
throughput by 20-35% and the benchmark's noise is 2-5% per pair (CPU time; three samples per
invocation, BENCH_REPS=3 and BENCH_ITERS=3, each side of a pair their median). A first look at 12
pairs, then batches of 8 up to 32, decides a +25% change and a -18% one at the first or second look
(runner/stats/ says what each look costs), and a minimum effect of 2% lets a neutral change be
discarded before the cap when the noise allows. Nothing here knows which patch is which: decisions
come from the measurements of the code.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kb.errors import UserError
from kb.packaged import demo_dir
from runner.stats import interval, pct

if TYPE_CHECKING:
    import sqlite_utils

    from kb.workspace import Workspace

DemoProgress = Callable[[str, str], None]
"""progress(stage, line): a stage name (workspace, papers, ...) and one line to show: the stage's
headline when it starts (no indent), then indented detail lines."""

RUN_NAME = "demo"
FORK_NAME = "demo-fork"
DEFAULT_DIR = "autoresearch-demo"

# What the demo creates in its folder; --force removes these (and only these) from an earlier demo.
_REPOS = "repos"
_ARTICLES = "articles"
_OWN_ENTRIES = (
    "autoresearch.toml",
    "autoresearch.db",
    "autoresearch.db-wal",
    "autoresearch.db-shm",
    "mirror.git",
    "logs",
    "worktrees",
    "patches",
    "reports",
    _REPOS,
    _ARTICLES,
)

DEMO_POLICY: dict[str, Any] = {
    "min_effect": 0.02,
    "alpha": 0.05,
    "min_pairs": 12,
    "batch_pairs": 8,
    "max_pairs": 32,
    "self_test_pairs": 12,
}
DEMO_WAVE_SIZE = 12
"""Every mined patch in one wave, measured against the original baseline: a patch measured on top
of an earlier winner answers another question (0005 only touches a function the fused path of 0001
no longer calls, and such a change can still move the binary's layout by several percent)."""
DEMO_BENCH_REPS = 3
DEMO_BENCH_ITERS = 3
"""Each sample is the median of this many graph evaluations (the bench's default is 5): three
samples of three cost a third less than three of five, for about the same noise."""
DEMO_TIMEOUTS = {"build": 180, "bench": 60, "check": 180}
DEMO_BUDGET_MINUTES = 15.0
"""A safety net only: the demo takes 1.5 to 3 minutes on 2 cores."""
DEMO_INVENTORY: dict[str, Any] = {
    "target_backend": "cpu",
    "backends_root": "src",
    "backend_dir_pattern": r"backend-(?P<name>[\w-]+)",
    "rules": [{"call": ["demo_can_fuse"], "op_prefix": "OP_"}],
}
"""How the fusion inventory reads the demo target: backends under src/backend-*, fusions where
`demo_can_fuse` names OP_* ops."""


@dataclass
class DemoOptions:
    directory: Path
    force: bool = False
    """Replace an earlier demo in `directory` (only what the demo made there is removed)."""
    model: str | None = None
    """A litellm model: also generate hypotheses from the KB and have the LLM write their patches."""
    api_base: str | None = None
    parallel: int = 2
    policy: dict[str, Any] = field(default_factory=dict)
    """Overrides of DEMO_POLICY (tests use a smaller cap)."""
    bench_reps: int = DEMO_BENCH_REPS
    repos: tuple[Path, Path] | None = None
    """Use these (upstream, fork) repositories instead of building them from examples/demo."""
    self_test: bool = True
    final: bool = True
    """Measure the winners stacked and each one left out at the end."""
    llm_hypotheses: int = 3


@dataclass
class Outcome:
    """One experiment of the run as the summary shows it."""

    experiment_id: int
    title: str
    status: str
    reason: str | None
    detail: str
    effect: float | None
    ci: tuple[float | None, float | None] | None
    pairs: int
    origin: str | None
    sources: list[str]
    """Source refs of its hypothesis (fork:NAME@SHA, gap:ID, a paper URL, passage:ID)."""
    source_details: list[str]
    diff_sha: str | None
    commit: str | None = None
    patch_file: str | None = None
    reading: list[str] = field(default_factory=list)
    """Related passages the KB search finds for it (not provenance: what to read next)."""


@dataclass
class DemoResult:
    workspace: Path
    run_id: int | None
    run_name: str | None
    run_status: str | None
    seconds: float
    stage_seconds: dict[str, float]
    papers: list[str]
    fork_commits: int
    gaps: list[str]
    mined: dict[str, Any]
    llm: dict[str, Any] | None
    kept: list[Outcome]
    others: list[Outcome]
    waiting: list[dict[str, Any]]
    """Hypotheses that never ran (no patch, unpatchable): id, title, origin, status, sources."""
    self_test: dict[str, Any] | None
    stack: dict[str, Any] | None
    ablation: list[dict[str, Any]]
    bottleneck: dict[str, Any] | None
    bottleneck_after: dict[str, Any] | None
    report: Path | None
    report_html: Path | None
    tui_command: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("workspace", "report", "report_html"):
            data[key] = str(data[key]) if data[key] is not None else None
        return data


# --- the example files -------------------------------------------------------------------------


def load_build_repos() -> ModuleType:
    """examples/demo/build_repos.py, loaded by path (a script too: it is not imported as a module
    of the data package, whose folders are data)."""
    path = demo_dir() / "build_repos.py"
    name = "autoresearch_demo_build_repos"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def demo_config(
    parallel: int, bench_reps: int, policy: dict[str, Any], model: str | None, api_base: str | None
) -> dict[str, Any]:
    """The config sections of the demo workspace (written into its autoresearch.toml)."""
    config: dict[str, Any] = {
        "target": {
            "build_cmd": "make -j2",
            # Several samples per invocation: each side of a pair is their median (less noise).
            "env": {"BENCH_REPS": str(bench_reps), "BENCH_ITERS": str(DEMO_BENCH_ITERS)},
        },
        "metric": {"primary": "throughput", "direction": "higher", "unit": "graphs/s"},
        "policy": {**DEMO_POLICY, **policy},
        "fleet": {"backend": "local", "parallel": parallel, "wave_size": DEMO_WAVE_SIZE},
        "timeouts": dict(DEMO_TIMEOUTS),
        "budget": {"minutes": DEMO_BUDGET_MINUTES},
        "kb": {"inventory": copy.deepcopy(DEMO_INVENTORY)},
    }
    if model:
        config["llm"] = {"model": model, **({"api_base": api_base} if api_base else {})}
    return config


def check_tools() -> None:
    """The demo builds C code in git worktrees: say what is missing before anything is written."""
    missing = [
        tool
        for tool in ("git", "make", (os.environ.get("CC") or "cc").split()[0])
        if shutil.which(tool) is None
    ]
    if missing:
        raise UserError(
            f"{', '.join(missing)}: not found on PATH; the demo needs git, make and a C compiler "
            "(e.g. apt install build-essential git)"
        )


# --- the folder --------------------------------------------------------------------------------


def _is_earlier_demo(root: Path) -> bool:
    config = root / "autoresearch.toml"
    if not config.is_file():
        return False
    import tomllib

    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    path = str(data.get("target", {}).get("path", ""))
    return Path(path).resolve() == (root / _REPOS / "upstream").resolve()


def prepare_folder(root: Path, force: bool) -> None:
    """Refuse a non-empty folder unless --force; --force removes only an earlier demo's entries."""
    if root.exists() and not root.is_dir():
        raise UserError(f"{root}: exists and is not a folder")
    if not root.exists() or not any(root.iterdir()):
        return
    if not force:
        raise UserError(
            f"{root}: not empty; pass --force to replace an earlier demo there, or choose another folder"
        )
    present = [name for name in _OWN_ENTRIES if (root / name).exists() or (root / name).is_symlink()]
    if present and not _is_earlier_demo(root):
        raise UserError(
            f"{root}: holds {present[0]} but is not an earlier demo workspace; --force replaces only "
            "an earlier demo (choose another folder)"
        )
    for name in present:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            _rmtree(path)
        else:
            path.unlink()


def _rmtree(path: Path) -> None:
    def writable_then_retry(func: Callable[[str], object], target: str, _exc: object) -> None:
        # Scripts are placed read-only into experiment trees; a folder may have lost its write bit.
        os.chmod(os.path.dirname(target), 0o700)
        if os.path.exists(target) and not os.path.isdir(target):
            os.chmod(target, 0o600)
        func(target)

    shutil.rmtree(path, onerror=writable_then_retry)


# --- the stages --------------------------------------------------------------------------------


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
        ws, upstream, fork = _make_workspace(root, example, options, say)
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
    from runner.measure.loop import RunOptions, run_summary

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
    kept, others = _outcomes(db, final.to_json())
    bottleneck, after = _bottlenecks(db, final.to_json(), ws.settings.metric.primary)
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
        waiting=_waiting(db),
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


def _make_workspace(
    root: Path, example: Path, options: DemoOptions, say: DemoProgress
) -> tuple[Workspace, Path, Path]:
    from kb.init import TargetSpec, create_workspace

    created_root = not root.exists()
    made: list[Path] = []
    try:
        root.mkdir(parents=True, exist_ok=True)
        if options.repos is not None:
            upstream, fork = (Path(p).resolve() for p in options.repos)
            say("workspace", f"  target {upstream}, fork {fork} (given)")
        else:
            build_repos = load_build_repos()
            made.append(root / _REPOS)
            upstream, fork = build_repos.build(root / _REPOS)
            say("workspace", f"  target repository {upstream} (branch main, one baseline commit)")
            say("workspace", f"  fork repository   {fork} ({len(build_repos.FORK_PATCHES)} commits on top)")
        made.append(root / _ARTICLES)
        shutil.copytree(example / "articles", root / _ARTICLES)
        ws = create_workspace(
            root,
            TargetSpec(
                location=str(upstream),
                baseline="main",
                parallel=options.parallel,
                extra=demo_config(
                    options.parallel, options.bench_reps, options.policy, options.model, options.api_base
                ),
            ),
        )
    except BaseException:
        if created_root and root.exists():
            _rmtree(root)
        elif not created_root:
            for path in made:
                if path.exists():
                    _rmtree(path)
        raise
    policy = ws.settings.policy
    say(
        "workspace",
        f"  workspace created: metric throughput (higher is better), {options.parallel} local "
        f"workers; a first look after {policy.min_pairs} pairs, then batches of {policy.batch_pairs} "
        f"up to {policy.max_pairs}; min effect {policy.min_effect:.0%}; {options.bench_reps} samples "
        "per benchmark run",
    )
    return ws, upstream, fork


def _ingest_papers(ws: Workspace, db: sqlite_utils.Database, say: DemoProgress) -> list[str]:
    from kb.papers import PaperResult, add_papers, expand_inputs

    def show(result: PaperResult) -> None:
        say("papers", f"  {result.message}")

    results = add_papers(db, expand_inputs([str(ws.root / _ARTICLES)]), ws.settings.kb, progress=show)
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


# --- what happened -----------------------------------------------------------------------------


def _outcomes(db: sqlite_utils.Database, summary: dict[str, Any]) -> tuple[list[Outcome], list[Outcome]]:
    from kb.db import one
    from runner.record.sources import source_details, source_refs

    winners = {w["experiment_id"]: w for w in summary["winners"]}
    kept: list[Outcome] = []
    others: list[Outcome] = []
    for exp in summary["experiments"]:
        if exp["kind"] != "candidate" or exp["status"] == "lost":
            continue
        row = one(db, "SELECT hypothesis_id, meta FROM experiments WHERE id = ?", [exp["id"]])
        hid = row["hypothesis_id"] if row else None
        hyp = one(db, "SELECT origin FROM hypotheses WHERE id = ?", [hid]) if hid else None
        patch = (
            one(db, "SELECT diff_sha FROM patches WHERE id = ?", [exp["patch_id"]])
            if exp["patch_id"]
            else None
        )
        meta = json.loads(row["meta"] or "{}") if row else {}
        ci = tuple(exp["ci"]) if exp["ci"] else None
        outcome = Outcome(
            experiment_id=exp["id"],
            title=exp["title"],
            status=exp["status"],
            reason=exp["reason"],
            detail=str(meta.get("detail") or ""),
            effect=exp["effect"],
            ci=(ci[0], ci[1]) if ci else None,
            pairs=exp["pairs"] or 0,
            origin=hyp["origin"] if hyp else None,
            sources=source_refs(db, hid),
            source_details=source_details(db, hid),
            diff_sha=patch["diff_sha"] if patch else None,
        )
        winner = winners.get(exp["id"])
        if exp["status"] == "kept" and winner is not None:
            outcome.commit = winner["commit_sha"]
            outcome.patch_file = winner["patch_file"]
            outcome.reading = _reading(db, exp["title"])
            kept.append(outcome)
        else:
            others.append(outcome)
    kept.sort(key=lambda o: -(o.effect or 0.0))
    order = {"kept": 0, "discarded": 1, "inconclusive": 2, "checks_failed": 3, "crashed": 4, "refused": 5}
    others.sort(key=lambda o: (order.get(o.status, 9), o.experiment_id))
    return kept, others


def _reading(db: sqlite_utils.Database, title: str) -> list[str]:
    """The best paper passage for a winner's title words (the KB search, as `kb search` runs it)."""
    from kb.search import search

    words = [
        w for w in re.findall(r"[A-Za-z_][\w]{2,}", title) if w.lower() not in {"the", "and", "into", "one"}
    ]
    if not words:
        return []
    try:
        hits = search(db, " OR ".join(words), kind="paper", limit=1)
    except UserError:
        return []
    return [f"{h.source} (passage {h.ref}, evidence {h.id})" for h in hits]


def _waiting(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """Hypotheses that never reached an experiment, with why."""
    from kb.db import rows
    from runner.record.sources import source_refs

    found = rows(
        db,
        "SELECT h.id, h.title, h.origin, h.status, "
        "(SELECT count(*) FROM patches p WHERE p.hypothesis_id = h.id) AS patches "
        "FROM hypotheses h WHERE NOT EXISTS (SELECT 1 FROM experiments e WHERE e.hypothesis_id = h.id) "
        "ORDER BY h.priority DESC, h.id",
    )
    return [
        {
            "id": h["id"],
            "title": h["title"],
            "origin": h["origin"],
            "status": h["status"],
            "why": "no patch yet" if not h["patches"] else h["status"],
            "sources": source_refs(db, h["id"]),
        }
        for h in found
    ]


def _medians(db: sqlite_utils.Database, experiment_id: int, side: str) -> dict[str, float]:
    from kb.db import rows

    values: dict[str, list[float]] = {}
    for r in rows(
        db, "SELECT metric, value FROM samples WHERE experiment_id = ? AND side = ?", [experiment_id, side]
    ):
        values.setdefault(r["metric"], []).append(float(r["value"]))
    return {m: float(statistics.median(v)) for m, v in values.items() if v}


def _bottlenecks(
    db: sqlite_utils.Database, summary: dict[str, Any], primary: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Memory- or compute-bound: the original baseline (self-test) and the stacked winners."""
    from runner.research.generate import analyze_bottleneck

    before = after = None
    exps = summary["experiments"]
    self_test = next((e for e in exps if e["kind"] == "self_test" and e["status"] != "lost"), None)
    stack = next((e for e in exps if e["kind"] == "stack"), None)
    first = self_test or stack
    if first is not None:
        metrics = _medians(db, first["id"], "A")
        if metrics:
            before = {**analyze_bottleneck(metrics, primary).to_json(), primary: metrics.get(primary)}
    if stack is not None:
        metrics = _medians(db, stack["id"], "B")
        if metrics:
            after = {**analyze_bottleneck(metrics, primary).to_json(), primary: metrics.get(primary)}
    return before, after


# --- the summary -------------------------------------------------------------------------------


def _interval(ci: Any) -> str:
    """` [low, high]` from a stored interval (JSON has no infinity: an open end is None)."""
    if not ci or ci[0] is None:
        return ""
    return " " + interval(ci[0], math.inf if ci[1] is None else ci[1])


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _source_lines(outcome: Outcome) -> list[str]:
    """Each source once, with what and where when the KB knows it (a bare ref otherwise)."""
    detailed = [d for d in outcome.source_details if "  " in d]
    covered = {d.split("  ", 1)[0] for d in detailed}
    bare = [r for r in outcome.sources if not any(r in c.split() for c in covered)]
    return [*detailed, *bare] or ["no recorded source"]


def summary_lines(result: DemoResult) -> list[str]:
    """The short final summary the CLI prints (plain text, no colour)."""
    root = result.workspace
    out = [
        f"Demo done in {_duration(result.seconds)}: run {result.run_name} {result.run_status}"
        + (f" ({result.error})" if result.error else "")
        + f", workspace {root}",
    ]
    if result.self_test:
        st = result.self_test
        floor = st.get("noise_floor")
        out.append(
            f"Self-test (baseline against itself): {'passed' if st.get('passed') else 'failed'}"
            + (f", noise floor {floor:.1%}" if isinstance(floor, int | float) else "")
        )
    out.append("")
    if result.kept:
        out.append("Kept (a commit each on the run branch, and a patch file with its provenance):")
        for k in result.kept:
            out.append(f"  {pct(k.effect)}{_interval(k.ci)} after {k.pairs} pairs  {k.title}")
            for line in _source_lines(k):
                out.append(f"      source: {line}")
            where = Path(k.patch_file).name if k.patch_file else "?"
            out.append(f"      commit {str(k.commit)[:12]}, patches/{where}")
            if k.reading:
                out.append(f"      related reading: {k.reading[0]}")
    else:
        out.append("Kept: nothing.")
    if result.stack and result.stack.get("effect") is not None:
        out.append(
            f"  All kept together vs the original baseline: {pct(result.stack['effect'])}"
            f"{_interval(result.stack.get('ci'))} ({result.stack['status']})"
        )
        titles = {k.experiment_id: k.title for k in result.kept}
        for ab in result.ablation:
            if ab.get("effect") is not None:
                # The ablation measures all winners against all but one: that one's share.
                left_out = int(ab.get("left_out") or 0)
                name = titles.get(left_out, f"experiment {left_out}")
                out.append(
                    f"    {name}: {pct(ab['effect'])}{_interval(ab.get('ci'))} on top of the others "
                    f"({ab['status']})"
                )
    out.append("")
    if result.others:
        out.append("Not kept:")
        for o in result.others:
            if o.status in ("kept", "discarded", "inconclusive"):
                why = f"{pct(o.effect)}{_interval(o.ci)} after {o.pairs} pairs"
            else:
                why = o.reason or ""
                if o.detail:
                    why = f"{why}: {o.detail}" if why else o.detail
            out.append(f"  {o.status:<13} {o.title}")
            if why:
                out.append(f"      {why}")
    for w in result.waiting:
        hint = (
            "pass --model to have an LLM write it"
            if w["why"] == "no patch yet" and not result.llm
            else w["why"]
        )
        out.append(f"  not run       {w['title']} ({w['origin']}; {hint})")
    if result.bottleneck:
        b = result.bottleneck
        line = f"Bottleneck of the baseline: {b['verdict']}"
        if b.get("ratio") is not None:
            line += f", {b['achieved_gbs']:.1f} of {b['measured_gbs']:.1f} GB/s measured ({b['ratio']:.0%})"
        a = result.bottleneck_after
        if a and a.get("ratio") is not None:
            line += f"; after the winners {a['achieved_gbs']:.1f} GB/s ({a['ratio']:.0%}, {a['verdict']})"
        out += ["", line]
    out.append("")
    if result.report is not None:
        out.append(f"Report: {result.report}")
        if result.report_html is not None:
            out.append(f"        {result.report_html}")
    out.append(f"Open the console on it: {result.tui_command}")
    return out
