"""Snapshots of the main screens at 80x24 and 120x40 on the fixture workspace.

Rendering changes between Textual releases, so the SVGs are recorded under the Textual the project
pins (pyproject.toml); under any other one the first test here fails and says so (no skip: a
mismatch would hide every screen's changes). Update them with `pytest tests/tui/test_snapshots.py
--snapshot-update` after a deliberate change, and look at snapshot_report.html when one fails.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import textual
from textual.pilot import Pilot

from tests.tui.fixtures import TuiFixture
from tests.tui.helpers import AppFactory, settle

SIZES = [(80, 24), (120, 40)]


def pinned_textual() -> str:
    """The `textual==X` pin of pyproject.toml's dependencies: the Textual the SVGs were recorded with."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    [pin] = [m[1] for d in pyproject["project"]["dependencies"] if (m := re.fullmatch(r"textual==(\S+)", d))]
    return pin


def test_the_snapshots_run_under_the_pinned_textual() -> None:
    assert textual.__version__ == pinned_textual(), (
        f"the snapshots are recorded with Textual {pinned_textual()} (pyproject.toml), "
        f"this is {textual.__version__}: install the pin, or re-record them after upgrading it"
    )


Snap = Callable[..., bool]


def keys(*presses: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """Let the first load finish, press keys (waiting for the work each one starts), settle."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        for key in presses:
            if key.startswith("type:"):
                await pilot.press(*key[5:])
                await pilot.pause(0.3)  # the search box waits for typing to stop
            else:
                await pilot.press(key)
            await settle(pilot)
        await settle(pilot)

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("pane", ["knowledge", "hypotheses", "fleet", "history"])
def test_main_screens(snap_compare: Snap, app_on: AppFactory, tui_template: TuiFixture, pane: str,
                      size: tuple[int, int]) -> None:  # fmt: skip
    # History opens on the live run; show the finished one, with its chart and winners.
    presses = ("down",) if pane == "history" else ()
    app = app_on(tui_template.root, pane=pane)
    assert snap_compare(app, terminal_size=size, run_before=keys(*presses))


DETAILS = [
    ("inventory", "knowledge", ("i",), (80, 24)),
    ("search", "knowledge", ("slash", "type:tile"), (120, 40)),
    ("commit", "knowledge", ("f", "down", "down", "down", "enter"), (80, 24)),
    ("reader", "knowledge", ("enter", "down", "down"), (80, 24)),
    ("hypothesis", "hypotheses", ("enter",), (80, 24)),
    ("compare", "history", ("down", "tab", "down", "space", "down", "down", "v"), (120, 40)),
    ("redecide", "history", ("down", "d"), (80, 24)),
    ("help", "fleet", ("question_mark",), (120, 40)),
]


@pytest.mark.parametrize(("name", "pane", "presses", "size"), DETAILS, ids=[d[0] for d in DETAILS])
def test_detail_screens(
    snap_compare: Snap,
    app_on: AppFactory,
    tui_template: TuiFixture,
    name: str,
    pane: str,
    presses: tuple[str, ...],
    size: tuple[int, int],
) -> None:
    app = app_on(tui_template.root, pane=pane)
    assert snap_compare(app, terminal_size=size, run_before=keys(*presses))


def test_hostile_text(snap_compare: Snap, app_on: AppFactory, tui_ws: Path) -> None:
    """Issue 29: a hypothesis title and a fork commit's subject holding an OSC 52 clipboard write,
    an OSC 0 title, a screen clear, hidden text, a bidi override and Rich markup, drawn inert."""
    from kb.db import transaction, update
    from kb.workspace import Workspace
    from tests.hostile_support import PAYLOAD

    db = Workspace(tui_ws).db()
    with transaction(db):
        update(db, "hypotheses", 1, {"title": f"Fuse {PAYLOAD} on the CPU"})  # the first row
    app = app_on(tui_ws, pane="hypotheses")
    assert snap_compare(app, terminal_size=(80, 24), run_before=keys("enter"))
