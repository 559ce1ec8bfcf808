"""`autoresearch report RUN`: one run as a Markdown or HTML document, with a plot.

Sections: the run (status, branch, policy, budget), the self-test and noise floor, waves,
experiments (status, verdict, effect, interval, pairs, noise, q), a plot of the primary metric's
effect per experiment with its interval, the final stack and its ablation (what each winner
contributes), the provenance of every winner, and the run's warnings.

The document is built once as a list of blocks and rendered to either format, so the two always
say the same thing. matplotlib (Agg backend) is imported only when the plot is drawn.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from kb.errors import UserError
from kb.textsafe import clip, html_text, inert, utc_time
from kb.vocabulary import STOP_MEANINGS, gain_words, legend
from runner.record import history
from runner.record.import_summary import summary_lines
from runner.record.winners import provenance
from runner.stats import cell_interval, cell_pct

if TYPE_CHECKING:
    from kb.workspace import Workspace

STATUS_COLOURS = {
    "kept": "#2e7d32",
    "discarded": "#c62828",
    "inconclusive": "#757575",
    "running": "#1565c0",
}


# --- blocks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Items:
    items: list[str]


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Image:
    path: Path
    alt: str


@dataclass(frozen=True)
class Code:
    text: str


Block = Heading | Para | Items | Table | Image | Code


@dataclass(frozen=True)
class Written:
    path: Path
    plot: Path | None


# --- formatting helpers ------------------------------------------------------------------------


def _aa_verdict(passed: bool) -> str:
    return "passed (no difference)" if passed else "failed (the baseline differs from itself)"


def _when(ts: float | None) -> str:
    return utc_time(ts, "%Y-%m-%d %H:%M UTC")


def _short(sha: str | None) -> str:
    return (sha or "-")[:12]


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "" if x is None or not math.isfinite(x) else format(x, fmt)


# --- the plot ----------------------------------------------------------------------------------


def plot_effects(
    exps: list[history.ExperimentInfo],
    path: Path,
    *,
    metric: str,
    min_effect: float | None,
    noise_floor: float | None,
    title: str,
    direction: str = "higher",
) -> Path | None:
    """Effect of the primary metric per experiment with its interval (PNG). None if nothing to plot."""
    points = [e for e in exps if e.decision is not None and e.effect is not None]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = max(2.5, 0.45 * len(points) + 1.4)
    fig, ax = plt.subplots(figsize=(8, height), dpi=100)
    try:
        if noise_floor is not None and math.isfinite(noise_floor):
            ax.axvspan(-noise_floor * 100, noise_floor * 100, color="#fff3c4", label="noise floor (A/A)")
        ax.axvline(0, color="black", linewidth=0.8)
        if min_effect:
            ax.axvline(min_effect * 100, color="#2e7d32", linestyle="--", linewidth=0.8, label="min effect")
        for y, e in enumerate(reversed(points)):
            effect = (e.effect or 0.0) * 100
            low, high = e.ci
            colour = STATUS_COLOURS.get(e.status, "#6a1b9a")
            if low is not None and high is not None:
                ax.errorbar(
                    effect,
                    y,
                    xerr=[[effect - low * 100], [high * 100 - effect]],
                    fmt="o",
                    color=colour,
                    capsize=3,
                )
            else:
                ax.plot(effect, y, "o", color=colour, markerfacecolor="none")
        labels = [_plot_text(f"#{e.id} {clip(e.title, 39)} ({e.status})") for e in reversed(points)]
        ax.set_yticks(range(len(points)), labels, fontsize=8)
        ax.set_xlabel(_plot_text(f"{gain_words(metric, direction)} (%), interval of the decision"))
        ax.set_title(_plot_text(title), fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png", metadata={"Software": None})
    finally:
        plt.close(fig)
    return path


# --- the document ------------------------------------------------------------------------------


def _run_blocks(run: history.RunInfo) -> list[Block]:
    items = [
        f"Status: {run.status}"
        + (
            f", stopped: {run.stop_reason} ({STOP_MEANINGS.get(run.stop_reason, '')})"
            if run.stop_reason
            else ""
        ),
        f"Started: {_when(run.started_at)}; ended: {_when(run.ended_at)}",
        f"Backend: {run.backend}",
    ]
    if run.imported_from:
        items.append(f"Imported from: {run.imported_from}")
        items += summary_lines(run.summary)
    if run.branch:
        items.append(f"Branch: {run.branch} ({_short(run.baseline_commit)} -> {_short(run.head_commit)})")
    items.append(f"Baseline commit: {run.baseline_commit or '-'}")
    if run.head_commit and run.head_commit != run.baseline_commit:
        items.append(f"Head commit: {run.head_commit}")
    if run.policy:
        items.append(f"Policy: {run.policy_shown}")
    if run.budget:  # the run's budget options, each None when not set
        budget = ", ".join(f"{k}={v}" for k, v in sorted(run.budget.items()) if v is not None)
        items.append(f"Budget: {budget or 'none set'}")
    if run.cost_usd:
        items.append(f"Cost: ${run.cost_usd:.2f}")
    if run.error:
        items.append(f"Error: {run.error}")
    return [Items(items)]


def _self_test_blocks(run: history.RunInfo) -> list[Block]:
    st = run.self_test
    if not st and run.noise_floor is None:
        return [Heading("Self-test"), Para("No self-test was recorded for this run.")]
    items: list[str] = []
    if st:
        passed = st.get("passed")
        items.append(f"A/A self-test: {_aa_verdict(passed) if passed is not None else 'recorded'}")
        if st.get("effect") is not None:
            items.append(
                f"Effect {cell_pct(st.get('effect'))} {cell_interval(st.get('ci_low'), st.get('ci_high'))}, "
                f"{st.get('pairs', '?')} pairs"
            )
        if st.get("noise") is not None:
            items.append(f"Noise (per-sample CV of the baseline): {st['noise']:.2%}")
    if run.noise_floor is not None:
        items.append(f"Noise floor: ±{run.noise_floor:.2%} (smaller effects cannot be told from noise)")
    return [Heading("Self-test"), Items(items)]


def _waves_blocks(waves: list[history.WaveInfo]) -> list[Block]:
    if not waves:
        return []
    return [
        Heading("Waves"),
        Table(
            ["Wave", "Baseline", "Status", "Experiments", "Kept", "Started", "Ended"],
            [
                [
                    str(w.number),
                    _short(w.baseline_commit),
                    w.status,
                    str(w.experiments),
                    str(w.kept),
                    _when(w.started_at),
                    _when(w.ended_at),
                ]
                for w in waves
            ],
        ),
    ]


def _experiments_blocks(exps: list[history.ExperimentInfo], *, imported: bool = False) -> list[Block]:
    """The experiments table; an imported run's has two last columns: each line's change against the
    segment's first line as pi-autoresearch's dashboard shows it (raw, not turned so that positive =
    better), and the confidence pi-autoresearch logged on it (a multiple of its noise floor, next to
    this product's verdict)."""
    table_rows = []
    for e in exps:
        d = e.decision
        status = e.status + (f": {e.reason}" if e.reason else "")
        table_rows.append(
            [
                str(e.id),
                "-" if e.wave is None else str(e.wave),
                e.kind,
                e.title,
                status,
                d.verdict if d else "",
                history.effect_cell(e),
                cell_interval(*e.ci),
                str(e.pairs) if d else "",
                f"{d.noise:.2%}" if d and d.noise is not None else "",
                _num(d.q_value) if d else "",
                *(
                    [
                        cell_pct(_float(e.meta.get("vs_baseline"))),
                        _num(_float(e.meta.get("pi_confidence")), ".3g"),
                    ]
                    if imported
                    else []
                ),
            ]
        )
    headers = ["#", "Wave", "Kind", "Title", "Status", "Verdict", "Effect", "CI", "Pairs", "Noise", "q"]
    blocks: list[Block] = [
        Heading("Experiments"),
        Table(headers + (["Δ baseline", "pi confidence"] if imported else []), table_rows),
    ]
    shown = legend(e.status for e in exps)
    if shown:  # one line per status word in the table: what it means
        blocks += [Para("Statuses:"), Items(shown)]
    return blocks


def _stack_blocks(run: history.RunInfo, exps: list[history.ExperimentInfo]) -> list[Block]:
    """The winners together against the original baseline, and each one left out (ablation).

    Read from the stack and ablation experiments themselves (kinds `stack`/`final`, `ablation` with
    `meta.left_out`); runs.summary is shown raw only when those rows are missing."""
    stack = [e for e in exps if e.kind in ("stack", "final")]
    ablations = [e for e in exps if e.kind == "ablation"]
    # An imported run's summary says what the import read; the run section shows it.
    summary = {k: v for k, v in (run.summary or {}).items() if k != "import"}
    if not stack and not ablations and not summary:
        return []
    blocks: list[Block] = [Heading("Final stack and ablation")]
    titles = {e.id: e.title for e in exps}
    for e in stack:
        status = e.status + (f": {e.reason}" if e.reason else "")
        effect = cell_pct(e.effect) or "no effect measured"
        blocks.append(
            Para(
                f"All winners together against the original baseline (#{e.id}): {effect} "
                f"{cell_interval(*e.ci)}, {e.pairs} pairs, {status}."
            )
        )
    if ablations:
        blocks.append(
            Para(
                "Ablation: each winner left out in turn. The full stack is measured against the stack "
                "without that winner, so the effect is what the winner adds on top of the others."
            )
        )
        ablation_rows = []
        for e in ablations:
            left_out = e.meta.get("left_out")
            ablation_rows.append(
                [
                    f"#{left_out} {titles.get(left_out, '')}".strip() if left_out else e.title,
                    e.status + (f": {e.reason}" if e.reason else ""),
                    cell_pct(e.effect),
                    cell_interval(*e.ci),
                    str(e.pairs),
                ]
            )
        blocks.append(Table(["Left out", "Status", "Contribution", "CI", "Pairs"], ablation_rows))
    if summary and not stack and not ablations:
        blocks.append(Code(json.dumps(summary, indent=2, sort_keys=True, default=str)))
    return blocks


def _provenance_blocks(db: sqlite_utils.Database, run: history.RunInfo) -> list[Block]:
    winners = history.winners(db, run.id)
    if not winners:
        return [Heading("Winners"), Para("No winner in this run.")]
    blocks: list[Block] = [Heading("Winners and provenance")]
    for w in winners:
        chain = provenance(db, w["experiment_id"])
        d = chain["decision"] or {}
        blocks.append(Heading(f"{w['position']}. {w['title']}", level=3))
        items = [
            f"Commit: {w['commit_sha']} on {chain['winner']['branch']}",
            f"Patch file: {w['patch_file']}",
            f"Measured: {d.get('metric')} {cell_pct(d.get('effect'))} "
            f"{cell_interval(*(d.get('ci') or [None, None]))}, "
            f"{d.get('pairs')} pairs (experiment #{w['experiment_id']}, wave {chain['experiment']['wave']})",
        ]
        hyp = chain["hypothesis"]
        if hyp:
            items.append(f"Hypothesis #{hyp['id']} ({hyp['origin']}): {hyp['title']}")
        patch = chain["patch"]
        if patch:
            items.append(
                f"Patch #{patch['id']} by {patch['author_kind']}"
                + (f" ({patch['author']})" if patch["author"] else "")
                + f": {', '.join(patch['files'])}"
            )
        for ev in chain["evidence"]:
            src = ev["source"]
            origin = src["title"] or src["name"] or src["url"] or src["id"]
            what = f": {ev['title']}" if ev["title"] and ev["title"] != origin else ""
            items.append(
                f"Evidence {' '.join(ev['refs'])} ({ev['kind']} from {src['kind']} {origin}){what} "
                f"at {ev['location']}"
            )
        for ref in chain["source_refs"]:
            items.append(f"Source: {ref['ref']}")
        if not chain["evidence"] and not chain["source_refs"]:
            items.append("Source: none recorded")
        blocks.append(Items(items))
    return blocks


def _events_blocks(db: sqlite_utils.Database, run: history.RunInfo) -> list[Block]:
    found = [e for e in history.events(db, run_id=run.id, limit=10_000) if e.level in ("warning", "error")]
    if not found:
        return []
    return [
        Heading("Warnings and errors"),
        Table(
            ["When", "Level", "Experiment", "Message"],
            [[_when(e.ts), e.level, str(e.experiment_id or ""), e.message] for e in found[:200]],
        ),
    ]


def build(
    db: sqlite_utils.Database, run: history.RunInfo, plot: Path | None
) -> tuple[list[Block], list[history.ExperimentInfo]]:
    exps = history.experiments(db, run.id)
    blocks: list[Block] = [Heading(f"Run {run.name}", level=1), *_run_blocks(run)]
    isolation = history.isolation_summary(exps)
    if isolation:
        blocks.append(Para(f"Isolation of the build, benchmark and checks steps: {isolation}."))
    blocks += _self_test_blocks(run)
    blocks += _waves_blocks(history.waves(db, run.id))
    blocks += _experiments_blocks(exps, imported=bool(run.imported_from))
    direction = str(run.policy.get("direction") or "higher")
    blocks.append(Para(f"Effect: the {gain_words(run.metric or 'the primary metric', direction)}."))
    if plot is not None:
        blocks.append(Image(plot, f"Effect on {run.metric or 'the primary metric'} per experiment"))
    blocks += _stack_blocks(run, exps)
    blocks += _provenance_blocks(db, run)
    blocks += _events_blocks(db, run)
    return blocks, exps


# --- renderers ---------------------------------------------------------------------------------


def _plot_text(text: str) -> str:
    """Outside text on the plot: inert, and `$` literal (matplotlib reads `$...$` as mathtext, and a
    title holding `$\\frac{$` would stop the report)."""
    return inert(text).replace("$", "\\$")


def _md(text: str) -> str:
    """Outside text in Markdown: inert (a report is also read with cat), and no HTML tag (a viewer
    would render `<img src=...>` from a commit subject)."""
    return inert(text, lines=True).replace("<", "&lt;")


def _md_cell(text: str) -> str:
    return " ".join(_md(text).split()).replace("|", "\\|")


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in `text` (which cannot close it early)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def render_markdown(blocks: list[Block], base: Path) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out += [f"{'#' * b.level} {_md_cell(b.text)}", ""]
        elif isinstance(b, Para):
            out += [_md(b.text), ""]
        elif isinstance(b, Items):
            out += [*[f"- {_md(item)}" for item in b.items], ""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(_md_cell(h) for h in b.headers) + " |")
            out.append("|" + "|".join(" --- " for _ in b.headers) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Image):
            out += [f"![{_md_cell(b.alt)}]({_relative(b.path, base)})", ""]
        else:
            text = inert(b.text, lines=True)
            out += [_fence(text), text, _fence(text), ""]
    return "\n".join(out).rstrip() + "\n"


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
img { max-width: 100%; }
pre { background: #f6f6f6; padding: 0.5rem; overflow-x: auto; }
"""


def render_html(blocks: list[Block], title: str) -> str:
    e = html_text  # inert, then HTML-escaped
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
    ]
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{e(b.text)}</p>")
        elif isinstance(b, Items):
            out.append("<ul>" + "".join(f"<li>{e(item)}</li>" for item in b.items) + "</ul>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{e(h)}</th>" for h in b.headers)
            body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif isinstance(b, Image):
            data = base64.b64encode(b.path.read_bytes()).decode("ascii")
            out.append(f'<p><img alt="{e(b.alt)}" src="data:image/png;base64,{data}"></p>')
        else:
            out.append(f"<pre>{e(b.text)}</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "run"


def write_report(
    ws: Workspace,
    db: sqlite_utils.Database,
    run_ref: str | int,
    *,
    fmt: str = "md",
    output: Path | None = None,
) -> Written:
    """Write the report of a run (default: `reports/<run>.<fmt>` in the workspace) and its PNG plot
    next to it; returns both paths."""
    if fmt not in ("md", "html"):
        raise UserError(f"format {fmt!r}: must be md or html")
    run = history.find_run(db, run_ref)
    path = (output or ws.reports_dir / f"{_safe(run.name)}.{fmt}").expanduser().resolve()
    if path.is_dir():
        raise UserError(f"{path}: is a folder; give a file name for the report")
    path.parent.mkdir(parents=True, exist_ok=True)
    exps = history.experiments(db, run.id)
    plot = plot_effects(
        [e for e in exps if e.kind == "candidate"],
        path.with_suffix(".png"),
        metric=run.metric or "the primary metric",
        min_effect=_float(run.policy.get("min_effect")),
        noise_floor=run.noise_floor,
        title=f"Run {run.name}: effect per experiment",
        direction=str(run.policy.get("direction") or "higher"),
    )
    blocks, _ = build(db, run, plot)
    text = (
        render_html(blocks, f"autoresearch run {run.name}")
        if fmt == "html"
        else render_markdown(blocks, path.parent)
    )
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return Written(path, plot)


def markdown(db: sqlite_utils.Database, run_ref: str | int, base: Path) -> str:
    """A run's report as markdown text, written nowhere and without the plot (what an agent reads
    through the MCP server; `write_report` writes the file with its plot)."""
    blocks, _ = build(db, history.find_run(db, run_ref), None)
    return render_markdown(blocks, base)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None
