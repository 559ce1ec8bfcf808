"""The command line prints through one edge (tui/cli/common.py: echo, echo_json, echo_table,
echo_styled, confirm), which shows outside text inert (kb/textsafe.py). A command that printed by
itself (click.echo, print, sys.stdout.write) could send a commit subject's escape sequences to the
operator's terminal raw: this scan refuses it, and the faces' tests replay hostile text through a
pty (tests/cli/test_terminal_safety.py) and through the console (tests/tui/test_terminal_safety.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.foundation.sql_scan import ROOT

EDGE = ROOT / "tui" / "cli" / "common.py"
PRINTERS = {
    ("click", "echo"),
    ("click", "secho"),
    ("click", "style"),
    ("click", "confirm"),
    ("click", "prompt"),
    ("stdout", "write"),
    ("stderr", "write"),
    ("os", "write"),
}


def _printing_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = None
        if isinstance(func, ast.Name) and func.id in {"print", "echo_via_pager", "secho"}:
            name = func.id
        elif isinstance(func, ast.Attribute):
            owner = func.value
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if (owner_name, func.attr) in PRINTERS:
                name = f"{owner_name}.{func.attr}"
        if name:
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
            found.append(f"{where}:{node.lineno}: {name}")
    return found


def test_the_command_line_prints_only_through_its_edge() -> None:
    files = [*(ROOT / "tui").glob("*.py"), *(ROOT / "tui" / "cli").glob("*.py")]
    found = [line for path in files if path != EDGE for line in _printing_calls(path)]
    assert not found, (
        "printing outside tui/cli/common.py (use echo / echo_json / echo_table / echo_styled, "
        "which show outside text inert):\n" + "\n".join(found)
    )


def test_the_scan_sees_a_raw_print(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import click, sys\nclick.echo(x)\nsys.stdout.write(y)\nprint(z)\n")
    found = _printing_calls(sample)
    assert [line.rsplit(": ", 1)[1] for line in found] == ["click.echo", "stdout.write", "print"]


# --- the console ---------------------------------------------------------------------------------

CONSOLE_EDGE = ROOT / "tui" / "text.py"


def _console_bypasses(path: Path) -> list[str]:
    """What would draw outside text around tui/text.py: rich's own Text imported, a notification
    with markup on, a Log written without inert_lines, a Syntax of text not made inert."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "rich.text":
            found.append(f"{where}:{node.lineno}: from rich.text import (use tui.text.Text)")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "notify" and any(
            k.arg == "markup" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
            for k in node.keywords
        ):
            found.append(f"{where}:{node.lineno}: notify(markup=...) (the app's notify is never markup)")
        if name in ("write", "write_line", "write_lines", "Syntax") and node.args:
            first = node.args[0]
            inert = isinstance(first, ast.Call) and getattr(first.func, "id", "") == "inert_lines"
            literal = isinstance(first, ast.Constant)
            method = isinstance(func, ast.Attribute) and not literal
            if not inert and (name == "Syntax" or method):
                found.append(f"{where}:{node.lineno}: {name}(...) of text not passed through inert_lines")
    return found


def test_the_console_draws_outside_text_only_through_its_edge() -> None:
    files = [p for p in (ROOT / "tui").rglob("*.py") if p != CONSOLE_EDGE and "cli" not in p.parts]
    found = [line for path in files for line in _console_bypasses(path)]
    assert not found, "outside text drawn around tui/text.py:\n" + "\n".join(found)


def test_the_console_scan_sees_a_bypass(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from rich.text import Text\n"
        "self.notify(x, markup=True)\n"
        "log.write(line)\n"
        "log.write(inert_lines(line))\n"
        "Syntax(diff, 'diff')\n"
    )
    kinds = [line.split(": ", 1)[1].split("(")[0] for line in _console_bypasses(sample)]
    assert kinds == ["from rich.text import ", "notify", "write", "Syntax"]
