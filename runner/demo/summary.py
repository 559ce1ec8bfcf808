"""What the demo did, read back from the workspace, and the short summary the CLI prints.

runner.demo.script gathers a `DemoResult` after the run: each experiment as an `Outcome` with its
sources and (for a winner) its commit, patch file and related reading, the hypotheses that never
ran, and the baseline's bottleneck before and after the winners.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb.errors import UserError
from kb.jsoncol import decoded_dict
from kb.store import demo_reads
from runner.research.miners import added_ids, label_of_origin
from runner.stats import interval, pct

if TYPE_CHECKING:
    import sqlite_utils


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
    model: str | None
    research: list[dict[str, Any]]
    """The autopilot's research phases, in order (research_phases)."""
    stop_reason: str | None
    """runs.stop_reason: one token of kb.vocabulary.STOP_REASONS."""
    stop_meaning: str | None
    """What it means (kb.vocabulary.STOP_MEANINGS)."""
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


def collect_outcomes(
    db: sqlite_utils.Database, summary: dict[str, Any]
) -> tuple[list[Outcome], list[Outcome]]:
    from runner.record.sources import source_details, source_refs

    winners = {w["experiment_id"]: w for w in summary["winners"]}
    kept: list[Outcome] = []
    others: list[Outcome] = []
    for exp in summary["experiments"]:
        if exp["kind"] != "candidate" or exp["status"] == "lost":
            continue
        found = demo_reads.experiment_origin(db, exp["id"], exp["patch_id"])
        hid = found["hypothesis_id"]
        meta = decoded_dict(found["meta"])
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
            origin=found["origin"],
            sources=source_refs(db, hid),
            source_details=source_details(db, hid),
            diff_sha=found["diff_sha"],
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


def waiting_hypotheses(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """Hypotheses that never reached an experiment, with why."""
    from runner.record.sources import source_refs

    found = demo_reads.never_tried(db)
    return [
        {
            "id": h["id"],
            "title": h["title"],
            "origin": h["origin"],
            "status": h["status"],
            "why": (
                f"a repeat of #{h['repeat_of']}: its patch makes a change measured before"
                if h["repeat_of"]
                else "no patch yet"
                if not h["patches"]
                else h["status"]
            ),
            "sources": source_refs(db, h["id"]),
        }
        for h in found
    ]


def research_phases(db: sqlite_utils.Database, run_id: int | None) -> list[dict[str, Any]]:
    """Each finished research phase of the run, from its `research_done` event: its counts
    (phase, mined, generated, patched, repaired, ported, repeats, failures, cost_usd, call_ids),
    `after_waves` (the waves started before it: 0 is before the first wave), `found` (the hypotheses
    its miners added, from the `hypotheses.mine` events logged during the phase, then those the
    model proposed in it) and `patches` (those the model wrote in it: id, hypothesis, repair_of)."""

    if run_id is None:
        return []
    events = demo_reads.research_events(db, run_id)
    phases: list[dict[str, Any]] = []
    waves, started = 0, False
    mined_ids: list[int] = []
    for ev in events:
        data = decoded_dict(ev["data"])
        if ev["kind"] == "wave_started":
            waves += 1
        elif ev["kind"] == "research_started":
            started = True
            mined_ids = []
        elif ev["kind"] == "hypotheses.mine" and started:
            mined_ids += added_ids(data)
        elif ev["kind"] == "research_done":
            calls = [int(c) for c in data.get("call_ids") or []]
            found = [h for hid in dict.fromkeys(mined_ids) if (h := demo_reads.hypothesis_brief(db, hid))]
            found += demo_reads.hypotheses_of_calls(db, calls)
            patches = demo_reads.patches_of_calls(db, calls)
            phases.append({**data, "after_waves": waves, "found": found, "patches": patches})
            started = False
    return phases


def _medians(db: sqlite_utils.Database, experiment_id: int, side: str) -> dict[str, float]:

    values: dict[str, list[float]] = {}
    for r in demo_reads.side_samples(db, experiment_id, side):
        values.setdefault(r["metric"], []).append(float(r["value"]))
    return {m: float(statistics.median(v)) for m, v in values.items() if v}


def bottlenecks(
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


_ORIGINS = {"llm": "model idea"}
"""Origins that are not a miner's (a miner's reads as its label: runner.research.miners)."""


def research_lines(result: DemoResult) -> list[str]:
    """Per research phase, when it ran and what it found; then why the run stopped."""
    from runner.research_io import ResearchReport

    who = f"miners and {result.model}" if result.model else "miners only, no model"
    out = [f"Research phases (the autopilot, {who}):"]
    counts = set(ResearchReport.__dataclass_fields__)
    for ph in result.research:
        waves = int(ph.get("after_waves") or 0)
        when = "before wave 1" if not waves else f"after wave {waves}'s post-mortem"
        report = ResearchReport(**{k: v for k, v in ph.items() if k in counts})
        out.append(f"  phase {ph.get('phase')}, {when}: {report.line()}")
        for hyp in ph.get("found") or []:
            origin = label_of_origin(str(hyp["origin"])) or _ORIGINS.get(
                str(hyp["origin"]), str(hyp["origin"])
            )
            out.append(f"      {origin:<12} {hyp['title']}")
        for patch in ph.get("patches") or []:
            what = "repair" if patch.get("repair_of") else "port" if patch.get("from_experiment") else "patch"
            out.append(f"      {'model ' + what:<12} {patch['title']}")
        for failure in report.failures[:3]:
            out.append(f"      failed: {failure}")
    if not result.research:
        out.append("  none ran")
    if result.stop_reason:
        out.append(f"Stopped: {result.stop_reason} ({result.stop_meaning or 'see kb/vocabulary.py'})")
        if result.stop_reason == "no_hypotheses" and not result.model:
            out.append(
                "  the miners had queued every fork commit and gap at once; without --model nothing "
                "writes new hypotheses or patches"
            )
    return out


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
    out += ["", *research_lines(result), ""]
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
            if w["why"] == "no patch yet" and not result.model
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
