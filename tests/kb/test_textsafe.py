"""kb/textsafe.py: outside text made visible and inert, the JSON kept exact, times that cannot be
dates shown as numbers (issue 29)."""

from __future__ import annotations

import json

import pytest

from kb.textsafe import clip, html_text, inert, is_inert, json_text, quoted, utc_time
from tests.hostile_support import PAYLOAD, raw_sequences


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("\x1b]52;c;cm0=\x07", "^[]52;c;cm0=^G"),
        ("\x1b[2J", "^[[2J"),
        ("a\x00b\x7fc", "a^@b^?c"),
        ("\x9b31m", "\\x9b31m"),
        ("\u202eevil", "\\u202eevil"),
        ("x\ud800y", "x\\ud800y"),
        ("line\nnext\ttab\rcr", "line^Jnext^Itab^Mcr"),
        ("[bold]markup[/bold]", "[bold]markup[/bold]"),
        ("plain café 日本", "plain café 日本"),
    ],
)
def test_one_line(given: str, shown: str) -> None:
    assert inert(given) == shown
    assert is_inert(inert(given)) and inert(inert(given)) == inert(given)


def test_lines_keep_newlines_and_tabs_but_not_carriage_returns() -> None:
    assert inert("a\r\nb\tc\rd\x1b[8m", lines=True) == "a\nb\tc^Md^[[8m"


def test_the_payload_leaves_nothing_a_terminal_acts_on() -> None:
    assert raw_sequences(PAYLOAD)
    assert not raw_sequences(inert(PAYLOAD)) and not raw_sequences(inert(PAYLOAD, lines=True))


def test_json_is_exact_and_inert() -> None:
    data = {"title": PAYLOAD + "\ud800", f"key{PAYLOAD}": [1, "ok"]}
    text = json_text(data)
    assert not raw_sequences(text)
    text.encode("utf-8")  # a lone surrogate no longer stops the output
    assert json.loads(text) == data
    assert "café" in json_text({"a": "café"})  # readable text stays readable


def test_html_and_clip() -> None:
    shown = "&lt;img src=x onerror=&quot;a&quot;&gt;^[]0;t^G"
    assert html_text('<img src=x onerror="a">\x1b]0;t\x07') == shown
    assert clip("a  b\n\x1b[2J" + "x" * 100, 12) == "a b ^[[2Jxx…"
    title = "Skip " + "word " * 20_000
    assert len(quoted(title)) <= 82 and quoted("it's") == "'it\\'s'"


def test_times_that_no_date_can_show() -> None:
    assert utc_time(0) == "1970-01-01 00:00"
    assert utc_time(None) == "-" and utc_time(None, none="") == ""
    assert utc_time(1e20) == "1e+20?" and utc_time(-1e18) == "-1e+18?"
    assert utc_time(float("inf")) == "inf?" and utc_time(float("nan")) == "?"
