"""Starting `autoresearch` processes from the TUI (and the MCP server's `start_run`): runs,
hypothesis miners and generators.

The TUI never runs the loop or an LLM itself. It starts the same commands a user would type, each
in a session of its own (start_new_session=True), so quitting the TUI, a Ctrl-C in its terminal
or a dropped SSH session (SIGHUP goes to the terminal's session) does not reach them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class Spawner(Protocol):
    """Starts argv detached, output to log_path; tests may inject their own."""

    def __call__(self, argv: Sequence[str], *, cwd: Path, log_path: Path) -> subprocess.Popen[bytes]: ...


def spawn_detached(argv: Sequence[str], *, cwd: Path, log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            cwd=cwd,
        )


def cli_argv(root: Path, *args: str) -> list[str]:
    """`autoresearch --workspace ROOT ARGS...`, with this interpreter (no PATH lookup)."""
    return [sys.executable, "-m", "tui.cli", "--workspace", str(root), *args]


@dataclass(frozen=True)
class RunRequest:
    """What the start-run dialog asks for; None keeps the config's value."""

    name: str | None = None
    waves: int | None = None
    parallel: int | None = None
    budget_minutes: float | None = None
    budget_usd: float | None = None
    max_experiments: int | None = None
    backend: str | None = None
    skip_self_test: bool = False
    autopilot: bool = False
    """`--autopilot`: research phases between waves."""
    resume: bool = False
    run: int | None = None
    """With `resume`: which run (default: the latest interrupted one)."""

    def args(self) -> list[str]:
        """The `run` arguments: always `--detach --json`, so the runner outlives the TUI."""
        out = ["run", "--detach", "--json"]
        if self.resume:
            return [*out, "--resume", *(["--run", str(self.run)] if self.run is not None else [])]
        for flag, value in (
            ("--name", self.name),
            ("--waves", self.waves),
            ("--parallel", self.parallel),
            ("--budget-minutes", self.budget_minutes),
            ("--budget-usd", self.budget_usd),
            ("--max-experiments", self.max_experiments),
            ("--backend", self.backend),
        ):
            if value is not None and value != "":
                out += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        if self.skip_self_test:
            out.append("--skip-self-test")
        if self.autopilot:
            out.append("--autopilot")
        return out


@dataclass(frozen=True)
class ProcessResult:
    argv: list[str]
    pid: int
    returncode: int | None
    """None while it still runs (we stopped waiting)."""
    log_path: Path
    tail: str
    data: dict[str, Any] | None
    """The JSON object the command printed last (`--json`), if any."""


def log_name(root: Path, what: str, face: str = "tui") -> Path:
    return root / "logs" / f"{face}-{what}-{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns() % 10**6}.log"


def wait(
    proc: subprocess.Popen[bytes],
    argv: Sequence[str],
    log_path: Path,
    *,
    timeout: float | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> ProcessResult:
    """Wait for a spawned process (polling, so a worker can give up when cancelled)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while proc.poll() is None:
        if cancelled() or (deadline is not None and time.monotonic() > deadline):
            break
        time.sleep(0.05)
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return ProcessResult(list(argv), proc.pid, proc.returncode, log_path, _last_line(text), _last_json(text))


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _last_json(text: str) -> dict[str, Any] | None:
    """The last top-level JSON object in a command's output (it may follow progress lines)."""
    start = text.rfind("\n{")
    candidates = [text[start + 1 :]] if start >= 0 else []
    if text.lstrip().startswith("{"):
        candidates.append(text.lstrip())
    for chunk in candidates:
        try:
            value = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None
