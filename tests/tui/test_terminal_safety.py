"""The console shows outside text inert (issue 29): the History, Hypotheses and Knowledge panes and
their detail screens, on a workspace holding hostile text from its real sources (an imported log,
`kb add-fork` of a fork whose commit subject and author carry escape sequences, a model's title).

Every line the screen would write is read from Textual's compositor (what the driver sends to the
terminal, less the cursor moves): no ESC, BEL, C1 control or bidi override in any of it, the
payload visible as `^[]52;c;...`, its Rich markup as text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from tests.hostile_support import MARKUP, Hostile, hostile_workspace, raw_sequences
from tests.tui.helpers import AppFactory, async_test, settle
from tui.app import AutoresearchApp
from tui.text import Text
from tui.widgets.common import PagedTable


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    yield from hostile_workspace(tmp_path_factory.mktemp("hostile-tui"))


def screen_lines(app: AutoresearchApp) -> list[str]:
    """The text of every cell of the screen, as the compositor hands it to the driver."""
    return ["".join(segment.text for segment in strip) for strip in app.screen._compositor.render_strips()]


async def shows_inert(pilot: Pilot[Any], *shown: str) -> str:
    await settle(pilot)
    text = "\n".join(screen_lines(pilot.app))
    found = raw_sequences(text)
    assert not found, f"raw control sequences on the screen: {found[:5]}\n{text}"
    for needle in shown:
        assert needle in text, f"{needle!r} not on the screen:\n{text}"
    return text


def test_the_console_text_is_inert_and_never_markup() -> None:
    text = Text("a \x1b]52;c;eA==\x07 [bold]b[/bold]\n\tc")
    text.append("\x1b[2J", style="bold")
    text.append_text(Text("\x9b31m"))
    assert text.plain == "a ^[]52;c;eA==^G [bold]b[/bold]\n\tc^[[2J\\x9b31m"
    assert not text.spans or all(span.style == "bold" for span in text.spans)


@async_test
async def test_history_pane(app_on: AppFactory, hostile: Hostile) -> None:
    app = app_on(hostile.ws.root, pane="history")
    async with app.run_test(size=(160, 48)) as pilot:
        await shows_inert(pilot, "^[]52;c;")


@async_test
async def test_hypotheses_pane_and_detail(app_on: AppFactory, hostile: Hostile) -> None:
    app = app_on(hostile.ws.root, pane="hypotheses")
    async with app.run_test(size=(160, 48)) as pilot:
        await shows_inert(pilot, "^[]52;c;", "Model: prefetch weight blocks", "Port evil@")
        for hypothesis in (hostile.model_hypothesis, hostile.mined_hypothesis, hostile.imported_hypothesis):
            table = pilot.app.screen.query_one("#hyp-table", PagedTable)
            table.move_cursor(row=[r.key.value for r in table.ordered_rows].index(str(hypothesis)))
            await pilot.press("enter")
            await shows_inert(pilot, f"#{hypothesis}", "^[]52;c;cm0gLXJmIH4K^G", MARKUP)
            await pilot.press("escape")
            await settle(pilot)


@async_test
async def test_knowledge_pane_commits_and_commit_detail(app_on: AppFactory, hostile: Hostile) -> None:
    app = app_on(hostile.ws.root, pane="knowledge")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await shows_inert(pilot, "faster ^[]52;c;")
        await pilot.press("enter")
        await shows_inert(pilot, "^[]52;c;cm0gLXJmIH4K^G", MARKUP, "Mallory ^[]0;author-title^G[red]x[/red]")


@async_test
async def test_history_pane_survives_impossible_times(app_on: AppFactory, tmp_path: Path) -> None:
    """Rows an older version imported with times past the year 9999 (issue 29: the console exited
    when History drew them): the pane draws, the times shown as numbers."""
    from kb.db import transaction
    from kb.init import TargetSpec, create_workspace
    from runner.record.importer import import_jsonl
    from tests.conftest import make_repo
    from tests.hostile_support import hostile_log

    ws = create_workspace(tmp_path / "ws", TargetSpec(location=str(make_repo(tmp_path / "target"))))
    db = ws.db()
    import_jsonl(db, hostile_log(tmp_path / "autoresearch.jsonl"))
    with transaction(db):
        db.execute("UPDATE runs SET started_at = 1e20, ended_at = 1e300")
        db.execute("UPDATE waves SET started_at = 1e20, ended_at = 1e20")
        db.execute("UPDATE experiments SET started_at = 1e20, ended_at = 1e21")
    app = app_on(ws.root, pane="history")
    async with app.run_test(size=(160, 48)) as pilot:
        await shows_inert(pilot, "1e+20?")
        await pilot.press("down")
        await shows_inert(pilot, "1e+20?")


def test_the_console_in_a_real_terminal_writes_no_payload(hostile: Hostile) -> None:
    """The installed `autoresearch tui` on a pseudo-terminal: its byte stream (Textual's own
    escape sequences and all) holds none of the payload's sequences, and the payload drawn inert."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import subprocess
    import sys
    import termios
    import time

    exe = Path(sys.executable).with_name("autoresearch")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "tui.cli"]
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen(
        [*argv, "--workspace", str(hostile.ws.root), "tui", "--pane", "hypotheses"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TERM": "xterm-256color", "TEXTUAL_ANIMATIONS": "none"},
        start_new_session=True,
    )
    os.close(slave)
    data = b""

    def read_for(seconds: float, until: bytes | None = None) -> None:
        nonlocal data
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until and until in data):
            if select.select([master], [], [], 0.2)[0]:
                try:
                    data += os.read(master, 1 << 16)
                except OSError:
                    return

    try:
        read_for(60, until=b"Model: prefetch")
        read_for(1.0)
        os.write(master, b"q")
        read_for(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        os.close(master)
    assert b"Model: prefetch" in data, data[-2000:]
    for raw in (b"\x1b]52;c;cm0gLXJmIH4K", b"\x1b]0;pwned-title", b"\x1b]0;author-title", "\u202e".encode(),
                b"\xc2\x9b31m", b"\x1b[8mhidden"):  # fmt: skip
        assert raw not in data, raw
    assert b"^[]52;c;" in data
