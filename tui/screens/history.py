"""The history pane: runs, their experiments with decision, effect and interval, a chart of the
primary metric, side-by-side comparison, and re-deciding a run under another policy."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Input, Label, Static

from kb.vocabulary import STATUS_MEANINGS, VERDICT_STATUS
from tui import data
from tui.format import RICH_STATUS_COLOURS, duration, interval, pct, ts
from tui.messages import PageLoaded, RedecideCompleted, RunsLoaded, SeriesLoaded, WavesLoaded
from tui.screens.base import AppScreen, DetailScreen
from tui.screens.compare import CompareScreen
from tui.screens.dialogs import ConfirmScreen
from tui.screens.log import LogScreen
from tui.text import Text
from tui.widgets.common import PagedTable, cell, fit_columns, right, status_cell
from tui.widgets.history import MetricChart


class HistoryScreen(AppScreen):
    PANE = "history"
    BINDINGS = [
        Binding("space", "mark", "Mark"),
        Binding("v", "compare", "Compare"),
        Binding("d", "redecide", "Re-decide"),
        Binding("c", "copy_sha", "Copy sha"),
        Binding("l", "open_log", "Log"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runs: list[Any] = []
        self.run_id: int | None = None
        self.marked: int | None = None
        self.page: data.Page[data.ExperimentLine] | None = None

    def compose_body(self) -> ComposeResult:
        yield DataTable(id="runs", cursor_type="row")
        yield Static(id="waves-line")
        yield MetricChart(id="chart")
        yield PagedTable(
            "Experiments",
            [
                ("#", 5),
                ("W", 2),
                ("Status", 13),
                ("Verdict", 12),
                ("Effect", 7),
                ("Interval", 17),
                ("Pairs", 5),
                ("Title", None),
            ],
            id="experiments",
        )
        yield Static(id="status-legend")

    def is_loaded(self) -> bool:
        return (
            self.query_one("#experiments", PagedTable).loaded
            and self.query_one(MetricChart).series is not None
        )

    def reload(self) -> None:
        self.load_runs()
        if self.run_id is not None:
            self.load_run(self.run_id, self.query_one("#experiments", PagedTable).page_offset)

    @work(thread=True, group="runs", exclusive=True, exit_on_error=False)
    def load_runs(self) -> None:
        with self.store.session() as db:
            found = data.runs(db)
        self.post_message(RunsLoaded(found))

    @work(thread=True, group="run", exclusive=True, exit_on_error=False)
    def load_run(self, run_id: int, offset: int) -> None:
        with self.store.session() as db:
            page = data.run_experiments(db, run_id, offset, self.autoapp.page_size)
            waves = data.waves(db, run_id)
            series = data.metric_series(db, run_id)
        self.post_message(WavesLoaded(run_id, waves))
        self.post_message(PageLoaded("experiments", page))
        self.post_message(SeriesLoaded(run_id, series))

    def on_runs_loaded(self, message: RunsLoaded) -> None:
        self.runs = message.runs
        table = self.query_one("#runs", DataTable)
        keep = table.cursor_row
        table.clear(columns=True)
        width = self.size.width or self.app.size.width
        wide = width >= 100
        spec: list[tuple[str, int | None]] = [("#", 3), ("Run", None), ("Status", 11)]
        spec += [("Started", 16)] if wide else []
        spec += [("Took", 6), ("Waves", 5), ("Exps", 5), ("Kept", 4), ("Winners", 7)]
        for label, w in fit_columns(spec, width):
            table.add_column(label, width=w, key=label)
        now = self.autoapp.clock()
        for r in message.runs:
            took = (r.ended_at or now) - r.started_at
            table.add_row(
                right(r.id),
                cell(r.name, "bold"),
                status_cell(r.status),
                *([cell(ts(r.started_at))] if wide else []),
                right(duration(took)),
                right(r.waves),
                right(r.experiments),
                right(r.kept),
                right(r.winners),
                key=str(r.id),
            )
        table.border_title = f"Runs ({len(message.runs)})"
        table.styles.height = min(len(message.runs), 4) + 2  # border and header
        if not message.runs:
            self.query_one("#chart", MetricChart).show(None)
            table.border_title = "Runs: none yet (start one in the fleet pane, 3 then s)"
            return
        ids = [r.id for r in message.runs]
        index = ids.index(self.run_id) if self.run_id in ids else min(keep, len(ids) - 1)
        table.move_cursor(row=index, animate=False)
        if self.run_id is None:
            self.select_run(ids[index])

    @on(DataTable.RowHighlighted, "#runs")
    def run_highlighted(self, event: DataTable.RowHighlighted) -> None:
        table = event.data_table  # the cursor now, not the rows highlighted while rebuilding
        if not table.row_count:
            return
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        if key is not None and int(key) != self.run_id:
            self.select_run(int(key))

    @on(DataTable.RowSelected, "#runs")
    def run_selected(self) -> None:
        self.query_one("#experiments").focus()

    def select_run(self, run_id: int) -> None:
        self.run_id = run_id
        self.marked = None
        self.load_run(run_id, 0)

    def on_waves_loaded(self, message: WavesLoaded) -> None:
        if message.run_id != self.run_id:
            return
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("waves ", style="bold")
        now = self.autoapp.clock()
        for i, w in enumerate(message.waves[-12:]):
            line.append(" · " if i else "")
            line.append(f"{w.number}", style="bold")
            line.append(f" {w.experiments} exps, ")
            line.append(f"{w.kept} kept", style="green" if w.kept else "")
            took = duration((w.ended_at or now) - w.started_at)
            line.append(f", {took}" if w.status == "finished" else f", {w.status} {took}", style="grey70")
        if not message.waves:
            line.append("none yet", style="grey50")
        self.query_one("#waves-line", Static).update(line)

    def on_series_loaded(self, message: SeriesLoaded) -> None:
        if message.run_id == self.run_id:
            self.query_one("#chart", MetricChart).show(message.series)

    def on_page_loaded(self, message: PageLoaded) -> None:
        self.page = message.page
        table = self.query_one("#experiments", PagedTable)
        run = next((r for r in self.runs if r.id == self.run_id), None)
        table.label = f"Experiments of {run.name}" if run else "Experiments"
        table.note = f"· #{self.marked} marked (v compares)" if self.marked else ""
        wide = (self.size.width or self.app.size.width) >= 100
        spec: list[tuple[str, int | None]] = [("#", 5), ("W", 2), ("Status", 13)]
        spec += [("Verdict", 12)] if wide else []
        spec += [("Effect", 6), ("Interval", 16), ("Pairs", 5), ("Title", None)]
        table.column_spec = spec
        table.show_page(message.page, [(str(e.id), self.row_cells(e, wide)) for e in message.page.rows])

    def row_cells(self, e: data.ExperimentLine, wide: bool) -> list[Text]:
        verdict = e.verdict or "-"
        title = ("★ " if e.winner else "") + (f"[{e.kind}] " if e.kind != "candidate" else "") + e.title
        mark = "▶" if e.id == self.marked else ""
        verdict_colour = RICH_STATUS_COLOURS.get(VERDICT_STATUS.get(verdict, verdict), "")
        return [
            right(f"{mark}{e.id}", "bold" if mark else ""),
            right(e.wave if e.wave is not None else "-"),
            cell(f"{e.status}:{e.reason}" if e.reason else e.status, RICH_STATUS_COLOURS.get(e.status, "")),
            *([cell(verdict, verdict_colour)] if wide else []),
            right(
                f"Δ{e.difference:+.3g}" if e.effect is None and e.difference is not None else pct(e.effect)
            ),
            cell(interval(e.ci_low, e.ci_high)),
            right(e.pairs or "-"),
            cell(title, "bold" if e.winner else ""),
        ]

    @on(DataTable.RowHighlighted, "#experiments")
    def explain_status(self) -> None:
        """The footer line says what the highlighted experiment's status word means."""
        chosen = self.current_experiment()
        meaning = STATUS_MEANINGS.get(chosen.status) if chosen else None
        line = f"{chosen.status}: {meaning}" if chosen and meaning else ""
        self.query_one("#status-legend", Static).update(line)

    @on(PagedTable.PageRequested, "#experiments")
    def page_requested(self, event: PagedTable.PageRequested) -> None:
        if self.run_id is not None:
            self.load_run(self.run_id, event.offset)

    def current_experiment(self) -> data.ExperimentLine | None:
        key = self.query_one("#experiments", PagedTable).current_key()
        if key is None or self.page is None:
            return None
        return next((e for e in self.page.rows if e.id == int(key)), None)

    @on(DataTable.RowSelected, "#experiments")
    def experiment_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.push_screen(CompareScreen(int(event.row_key.value)))

    def action_mark(self) -> None:
        chosen = self.current_experiment()
        if chosen is None:
            return
        self.marked = None if self.marked == chosen.id else chosen.id
        if self.page is not None:
            self.on_page_loaded(PageLoaded("experiments", self.page))

    def action_compare(self) -> None:
        chosen = self.current_experiment()
        if chosen is None:
            return
        if self.marked is None or self.marked == chosen.id:
            self.notify("mark one experiment with space, move to another, then v", severity="warning")
            return
        self.app.push_screen(CompareScreen(self.marked, chosen.id))

    def action_redecide(self) -> None:
        if self.run_id is not None:
            self.app.push_screen(RedecideScreen(self.run_id))

    def action_copy_sha(self) -> None:
        chosen = self.current_experiment()
        if chosen is not None:
            self.copy_sha(chosen.id)

    @work(thread=True, group="copy", exclusive=True, exit_on_error=False)
    def copy_sha(self, experiment_id: int) -> None:
        from runner.record import history  # sqlite_utils and the runner: a quarter second, paid on use

        with self.store.session() as db:
            info = history.experiment(db, experiment_id)
        sha = info.winner_commit or info.candidate_commit
        if sha:
            self.app.call_from_thread(self.autoapp.copy, sha, f"sha {sha[:10]} of experiment {experiment_id}")
        else:
            self.app.call_from_thread(
                self.notify, f"experiment {experiment_id} has no commit", severity="warning"
            )

    def action_open_log(self) -> None:
        chosen = self.current_experiment()
        if chosen is not None:
            self.app.push_screen(LogScreen(chosen.id, pane="history"))


