"""Plain-text formatting shared by the TUI's widgets (no Textual here: testable and reusable).

Times are shown in UTC so a screen reads the same on every machine (and snapshots stay stable).
"""

from __future__ import annotations

import math

from kb import textsafe

STATUS_STYLES: dict[str, str] = {
    # experiments
    "queued": "dim",
    "running": "bold $accent",
    "kept": "bold $success",
    "discarded": "$error",
    "inconclusive": "$warning",
    "checks_failed": "$error",
    "crashed": "$error",
    "refused": "$error",
    "cancelled": "dim",
    "lost": "$warning",
    "conflict": "$warning",
    "passed": "$success",  # A/A self-test ("failed" as for runs)
    # hypotheses
    "proposed": "",
    "approved": "$success",
    "rejected": "dim",
    "patched": "bold $success",
    "unpatchable": "$warning",
    # runs
    "paused": "$warning",
    "finished": "$success",
    "failed": "$error",
    "interrupted": "$warning",
    # workers
    "busy": "bold $accent",
    "ready": "$success",
    "down": "dim",
}

# Rich (not Textual) colours for renderables built outside the CSS (charts, tables' cells).
RICH_STATUS_COLOURS: dict[str, str] = {
    "queued": "grey50",
    "running": "bold cyan",
    "kept": "bold green",
    "discarded": "red",
    "inconclusive": "yellow",
    "checks_failed": "red",
    "crashed": "red",
    "refused": "red",
    "cancelled": "grey50",
    "lost": "yellow",
    "conflict": "yellow",
    "passed": "green",
    "proposed": "default",
    "approved": "green",
    "rejected": "grey50",
    "patched": "bold green",
    "unpatchable": "yellow",
    "needs_port": "magenta",
    "paused": "yellow",
    "finished": "green",
    "failed": "red",
    "interrupted": "yellow",
    "busy": "bold cyan",
    "ready": "green",
    "down": "grey50",
    "provisioning": "cyan",
    "qualifying": "cyan",
}


def ts(value: float | None, *, seconds: bool = False) -> str:
    """`2026-01-02 00:03` (UTC), or `-`."""
    return textsafe.utc_time(value, "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def duration(seconds: float | None) -> str:
    """`42s`, `3m05s`, `2h07m`, `3d04h`."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d{s % 86_400 // 3600:02d}h"


def pct(value: float | None, *, digits: int = 1) -> str:
    """`+3.2%`, or `-` when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value * 100:+.{digits}f}%"


def interval(low: float | None, high: float | None) -> str:
    """`[+1.0%, +4.1%]`, or `-`."""
    if low is None or high is None:
        return "-"
    return f"[{pct(low)}, {pct(high)}]"


def number(value: float | None, digits: int = 4) -> str:
    """A measurement with `digits` significant digits, or `-`."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}g}"


def clip(text: str | None, width: int) -> str:
    """One inert line of at most `width` characters, with an ellipsis when cut (kb/textsafe.py)."""
    return textsafe.clip(text, width)


def count(n: int) -> str:
    return f"{n:,}"


def page_caption(label: str, offset: int, shown: int, total: int) -> str:
    """`Papers 1–200 of 1,000`."""
    if total == 0:
        return f"{label}: none"
    return f"{label} {offset + 1:,}–{offset + shown:,} of {total:,}"
