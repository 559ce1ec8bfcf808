"""Only ASCII decimal numbers count as values: METRIC lines, analyze inputs, results.tsv cells.

Python's `\\d` and float() read Arabic-Indic (`١٢`) and fullwidth (`１２`) digits, and `1_000`, as
numbers; pi-autoresearch's Number() does not, and a benchmark printing them is broken, not fast.
"""

from __future__ import annotations

import pytest

from runner.harness.protocol import Metric, Rejected, parse_metric_line, plain_number

NOT_ASCII = [
    "\u0661\u0662",  # Arabic-Indic 12
    "\uff11\uff12",  # fullwidth 12
    "\u0967\u0968",  # Devanagari 12
    "1\u0662",  # mixed
    "\uff11.5",
    "1e\u0662",
    "1_000",
]


@pytest.mark.parametrize("value", NOT_ASCII)
def test_metric_lines_with_non_ascii_digits_are_rejected(value: str) -> None:
    assert float(value) > 0  # what Python alone would have read
    line = f"METRIC x={value}"
    found = parse_metric_line(line)
    assert isinstance(found, Rejected) and "not a plain number" in found.reason and found.text == line


@pytest.mark.parametrize("value", NOT_ASCII + ["nan", "inf", "0x10", "1e999", "", " ", "12 t/s"])
def test_plain_number_takes_ascii_decimal_numbers_only(value: str) -> None:
    assert plain_number(value) is None


@pytest.mark.parametrize(("text", "value"), [("12", 12.0), (" -0.5 ", -0.5), ("1e3", 1000.0), (".5", 0.5)])
def test_plain_numbers(text: str, value: float) -> None:
    assert plain_number(text) == value
    assert parse_metric_line(f"METRIC x={text}") == Metric("x", value)


def test_names_beyond_ascii_stay_names() -> None:
    # A deliberate difference from pi-autoresearch (whose names are ASCII word characters, `.` and
    # `µ`): a name may be written in any script; only its value must be ASCII.
    assert parse_metric_line("METRIC durée_ms=12") == Metric("durée_ms", 12.0)
    assert parse_metric_line("METRIC 吞吐量=3.5") == Metric("吞吐量", 3.5)
