"""A candidate's build output, watched live in the Fleet pane (issue 29: any patch could write the
operator's clipboard through it, 136 times in ten seconds).

A real run on the local fleet (a real `autoresearch run` process, real make and gcc) measures a
patch whose Makefile prints an OSC 52 clipboard write, an OSC 0 title, a screen clear and Rich
markup, then builds slowly. The console follows it: the build's line is in the pane while the build
still runs (the harness streams a step's output line by line), shown inert; the log viewer too. The
job log on disk keeps the bytes as the build printed them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.widgets import Static

from kb.db import one
from runner.hypotheses import add_hypothesis, add_patch
from tests.runner.runner_target import git, live_processes_under, make_workspace
from tests.tui.helpers import AppFactory, async_test, settle, until
from tests.tui.test_terminal_safety import shows_inert
from tui.screens.log import LogScreen

pytestmark = pytest.mark.slow

BUILD_LINE = (
    "\t@printf '\\033]52;c;cm0gLXJmIH4K\\007\\033]0;pwned-title\\007\\033[2J"
    "[bold red]markup[/bold red] building\\n'; sleep 6\n"
)


def hostile_build_diff(target: Path) -> str:
    makefile = target / "Makefile"
    original = makefile.read_text()
    makefile.write_text(original.replace("prog: prog.c\n", "prog: prog.c\n" + BUILD_LINE, 1))
    try:
        return git(target, "diff")
    finally:
        makefile.write_text(original)


@async_test
async def test_build_output_watched_live_in_the_fleet_pane_is_inert(
    app_on: AppFactory, tmp_path: Path
) -> None:
    ws, target = make_workspace(
        tmp_path, fleet={"parallel": 1}, policy={"min_pairs": 3, "batch_pairs": 3, "max_pairs": 3}
    )
    db = ws.db()
    hid = add_hypothesis(db, "Build it differently", status="approved", source_refs=["note:hostile build"])
    assert hid is not None
    add_patch(db, hid, hostile_build_diff(target), author_kind="manual", author="build.patch")
    exe = Path(sys.executable).with_name("autoresearch")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "tui.cli"]
    runner = subprocess.Popen(
        [*argv, "--workspace", str(ws.root), "run", "--skip-validate", "--skip-self-test", "--no-final"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        app = app_on(ws.root, pane="fleet", clock=time.time, poll_interval=0.2, fleet_interval=0.3)
        async with app.run_test(size=(140, 44)) as pilot:
            await settle(pilot)
            tail = app.screen.query_one("#log-tail", Static)
            await until(pilot, lambda: "building" in str(tail.render()), timeout=120, what="the build's line")
            # Live: the build is still sleeping after its line (not one 4 KiB block at its end).
            exp = one(db, "SELECT id, status, phase FROM experiments WHERE kind = 'candidate'")
            assert exp is not None and exp["status"] == "running" and exp["phase"] == "build", exp
            await shows_inert(
                pilot, "^[]52;c;cm0gLXJmIH4K^G^[]0;pwned-title^G^[[2J[bold red]markup[/bold red]"
            )
            await pilot.press("l")
            await settle(pilot)
            assert isinstance(app.screen, LogScreen)
            await until(pilot, lambda: "building" in "\n".join(app.screen.query_one("#log-view").lines))
            await shows_inert(pilot, "^[]52;c;cm0gLXJmIH4K^G", "[bold red]markup[/bold red] building")
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGTERM)
        runner.wait(timeout=60)
    logs = list((ws.root / "logs").rglob("*.log"))
    assert any(b"\x1b]52;c;cm0gLXJmIH4K\x07" in p.read_bytes() for p in logs)  # the log keeps what came
    deadline = time.monotonic() + 30
    while live_processes_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not live_processes_under(tmp_path)
