"""Dialogs: a yes/no confirmation, a one-line steering note, a run's budget and the start-run form."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.widgets import Button, Checkbox, Input, Label, Static

from tui.screens.base import AppModal
from tui.spawn import RunRequest
from tui.text import Text


class ConfirmScreen(AppModal):
    """Ask before something that cannot be undone (cancel an experiment, stop a run)."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n", "answer(False)", "No")]

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="confirm"):
            yield Static(Text(self.question, style="bold"), id="question")
            if self.detail:
                yield Static(Text(self.detail, style="grey70"))
            with Horizontal(id="buttons"):
                yield Button("Yes (y)", id="yes", variant="error", compact=True)
                yield Button("No (n)", id="no", compact=True)

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class FormDialog(AppModal):
    """A dialog whose form becomes one value: enter, ctrl+s or its first button sends it (a bad
    field is named in the dialog's error line and nothing is sent); esc or Cancel sends None.
    Subclasses say what the form holds (`value`, raising ValueError) and where errors go."""

    BINDINGS = [Binding("ctrl+s", "submit", "Send", priority=True)]
    ERROR_ID = "form-error"
    SUBMIT_ID = "send"

    def value(self) -> object:
        raise NotImplementedError

    def action_submit(self) -> None:
        try:
            value = self.value()
        except ValueError as exc:
            self.query_one(f"#{self.ERROR_ID}", Static).update(Text(str(exc), style="bold red"))
            return
        self.dismiss(value)

    @on(Input.Submitted)
    def submitted(self) -> None:
        self.action_submit()

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        if event.button.id == self.SUBMIT_ID:
            self.action_submit()
        elif event.button.id == "cancel":
            self.dismiss(None)


class NoteScreen(FormDialog):
    """One line of text for the runner: a focus or avoid note the next research phase reads."""

    ERROR_ID = "note-error"

    def __init__(self, question: str, detail: str = "", placeholder: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="note"):
            yield Static(Text(self.question, style="bold"), id="question")
            if self.detail:
                yield Static(Text(self.detail, style="grey70"))
            yield Input(placeholder=self.placeholder, id="note-text", compact=True)
            yield Static(id="note-error")
            with Horizontal(id="buttons"):
                yield Button("Send (enter)", id="send", variant="primary", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def value(self) -> str:
        text = " ".join(self.query_one("#note-text", Input).value.split())
        if not text:
            raise ValueError("write a note first (esc cancels)")
        return text


def positive(text: str, label: str) -> float | None:
    """A form field as a positive number (None when empty); ValueError naming the field."""
    text = text.strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{label} {text!r}: must be a number") from None
    if not number > 0 or number == float("inf"):
        raise ValueError(f"{label} {text!r}: must be positive")
    return number


class BudgetScreen(FormDialog):
    """A run's new budget (`autoresearch steer budget`): minutes from its start, dollars for machines
    and the model together; an empty field keeps that budget as it is."""

    ERROR_ID = "budget-error"

    def __init__(self, detail: str = "") -> None:
        super().__init__()
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="budget"):
            yield Static(Text("The run's budget (raise it to let a spent budget go on)", style="bold"))
            if self.detail:
                yield Static(Text(self.detail, style="grey70"))
            with Grid(id="run-form"):
                yield Label("Minutes")
                yield Input(
                    placeholder="from the run's start; empty: as it is", id="budget-minutes", compact=True
                )
                yield Label("USD")
                yield Input(placeholder="machines and model; empty: as it is", id="budget-usd", compact=True)
            yield Static(id="budget-error")
            with Horizontal(id="buttons"):
                yield Button("Send (ctrl+s)", id="send", variant="primary", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def value(self) -> dict[str, float]:
        """The form as the command's args; raises ValueError naming the bad field."""
        given = {
            key: value
            for key, label in (("minutes", "Minutes"), ("usd", "USD"))
            if (value := positive(self.query_one(f"#budget-{key}", Input).value, label)) is not None
        }
        if not given:
            raise ValueError("give minutes, dollars or both (esc cancels)")
        return given


class StartRunScreen(FormDialog):
    """The options of `autoresearch run --detach`; empty fields keep the config's values."""

    BINDINGS = [Binding("ctrl+s", "submit", "Start", priority=True)]
    ERROR_ID = "run-error"
    SUBMIT_ID = "start"

    FIELDS: tuple[tuple[str, str, str], ...] = (
        ("name", "Name", "default: the start time"),
        ("waves", "Waves", "stop after this many waves"),
        ("parallel", "Parallel", "workers at once"),
        ("budget", "Minutes", "wall-clock budget"),
        ("max", "Max exps", "candidate experiments at most"),
        ("backend", "Backend", "local or skypilot (default: config)"),
    )

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="start-run"):
            yield Static(Text("Start a run (detached: it outlives this TUI)", style="bold"))
            with Grid(id="run-form"):
                for key, label, hint in self.FIELDS:
                    yield Label(label)
                    yield Input(placeholder=hint, id=f"run-{key}", compact=True)
            yield Checkbox("skip the A/A self-test", id="run-skip-self-test")
            yield Checkbox(
                "autopilot: research phases between waves (mine, generate, patch)", id="run-autopilot"
            )
            yield Static(id="run-error")
            with Horizontal(id="buttons"):
                yield Button("Start (ctrl+s)", id="start", variant="primary", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def request(self) -> RunRequest:
        """The form as a request; raises ValueError naming the bad field."""

        def value(key: str) -> str:
            return self.query_one(f"#run-{key}", Input).value.strip()

        def integer(key: str, label: str) -> int | None:
            text = value(key)
            if not text:
                return None
            if not text.isdigit() or int(text) < 1:
                raise ValueError(f"{label} {text!r}: must be a whole number ≥ 1")
            return int(text)

        minutes: float | None = None
        if value("budget"):
            try:
                minutes = float(value("budget"))
            except ValueError:
                raise ValueError(f"Minutes {value('budget')!r}: must be a number") from None
            if minutes <= 0:
                raise ValueError(f"Minutes {value('budget')!r}: must be positive")
        backend = value("backend") or None
        if backend not in (None, "local", "skypilot"):
            raise ValueError(f"Backend {backend!r}: must be local or skypilot")
        name = value("name") or None
        if name is not None and not all(c.isalnum() or c in "-_." for c in name):
            raise ValueError(f"Name {name!r}: use letters, digits, - _ . only")
        return RunRequest(
            name=name,
            waves=integer("waves", "Waves"),
            parallel=integer("parallel", "Parallel"),
            budget_minutes=minutes,
            max_experiments=integer("max", "Max exps"),
            backend=backend,
            skip_self_test=self.query_one("#run-skip-self-test", Checkbox).value,
            autopilot=self.query_one("#run-autopilot", Checkbox).value,
        )

    def value(self) -> RunRequest:
        return self.request()
