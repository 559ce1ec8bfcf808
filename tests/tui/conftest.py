"""TUI test setup: the fixture workspace, determinism (no cursor blink, a fixed clock), and helpers
to let workers finish without sleeping blindly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tui.fixtures import TuiFixture, clock, copy_workspace, tui_template  # noqa: F401
from tests.tui.helpers import AppFactory
from tui.app import AutoresearchApp, make_app


@pytest.fixture(autouse=True)
def no_cursor_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blinking cursor is a 0.5 s wall-clock timer: it makes snapshots differ by one cell."""
    from textual.widgets import Input

    monkeypatch.setattr(Input, "cursor_blink", False)


@pytest.fixture
def tui_ws(tui_template: TuiFixture, tmp_path: Path) -> Path:  # noqa: F811
    """A writable copy of the fixture workspace (for tests that steer)."""
    return copy_workspace(tui_template, tmp_path / "ws")


@pytest.fixture
def app_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[AppFactory]:
    """make_app with the tests' defaults: the fixed clock, no background polling or ticking."""
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")

    def factory(root: Path, **kwargs: Any) -> AutoresearchApp:
        options: dict[str, Any] = {"clock": clock, "poll_interval": None, "fleet_interval": None}
        options.update(kwargs)
        return make_app(root, **options)

    yield factory
