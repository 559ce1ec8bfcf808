"""The Textual app: four panes (knowledge, hypotheses, fleet, history) over the workspace database.

`make_app()` is the one factory the CLI (`autoresearch tui`, also behind `--serve`), the tests and
the benchmark use (with textual-dev installed: `textual run --dev -c autoresearch tui`). The app
reads the database in thread workers (a fresh connection each), notices commits by other
processes through `PRAGMA data_version` (polled in a worker of its own), and steers the runner by
writing to the database or by starting detached `autoresearch` processes.

The app imports the screens (each pane's module when it is first shown, to keep start-up to one)
and wires them; the screens see the app only as `tui.host.Host`, so nothing imports back.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.signal import Signal
from textual.worker import Worker, WorkerState, get_current_worker

from kb.errors import UserError
from kb.packaged import packaged
from kb.textsafe import inert
from tui import data
from tui.host import Clock
from tui.messages import DatabaseChanged, ProcessFinished
from tui.panes import NAMES, PANES, Pane
from tui.spawn import RunRequest, Spawner, cli_argv, log_name, spawn_detached, wait

if TYPE_CHECKING:
    from tui.host import Host
    from tui.screens.help import HelpSections

PANE_NAMES = NAMES


def _pane_screen(pane: Pane) -> Callable[[], Screen[Any]]:
    """Each pane's screen module is imported when the pane is first shown: start-up imports one."""
    return lambda: cast(Screen[Any], pane.make_screen())