class RedecideScreen(DetailScreen):
    """Re-judge a run's decided experiments from their stored samples under a changed policy and
    list what flips; ctrl+s stores the new verdicts (as re-analyses: the run's own stay)."""

    PANE = "history"
    BINDINGS = [Binding("ctrl+s", "save", "Save verdicts", priority=True)]

    def __init__(self, run_id: int) -> None:
        super().__init__()
        self.run_id = run_id
        self.result: Any = None
        self.filled = False

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="redecide-form"):
            yield Label("min effect %")
            yield Input(id="min-effect", placeholder="1.0", compact=True)
            yield Label("alpha")
            yield Input(id="alpha", placeholder="0.05", compact=True)
            yield Label("max pairs")
            yield Input(id="max-pairs", placeholder="80", compact=True)
        yield Static(id="redecide-summary")
        yield DataTable(id="redecide-table", cursor_type="row")

    def reload(self) -> None:
        if self.result is None:
            self.compute(None, None, None, False)

    def options(self) -> tuple[float | None, float | None, int | None]:
        def read(widget_id: str) -> str:
            return self.query_one(f"#{widget_id}", Input).value.strip()

        try:
            min_effect = float(read("min-effect")) / 100 if read("min-effect") else None
            alpha = float(read("alpha")) if read("alpha") else None
            max_pairs = int(read("max-pairs")) if read("max-pairs") else None
        except ValueError as exc:
            raise ValueError(f"not a number: {exc}") from None
        return min_effect, alpha, max_pairs

    @on(Input.Submitted)
    def submitted(self) -> None:
        try:
            min_effect, alpha, max_pairs = self.options()
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self.compute(min_effect, alpha, max_pairs, False)

    @work(thread=True, group="redecide", exclusive=True, exit_on_error=False)
    def compute(
        self, min_effect: float | None, alpha: float | None, max_pairs: int | None, save: bool
    ) -> None:
        fallback = self.store.fallback_policy()
        with self.store.session() as db:
            result = data.redecide(
                db,
                self.run_id,
                min_effect=min_effect,
                alpha=alpha,
                max_pairs=max_pairs,
                save=save,
                fallback_policy=fallback,
            )
        self.post_message(RedecideCompleted(result))

    def on_redecide_completed(self, message: RedecideCompleted) -> None:
        r = self.result = message.result
        self.set_trail(f"re-decide run {r.run.name}")
        if not self.filled:
            self.filled = True
            self.query_one("#min-effect", Input).value = f"{r.policy.min_effect * 100:g}"
            self.query_one("#alpha", Input).value = f"{r.policy.alpha:g}"
            self.query_one("#max-pairs", Input).value = f"{r.policy.max_pairs}"
            self.query_one("#min-effect", Input).focus()
        flips = r.flips
        summary = Text()
        summary.append(f"{len(flips)} of {len(r.items)} decided experiments flip", style="bold")
        summary.append(
            f" under min effect {r.policy.min_effect:.1%}, alpha {r.policy.alpha:g}, "
            f"max pairs {r.policy.max_pairs}"
            f" (the run used {r.old_policy.min_effect:.1%}, {r.old_policy.alpha:g}, {r.old_policy.max_pairs})"
            f"; metric {r.metric}; {len(r.skipped)} skipped",
        )
        if r.saved:
            summary.append(f"\nsaved {r.saved} verdicts as re-analyses", style="green")
        else:
            summary.append("\nenter re-computes · ctrl+s saves the new verdicts", style="grey50")
        self.query_one("#redecide-summary", Static).update(summary)
        table = self.query_one("#redecide-table", DataTable)
        table.clear(columns=True)
        width = self.size.width or self.app.size.width
        wide = width >= 100
        spec: list[tuple[str, int | None]] = [
            ("#", 5),
            ("Title", None),
            ("Old", 12),
            ("New", 16),
            ("Effect", 6),
        ]
        spec += [("Interval", 16)] if wide else []
        spec += [("Pairs", 5)]
        for label, w in fit_columns(spec, width):
            table.add_column(label, width=w, key=label)
        for item in sorted(r.items, key=lambda i: (not i.flipped, i.experiment_id)):
            d = item.new
            style = "bold yellow" if item.flipped else ""
            table.add_row(
                right(item.experiment_id, style),
                cell(item.title, style),
                cell(item.old_verdict or "-"),
                cell(("→ " if item.flipped else "") + d.verdict + (" (short)" if item.short else ""), style),
                right(pct(d.effect)),
                *([cell(interval(d.ci_low, d.ci_high))] if wide else []),
                right(d.pairs),
                key=str(item.experiment_id),
            )

    def action_save(self) -> None:
        try:
            min_effect, alpha, max_pairs = self.options()
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.compute(min_effect, alpha, max_pairs, True)

        self.app.push_screen(
            ConfirmScreen(
                "Save these verdicts?", "Stored as re-analyses (origin redecide); the run's own stay."
            ),
            answer,
        )
