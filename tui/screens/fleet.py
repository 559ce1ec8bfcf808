"""The fleet pane: the current run, its workers and experiments live, the selected one's log tail;
an autopilot run's research log and steering notes; start, pause, resume and stop the run, steer
its research (focus, avoid, approval), cancel an experiment, open a full log."""

from __future__ import annotations

import time
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from tui import data
from tui.format import clip, duration
from tui.messages import FleetRefreshed
from tui.screens.base import AppScreen
from tui.screens.dialogs import BudgetScreen, ConfirmScreen, NoteScreen, StartRunScreen
from tui.screens.log import LogScreen
from tui.spawn import RunRequest
from tui.text import Text
from tui.widgets.common import cell, fit_columns, right, status_cell
from tui.widgets.fleet import ResearchLog

TAIL_LINES = 8


class FleetScreen(AppScreen):
    PANE = "fleet"
    AUTO_FOCUS = "#fleet-exps"
    BINDINGS = [
        Binding("s", "start_run", "Start run"),
        Binding("p", "pause", "Pause"),
        Binding("S", "stop", "Stop run"),
        Binding("R", "resume_run", "Resume interrupted", show=False),
        # The research log's title names these three (the footer has no room at 80 columns).
        Binding("f", "note('focus')", "Focus the research", show=False),
        Binding("v", "note('avoid')", "Avoid in the research", show=False),
        Binding("a", "toggle_approval", "Approval on/off", show=False),
        Binding("b", "budget", "Budget of the run", show=False),
        Binding("x", "cancel_experiment", "Cancel"),
        Binding("l", "open_log", "Log"),
        Binding("c", "copy_id", "Copy id", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot: data.FleetSnapshot | None = None
        self.selected: int | None = None
        self.requested_at: float | None = None
        self.deferred: str | None = None
        """An action asked for before the first snapshot arrived (from the palette): run then."""
        self.last_refresh: float | None = None
        """Seconds from asking for a refresh to the pane showing it (the benchmark reads it)."""
        self.refreshes = 0
        self.refresh_times: list[float] = []
        self.query_times: list[float] = []

    def compose_body(self) -> ComposeResult:
        yield Static(id="run-line")
        yield DataTable(id="workers", cursor_type="row")
        yield ResearchLog(id="research-log")
        yield DataTable(id="fleet-exps", cursor_type="row")
        yield Static(id="log-tail")

    def on_mount(self) -> None:
        super().on_mount()
        interval = self.autoapp.fleet_interval
        if interval:
            # Log files and elapsed times move without a database commit: tick while visible.
            self.set_interval(interval, self._tick)

    def _tick(self) -> None:
        if self.is_current and not self.workers_running("fleet"):
            self.reload()

    def workers_running(self, group: str) -> bool:
        return any(w.node is self and w.group == group and w.is_running for w in self.app.workers)

    def reload(self) -> None:
        self.requested_at = time.perf_counter()
        self.load(self.selected)

    @work(thread=True, group="fleet", exclusive=True, exit_on_error=False)
    def load(self, selected: int | None) -> None:
        start = time.perf_counter()
        with self.store.session() as db:
            snapshot = data.fleet(db, approval_default=self.store.require_approval())
        ids = [e.id for e in snapshot.experiments]
        if selected not in ids:
            selected = ids[0] if ids else None
        chosen = next((e for e in snapshot.experiments if e.id == selected), None)
        tail = data.log_tail(chosen.log_path, TAIL_LINES) if chosen else []
        self.post_message(FleetRefreshed(snapshot, tail, selected, time.perf_counter() - start))

    def on_fleet_refreshed(self, message: FleetRefreshed) -> None:
        self.snapshot = snap = message.snapshot
        self.query_times.append(message.elapsed)
        now = self.autoapp.clock()
        self.query_one("#run-line", Static).update(self.run_line(snap.run, now))
        workers = self.query_one("#workers", DataTable)
        keep = workers.cursor_row
        workers.clear(columns=True)
        for label, width in fit_columns(
            [
                ("Worker", 12),
                ("Backend", 8),
                ("Status", 10),
                ("Phase", 9),
                ("Noise", 6),
                ("Cost", 6),
                ("Experiment", None),
            ],
            self.size.width or self.app.size.width,
        ):
            workers.add_column(label, width=width, key=label)
        for wk in snap.workers:
            workers.add_row(
                cell(wk.name),
                cell(wk.backend),
                status_cell(wk.status),
                cell(wk.phase or "-"),
                right(f"{wk.noise:.1%}" if wk.noise is not None else "-"),
                right(f"${wk.cost_usd:.2f}" if wk.cost_usd else "-"),
                cell(f"#{wk.experiment_id} {wk.experiment}" if wk.experiment_id else "-"),
                key=str(wk.id),
            )
        if workers.row_count:
            workers.move_cursor(row=min(keep, workers.row_count - 1), animate=False)
        workers.styles.height = min(len(snap.workers), 5) + 2  # border and header
        workers.border_title = f"Workers ({len(snap.workers)})"
        workers.display = bool(snap.workers)

        width = self.size.width or self.app.size.width
        research = self.query_one("#research-log", ResearchLog)
        run = snap.run
        steering = snap.steering
        research.display = run is not None and (
            run.autopilot or bool(snap.research or steering.focus or steering.avoid)
        )
        if research.display:
            height = self.size.height or self.app.size.height
            # A short terminal keeps room for the experiments: the newest phase only (it scrolls).
            research.show(snap.research, steering, snap.approval, width, rows=4 if height >= 32 else 1)

        exps = self.query_one("#fleet-exps", DataTable)
        exps.clear(columns=True)
        wide = width >= 100
        spec: list[tuple[str, int | None]] = [("#", 5), ("Wave", 4)] if wide else [("#", 4)]
        spec += [("Title", None)] + ([("Worker", 9)] if wide else [])
        spec += [("Status", 13), ("Phase", 10 if wide else 7), ("Elapsed", 7), ("Pairs", 5)]
        for label, w in fit_columns(spec, width):
            exps.add_column(label, width=w, key=label)
        for e in snap.experiments:
            cells = [right(e.id)] + ([right(e.wave if e.wave is not None else "-")] if wide else [])
            cells += [cell(e.title)] + ([cell(e.worker or "-")] if wide else [])
            cells += [
                status_cell(e.status),
                cell(e.phase or e.reason or "", "grey70"),
                right(duration(e.elapsed(now))),
                right(e.pairs or "-"),
            ]
            exps.add_row(*cells, key=str(e.id))
        ids = [e.id for e in snap.experiments]
        self.selected = message.tail_of
        if message.tail_of in ids:
            exps.move_cursor(row=ids.index(message.tail_of), animate=False)
        live = sum(1 for e in snap.experiments if e.status in data.LIVE_EXPERIMENT_STATUSES)
        exps.border_title = f"Experiments: {live} live, latest finished below"
        self.show_tail(message.tail, message.tail_of)
        self.refreshes += 1
        if self.deferred is not None:
            action, self.deferred = self.deferred, None
            self.call_later(self.run_action, action)
        if self.requested_at is not None:
            requested = self.requested_at
            self.call_after_refresh(self._painted, requested)

    def _painted(self, requested: float) -> None:
        self.last_refresh = time.perf_counter() - requested
        self.refresh_times.append(self.last_refresh)

    def is_loaded(self) -> bool:
        return self.refreshes > 0

    async def run_when_loaded(self, action: str) -> None:
        """Run a steering action now, or once the run is known (the pane was just opened)."""
        if self.is_loaded():
            await self.run_action(action)
        else:
            self.deferred = action

    def run_line(self, run: data.RunStatus | None, now: float) -> Text:
        line = Text(no_wrap=False)
        if run is None:
            line.append("no run yet", style="bold")
            line.append(
                " · s starts one (a detached `autoresearch run`; it outlives this TUI)", style="grey70"
            )
            return line
        line.append(f"run {run.name}", style="bold")
        line.append(f" (#{run.id}) ")
        line.append(run.status, style=status_cell(run.status).style)
        live = run.status in data.LIVE_RUN_STATUSES
        if live and run.phase:
            line.append(f" · {run.phase}", style="bold cyan")
        if run.autopilot:
            line.append(" · autopilot", style="cyan")
            if run.model:
                line.append(f" ({run.model})", style="grey70")
        if run.wave is not None:
            line.append(f" · wave {run.wave}")
        line.append(f" · {run.experiments} experiments, {run.kept} kept · {run.backend}")
        if run.cost_usd:
            line.append(f" · ${run.cost_usd:.2f}")
        age = run.heartbeat_age(now)
        if live:
            if run.runner_live(now):
                line.append(f" · runner pid {run.pid or '?'}, heartbeat {duration(age)} ago", style="green")
            else:
                line.append(
                    f" · runner silent for {duration(age)} (R resumes it if it is gone)", style="bold yellow"
                )
        elif run.status == "interrupted":
            line.append(" · R resumes it", style="yellow")
        else:
            line.append(
                f" · ended {duration(now - run.ended_at) if run.ended_at else '-'} ago", style="grey70"
            )
        if not live and run.stop_reason:
            line.append(f"\nstopped: {run.stop_reason}", style="bold")
            if run.stop_meaning:
                line.append(f" ({run.stop_meaning})", style="grey70")
        if run.pending_commands:
            line.append(f" · {run.pending_commands} command(s) waiting for the runner", style="yellow")
        if run.error:
            line.append(f"\n{clip(run.error, 200)}", style="red")
        return line

    def show_tail(self, tail: list[str], experiment_id: int | None) -> None:
        widget = self.query_one("#log-tail", Static)
        chosen = self.experiment(experiment_id)
        if chosen is None:
            widget.border_title = "log"
            widget.update(Text("no experiment selected", style="grey50"))
            return
        name = chosen.log_path.rsplit("/", 1)[-1] if chosen.log_path else "no log yet"
        widget.border_title = Text(f"log · #{chosen.id} · {name} · l opens it")  # never markup
        text = Text(
            "\n".join(tail) if tail else "(empty)",
            style="" if tail else "grey50",
            no_wrap=True,
            overflow="ellipsis",
        )
        widget.update(text)

    def experiment(self, experiment_id: int | None) -> data.FleetExperiment | None:
        if self.snapshot is None:
            return None
        return next((e for e in self.snapshot.experiments if e.id == experiment_id), None)

    @on(DataTable.RowHighlighted, "#fleet-exps")
    def highlighted(self, event: DataTable.RowHighlighted) -> None:
        # Where the cursor is now, not where the event says: rebuilding the table after a refresh
        # highlights rows on the way, and following those would refresh forever.
        table = event.data_table
        if not table.row_count:
            return
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        if key is not None and int(key) != self.selected:
            self.selected = int(key)
            self.reload()

    @on(DataTable.RowSelected, "#fleet-exps")
    def row_selected(self) -> None:
        self.action_open_log()

    # --- steering -------------------------------------------------------------------------------

    def current_run(self) -> data.RunStatus | None:
        return self.snapshot.run if self.snapshot else None

    def action_start_run(self) -> None:
        run = self.current_run()
        if run is not None and run.runner_live(self.autoapp.clock()):
            self.notify(f"run {run.name} is going; stop it first (S)", severity="warning")
            return

        def chosen(request: RunRequest | None) -> None:
            if request is not None:
                self.autoapp.start_run(request)

        self.app.push_screen(StartRunScreen(), chosen)

    def action_resume_run(self) -> None:
        run = self.current_run()
        if run is None or run.runner_live(self.autoapp.clock()) or run.status in ("finished", "failed"):
            self.notify("no interrupted run to resume", severity="warning")
            return
        self.autoapp.start_run(RunRequest(resume=True))

    def action_pause(self) -> None:
        run = self.current_run()
        if run is None:
            self.notify("no run", severity="warning")
            return
        self.autoapp.steer_run("resume" if run.status == "paused" else "pause", run.id)

    def action_stop(self) -> None:
        run = self.current_run()
        if run is None:
            self.notify("no run", severity="warning")
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.autoapp.steer_run("stop", run.id)

        self.app.push_screen(
            ConfirmScreen(f"Stop run {run.name}?", "Running experiments are cancelled; the run ends."), answer
        )

    def action_note(self, kind: str) -> None:
        """A focus or avoid note for the run's next research phases."""
        run = self.current_run()
        if run is None:
            self.notify("no run", severity="warning")
            return
        question, hint = {
            "focus": ("Focus the research on:", "e.g. the AVX2 quantised matmul kernels"),
            "avoid": ("Keep the research away from:", "e.g. changes to the build system"),
        }[kind]
        detail = f"run {run.name}: the next research phase reads it (the newest ten notes stay)"

        def written(text: str | None) -> None:
            if text:
                self.autoapp.steer_run(kind, run.id, {"text": text})

        self.app.push_screen(NoteScreen(question, detail, hint), written)

    def action_toggle_approval(self) -> None:
        """Do the run's generated hypotheses wait for a person? Flip it."""
        run = self.current_run()
        if run is None or self.snapshot is None:
            self.notify("no run", severity="warning")
            return
        self.autoapp.steer_run("approval", run.id, {"on": not self.snapshot.approval})

    def action_budget(self) -> None:
        """Raise (or lower) the run's budget: a run stopped by its budget can then go on."""
        run = self.current_run()
        if run is None:
            self.notify("no run", severity="warning")
            return
        detail = f"run {run.name}: spent ${run.cost_usd:.2f} so far"

        def chosen(args: dict[str, float] | None) -> None:
            if args:
                self.autoapp.steer_run("budget", run.id, dict(args))

        self.app.push_screen(BudgetScreen(detail), chosen)

    def action_cancel_experiment(self) -> None:
        chosen = self.experiment(self.selected)
        if chosen is None:
            return
        if chosen.status not in data.LIVE_EXPERIMENT_STATUSES:
            self.notify(f"experiment {chosen.id} is already {chosen.status}", severity="warning")
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.autoapp.cancel_experiment(chosen.id)

        self.app.push_screen(
            ConfirmScreen(f"Cancel experiment #{chosen.id}?", clip(chosen.title, 70)), answer
        )

    def action_open_log(self) -> None:
        if self.selected is not None:
            self.app.push_screen(LogScreen(self.selected))

    def action_copy_id(self) -> None:
        if self.selected is not None:
            self.autoapp.copy(str(self.selected), f"experiment id {self.selected}")
