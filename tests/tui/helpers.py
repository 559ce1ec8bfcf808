"""Helpers for the TUI's pilot tests: let workers finish without sleeping blindly."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec

from textual.pilot import Pilot

from tui.app import AutoresearchApp

SLOW_GROUPS = ("poll", "spawn")  # workers that live on; never waited for
P = ParamSpec("P")
AppFactory = Callable[..., AutoresearchApp]


def async_test(fn: Callable[P, Awaitable[None]]) -> Callable[P, None]:
    """Run an async test in a fresh event loop (no pytest-asyncio needed; fixtures still apply)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        async def main() -> None:
            await fn(*args, **kwargs)

        asyncio.run(main())

    return run


async def settle(pilot: Pilot[Any], timeout: float = 10.0) -> None:
    """Wait until the app's workers are done (the poller and process waiters excepted) and the
    messages they posted are handled."""
    app = pilot.app
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause()
        busy = [w for w in app.workers if w.is_running and w.group not in SLOW_GROUPS]
        if not busy:
            await pilot.pause()
            if not [w for w in app.workers if w.is_running and w.group not in SLOW_GROUPS]:
                return
        await pilot.pause(0.02)
    raise AssertionError(f"workers still running after {timeout}s: {[w.name for w in app.workers]}")


async def until(
    pilot: Pilot[Any], condition: Callable[[], Any], timeout: float = 10.0, what: str = ""
) -> Any:
    """Let the app run until `condition()` is true (returns its value)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what or condition}")
