"""History pane widgets: the chart of the primary metric over experiments."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from textual.widget import Widget

from tui.data import ChartPoint, MetricSeries
from tui.format import RICH_STATUS_COLOURS, number
from tui.text import Text

BLOCKS = " ▁▂▃▄▅▆▇█"
AXIS_WIDTH = 8


def chart_lines(series: MetricSeries | None, width: int, height: int) -> list[Text]:
    """The chart as `height` lines of `width` cells: one bar per experiment (the candidate's median
    of the primary metric, coloured by status), the wave's baseline as a dotted mark, newest right.

    Pure (no widget), so it is easy to test and to reuse in a report.
    """
    if height < 3 or width < AXIS_WIDTH + 4:
        return [Text("")] * max(height, 0)
    if series is None:
        return [Text("loading…", style="grey50")] + [Text("")] * (height - 1)
    measured = [p for p in series.points if p.candidate is not None or p.baseline is not None]
    better = "higher" if series.direction != "lower" else "lower"
    title = Text(no_wrap=True, overflow="ellipsis")
    title.append(f"{series.metric or 'metric'}", style="bold")
    title.append(f" per experiment ({better} is better): bars candidate median, ┄ baseline", style="grey50")
    if not measured:
        return [title, Text("no measured experiments yet", style="grey50")] + [Text("")] * (height - 2)
    plot_h = height - 2
    columns = width - AXIS_WIDTH
    # One column per experiment when crowded; wider bars (up to 3 cells and a gap) when not.
    step = max(1, min(4, columns // max(1, len(series.points))))
    shown = series.points[-(columns // step) :]
    values = [v for p in shown for v in (p.candidate, p.baseline) if v is not None]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.01 or 1.0
    lo, hi = lo - pad, hi + pad
    grid: list[list[tuple[str, str]]] = [[(" ", "")] * (len(shown) * step) for _ in range(plot_h)]
    for i, point in enumerate(shown):
        for x in range(i * step, i * step + max(1, step - 1)):
            _draw_bar(grid, x, point, lo, hi, plot_h)
    lines = [title]
    for row in range(plot_h):
        label = number(hi - pad, 5) if row == 0 else (number(lo + pad, 5) if row == plot_h - 1 else "")
        line = Text(f"{label:>{AXIS_WIDTH - 1}} ", style="grey50", no_wrap=True)
        for char, style in grid[row]:
            line.append(char, style=style)
        lines.append(line)
    axis = Text(" " * AXIS_WIDTH, no_wrap=True, overflow="ellipsis")
    first, last = f"#{shown[0].experiment_id}", f"#{shown[-1].experiment_id}"
    gap = max(1, len(shown) * step - len(first) - len(last))
    axis.append(first + " " * gap + last if len(shown) > 1 else first, style="grey50")
    lines.append(axis)
    return lines


def _draw_bar(
    grid: list[list[tuple[str, str]]], x: int, point: ChartPoint, lo: float, hi: float, h: int
) -> None:
    colour = RICH_STATUS_COLOURS.get(point.status, "")
    if point.candidate is None:
        grid[h - 1][x] = ("×", "grey50")
    else:
        eighths = round((point.candidate - lo) / (hi - lo) * h * 8)
        eighths = max(1, min(h * 8, eighths))
        for row in range(h):
            from_bottom = h - 1 - row
            fill = min(8, max(0, eighths - from_bottom * 8))
            if fill:
                grid[row][x] = (BLOCKS[fill], colour)
    if point.baseline is not None:
        level = (point.baseline - lo) / (hi - lo) * h
        row = h - 1 - min(h - 1, max(0, int(level)))
        if grid[row][x][0] == " ":
            grid[row][x] = ("┄", "grey70")


class MetricChart(Widget):
    """The history chart; the screen sets `series` after loading it in a worker."""

    DEFAULT_CSS = """
    MetricChart { height: 7; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.series: MetricSeries | None = None

    def show(self, series: MetricSeries | None) -> None:
        self.series = series
        self.refresh()

    def render(self) -> RenderableType:
        lines = chart_lines(self.series, self.size.width, self.size.height)
        return Text("\n").join(lines)
