"""How runner.stats' numbers read: `+1.2%`, `[-0.3%, +2.8%]`, and the two-digit cells of tables."""

from __future__ import annotations

import math


def pct(x: float | None) -> str:
    """A relative change as `+1.2%` (`+inf` / `-inf` when unbounded, `?` when unknown)."""
    if x is None:
        return "?"
    return f"{x:+.1%}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf")


def interval(low: float, high: float) -> str:
    """`[-0.3%, +2.8%]`, or `[not bounded yet]` while too few pairs bound the effect at this look."""
    if low <= -1.0 and math.isinf(high):
        return "[not bounded yet]"
    return f"[{pct(low)}, {pct(high)}]"


def cell_pct(x: float | None) -> str:
    """A table cell: `+1.23%`, blank when unknown or unbounded (tables line up on two digits)."""
    return "" if x is None or not math.isfinite(x) else f"{x:+.2%}"


def cell_interval(low: float | None, high: float | None) -> str:
    """A table cell: `[-0.31%, +2.80%]`, blank when no interval was recorded."""
    if low is None and high is None:
        return ""
    return f"[{cell_pct(low) or '-inf'}, {cell_pct(high) or '+inf'}]"


def finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