class AutoresearchApp(App[None]):
    CSS_PATH = [packaged("tui", "styles", "app.tcss")]
    TITLE = "autoresearch"
    MODES: ClassVar[dict[str, str | Callable[[], Screen[Any]]]] = {p.name: _pane_screen(p) for p in PANES}
    BINDINGS = [
        *(Binding(p.key, f"switch_mode('{p.name}')", p.label, show=False) for p in PANES),
        Binding("slash", "search", "Search", show=False),
        Binding("question_mark,f1", "help", "Help", show=False),
        Binding("q", "quit", "Quit", show=False),
    ]

    def __init__(
        self,
        store: data.Store,
        *,
        pane: str = "fleet",
        clock: Clock = time.time,
        poll_interval: float | None = 1.0,
        fleet_interval: float | None = 1.0,
        spawner: Spawner = spawn_detached,
        page_size: int = data.PAGE_SIZE,
    ) -> None:
        super().__init__()
        if pane not in PANE_NAMES:
            raise UserError(f"--pane {pane}: must be one of {', '.join(PANE_NAMES)}")
        self.store = store
        self.initial_pane = pane
        self.clock = clock
        self.poll_interval = poll_interval
        self.fleet_interval = fleet_interval
        self.spawner = spawner
        self.page_size = page_size
        self.db_changed: Signal[int] = Signal(self, "db-changed")
        self.data_version: int | None = None
        self.processes: list[int] = []
        self._stop_polling = threading.Event()
        self.first_paint: float | None = None

    # --- life cycle ------------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.switch_mode(self.initial_pane)
        if self.poll_interval:
            self.poll_database()

    def screen_painted(self) -> None:
        """The first screen is on the terminal (the cold-start benchmark reads `first_paint`)."""
        if self.first_paint is None:
            self.first_paint = time.perf_counter()

    def on_unmount(self) -> None:
        self._stop_polling.set()  # the poller's thread must end, or the interpreter waits for it

    @work(thread=True, group="poll", exit_on_error=False, name="data_version poller")
    def poll_database(self) -> None:
        """Post DatabaseChanged when another connection commits (PRAGMA data_version moves)."""
        interval = self.poll_interval or 1.0
        worker = get_current_worker()
        last: int | None = None
        while not worker.is_cancelled and not self._stop_polling.is_set():
            try:
                with self.store.session() as db:
                    # data_version only moves for other connections' commits: keep this one open.
                    while not worker.is_cancelled:
                        current = data.version(db)
                        if last is not None and current != last:
                            self.post_message(DatabaseChanged(current))
                        last = current
                        if self._stop_polling.wait(interval):
                            return
            except (sqlite3.Error, UserError):
                if self._stop_polling.wait(interval):  # locked or moved: try again
                    return

    def on_database_changed(self, message: DatabaseChanged) -> None:
        self.data_version = message.version
        self.db_changed.publish(message.version)

    def notify_changed(self) -> None:
        """This process wrote: refresh now rather than at the next poll."""
        self.db_changed.publish(-1)

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """A toast; its text is never markup and always inert: messages quote run names, errors,
        a spawned command's output (kb/textsafe.py). Every widget's `notify` lands here."""
        super().notify(inert(message), title=inert(title), severity=severity, timeout=timeout, markup=False)

    # --- errors: one handler for every worker ----------------------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        self.report_worker(event.worker)

    def report_worker(self, worker: Worker[Any]) -> None:
        if worker.state != WorkerState.ERROR or worker.error is None:
            return
        error = worker.error
        if isinstance(error, UserError):
            self.notify(str(error), severity="error", timeout=8)
        elif isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
            self.notify("the database is busy (another process is writing); try again", severity="warning")
        else:
            self.log.error(f"worker {worker.name} failed", error)
            self.notify(f"{type(error).__name__}: {error}", title=worker.name, severity="error", timeout=10)

    # --- navigation --------------------------------------------------------------------------------

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(help_sections()))

    async def action_search(self) -> None:
        from tui.screens.knowledge import KnowledgeScreen

        await self.switch_mode("knowledge")
        while not isinstance(self.screen, KnowledgeScreen) and len(self.screen_stack) > 1:
            await self.pop_screen()  # back from a paper or commit to the pane itself
        screen = self.screen
        if isinstance(screen, KnowledgeScreen):
            screen.action_show_tab("search")

    def open_evidence(self, evidence_id: int) -> None:
        """Open a cited evidence item in its own view: a paper passage in the reader, a fork
        commit's diff, an inventory row; pushed on the current pane, so Escape comes back."""
        self._open_evidence(evidence_id)

    @work(thread=True, group="open-evidence", exclusive=True, exit_on_error=False)
    def _open_evidence(self, evidence_id: int) -> None:
        with self.store.session() as db:
            link = data.evidence_link(db, evidence_id)
            paper_id = data.passage_index(db, evidence_id)[0] if link.kind == "passage" else None
        self.call_from_thread(self._push_evidence, link, paper_id)

    def _push_evidence(self, link: data.EvidenceLink, paper_id: int | None) -> None:
        from tui.screens.evidence import CommitScreen, EvidenceScreen, FusionScreen, PaperScreen

        screen: Screen[None]
        if link.kind == "passage" and paper_id is not None:
            screen = PaperScreen(paper_id, select_id=link.id, pane=self.current_mode)
        elif link.kind == "commit":
            screen = CommitScreen(link.id, pane=self.current_mode)
        elif link.kind in ("fusion", "gap", "single_op"):
            screen = FusionScreen(link.id, pane=self.current_mode)
        else:
            screen = EvidenceScreen(link.id, pane=self.current_mode)
        self.push_screen(screen)

    def copy(self, text: str, what: str) -> None:
        """Copy through the terminal (OSC 52), which works over SSH and in tmux with set-clipboard."""
        self.copy_to_clipboard(text)
        self.notify(f"copied {what}", timeout=3)

    # --- steering: runs and processes ------------------------------------------------------------

    def start_run(self, request: RunRequest) -> None:
        self.run_cli("run", request.args(), wait_seconds=60)

    def mine_hypotheses(self) -> None:
        self.run_cli("mine", ["hypotheses", "mine", "--json"], wait_seconds=None)

    def generate_hypotheses(self) -> None:
        self.run_cli("generate", ["hypotheses", "generate", "--json"], wait_seconds=None)

    @work(thread=True, group="spawn", exit_on_error=False)
    def run_cli(self, what: str, args: list[str], wait_seconds: float | None) -> None:
        """Start `autoresearch ARGS` detached, wait for it (in this worker) and report its end.
        It goes on if the TUI quits; its output goes to logs/tui-WHAT-*.log."""
        argv = cli_argv(self.store.root, *args)
        log_path = log_name(self.store.root, what)
        proc = self.spawner(argv, cwd=self.store.root, log_path=log_path)
        self.processes.append(proc.pid)
        self.call_from_thread(self.notify, f"{what}: started (pid {proc.pid})", timeout=4)
        worker = get_current_worker()
        result = wait(
            proc,
            argv,
            log_path,
            timeout=wait_seconds,
            cancelled=lambda: worker.is_cancelled or self._stop_polling.is_set(),
        )
        self.post_message(ProcessFinished(what, result))

    def on_process_finished(self, message: ProcessFinished) -> None:
        r = message.result
        if r.returncode is None:
            self.notify(
                f"{message.what}: still running in the background (pid {r.pid}); log {r.log_path.name}"
            )
        elif r.returncode == 0:
            summary = r.tail
            if message.what == "run" and r.data:
                summary = f"run {r.data.get('name')} started in the background (pid {r.data.get('pid')})"
            self.notify(f"{message.what}: {summary or 'done'}", timeout=6)
        else:
            self.notify(f"{message.what} failed ({r.returncode}): {r.tail}", severity="error", timeout=10)
        self.notify_changed()

    @work(thread=True, group="steer", exit_on_error=False)
    def steer_run(self, kind: str, run_id: int, args: dict[str, Any] | None = None) -> None:
        """Send a run a command (pause, resume, stop; focus, avoid, approval, budget with `args`)."""
        with self.store.session() as db:
            data.steer_run(db, kind, run_id, self.clock(), args)
        self.call_from_thread(self.notify, f"{kind}: sent to the runner{_said(kind, args)}", timeout=4)
        self.call_from_thread(self.notify_changed)

    @work(thread=True, group="steer", exit_on_error=False)
    def cancel_experiment(self, experiment_id: int) -> None:
        with self.store.session() as db:
            data.cancel_experiment(db, experiment_id)
        self.call_from_thread(
            self.notify, f"cancel experiment {experiment_id}: sent to the runner", timeout=4
        )
        self.call_from_thread(self.notify_changed)

    # --- the command palette -----------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for pane in PANES:
            yield SystemCommand(f"Go to {pane.label}", f"Show {pane.what}", self._go(pane.name))
        yield SystemCommand(
            "Search the knowledge base", "Live search over papers, commits, fusions", self.action_search
        )
        yield SystemCommand(
            "Start a run", "Start a detached runner (autoresearch run --detach)", self._start_dialog
        )
        yield SystemCommand("Resume the interrupted run", "autoresearch run --detach --resume", self._resume)
        yield SystemCommand(
            "Pause the run", "Running batches finish, nothing new starts", self._steer("pause")
        )
        yield SystemCommand("Resume the paused run", "Start new experiments again", self._steer("resume"))
        yield SystemCommand("Stop the run", "Cancel running experiments and end the run", self._steer("stop"))
        for title, help_text, action in (
            (
                "Focus the research",
                "A direction for the next research phases (f on the fleet)",
                "note('focus')",
            ),
            ("Avoid in the research", "A direction the research should leave alone (v)", "note('avoid')"),
            ("Approval on/off", "Generated hypotheses wait for a person, or not (a)", "toggle_approval"),
            ("Change the run's budget", "Minutes and dollars; raise it to go on (b)", "budget"),
        ):
            yield SystemCommand(title, help_text, self._on_fleet(action))
        yield SystemCommand(
            "Mine hypotheses",
            "autoresearch hypotheses mine (fusion gaps, fork commits)",
            self.mine_hypotheses,
        )
        yield SystemCommand(
            "Generate hypotheses", "autoresearch hypotheses generate (the LLM)", self.generate_hypotheses
        )
        yield SystemCommand("Help", "Every key of every pane", self.action_help)

    def _go(self, mode: str) -> Callable[[], None]:
        def go() -> None:
            self.switch_mode(mode)

        return go

    def _on_fleet(self, action: str) -> Callable[[], Awaitable[None]]:
        """A fleet-pane action from anywhere: go to the fleet pane, then run it there."""

        async def go() -> None:
            from tui.screens.fleet import FleetScreen

            await self.switch_mode("fleet")
            if isinstance(self.screen, FleetScreen):
                await self.screen.run_when_loaded(action)

        return go

    def _start_dialog(self) -> None:
        from tui.screens.dialogs import StartRunScreen

        def started(request: RunRequest | None) -> None:
            if request is not None:
                self.start_run(request)

        self.push_screen(StartRunScreen(), started)

    def _resume(self) -> None:
        self.start_run(RunRequest(resume=True))

    def _steer(self, kind: str) -> Callable[[], None]:
        def go() -> None:
            self._steer_current(kind)

        return go

    @work(thread=True, group="steer", exit_on_error=False)
    def _steer_current(self, kind: str) -> None:
        with self.store.session() as db:
            run_id = data.current_run_id(db)
            if run_id is None:
                raise UserError(f"{kind}: there is no run yet")
            data.steer_run(db, kind, run_id, self.clock())
        self.call_from_thread(self.notify, f"{kind}: sent to the runner", timeout=4)
        self.call_from_thread(self.notify_changed)


def _said(kind: str, args: dict[str, Any] | None) -> str:
    """What a steering command says, for its notification ("" when it has no arguments)."""
    if not args:
        return ""
    if kind == "approval":
        return f" (approval {'on' if args.get('on') else 'off'})"
    if "text" in args:
        return f": {args['text']}"
    return " (" + ", ".join(f"{k} {v}" for k, v in args.items() if v is not None) + ")"


def help_sections() -> HelpSections:
    """The help screen's sections: every screen whose keys it lists (importing them all)."""
    from tui.screens.compare import CompareScreen
    from tui.screens.dialogs import NoteScreen, StartRunScreen
    from tui.screens.evidence import CommitScreen, PaperScreen
    from tui.screens.history import RedecideScreen
    from tui.screens.hypotheses import HypothesisScreen
    from tui.screens.log import LogScreen
    from tui.widgets.common import PagedTable

    # The screens a pane opens, listed after it.
    opened: dict[str, list[tuple[str, type]]] = {
        "knowledge": [("Paper reader", PaperScreen), ("Fork commit", CommitScreen)],
        "hypotheses": [("Hypothesis detail (enter on an evidence row opens it)", HypothesisScreen)],
        "fleet": [
            ("Start-run dialog", StartRunScreen),
            ("Focus / avoid note dialog", NoteScreen),
            ("Log viewer", LogScreen),
        ],
        "history": [("Comparison", CompareScreen), ("Re-decide", RedecideScreen)],
    }
    sections: HelpSections = [("Everywhere", AutoresearchApp), ("Tables", PagedTable)]
    for pane in PANES:
        sections.append((f"{pane.key} {pane.label} ({pane.help})", pane.screen_class()))
        sections += opened.get(pane.name, [])
    return sections


def make_app(
    workspace_root: Path | str,
    *,
    pane: str = "fleet",
    clock: Clock = time.time,
    poll_interval: float | None = 1.0,
    fleet_interval: float | None = 1.0,
    spawner: Spawner = spawn_detached,
    page_size: int = data.PAGE_SIZE,
) -> AutoresearchApp:
    """The app on a workspace folder: the one factory for the CLI, tests and `textual run --dev`.

    `clock` fixes "now" (elapsed times, heartbeat ages) for snapshots; `poll_interval=None` turns
    the data_version poller off and `fleet_interval=None` the fleet pane's timer (tests drive
    refreshes themselves); `spawner` starts processes (tests may record argv instead).
    """
    root = Path(workspace_root).expanduser().resolve()
    if not (root / data.DB_NAME).is_file():
        raise UserError(f"{root}: no workspace database here (run autoresearch init)")
    return AutoresearchApp(
        data.Store(root),
        pane=pane,
        clock=clock,
        poll_interval=poll_interval,
        fleet_interval=fleet_interval,
        spawner=spawner,
        page_size=page_size,
    )


if TYPE_CHECKING:
    _HOST: type[Host] = AutoresearchApp  # mypy: the app provides everything the screens use
