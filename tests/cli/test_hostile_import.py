"""Hostile imported logs (issue 29): out-of-range timestamps and numbers, a 400-digit number, JSON
nested past any sense and a lone surrogate are refused at import with `file:line`, the database
unchanged; rows that already hold an impossible time (written by an older version) do not stop
`history`, `history --run` or `report`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb.db import connect, one, transaction
from kb.workspace import Workspace
from tests.cli.test_bad_input import assert_one_line, real_cli, state

CONFIG = {
    "type": "config",
    "name": "hostile",
    "metricName": "tg",
    "metricUnit": "t/s",
    "bestDirection": "higher",
}


def run_line(n: int, **fields: object) -> dict[str, object]:
    line: dict[str, object] = {
        "run": n,
        "commit": f"{n:07x}",
        "metric": 40.0 + n,
        "status": "keep" if n == 1 else "discard",
        "description": f"line {n}",
        "timestamp": 1764660000 + 60 * n,
    }
    line.update(fields)
    return line


def write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


BAD_LINES: dict[str, tuple[str, str]] = {
    # name -> (the third line as written, what the error says)
    "timestamp far future": (json.dumps(run_line(2, timestamp=1e20)), "timestamp 1e+20 is out of range"),
    "timestamp negative": (json.dumps(run_line(2, timestamp=-5e12)), "is out of range"),
    "400-digit number": (
        json.dumps(run_line(2)).replace('"metric": 42.0', '"metric": ' + "9" * 400),
        "a number of 400 digits is out of range",
    ),
    "400-digit number deep in asi": (
        json.dumps(run_line(2)).replace("}", ', "asi": {"n": ' + "1" * 400 + "}}", 1),
        "a number of 400 digits is out of range",
    ),
    "nested past the recursion limit": (
        json.dumps(run_line(2)).replace("}", ', "asi": ' + "[" * 100_000 + "]" * 100_000 + "}", 1),
        "nested more than 64 levels deep",
    ),
    "nested 200 levels": (
        json.dumps(run_line(2)).replace("}", ', "asi": ' + "[" * 200 + "]" * 200 + "}", 1),
        "nested more than 64 levels deep",
    ),
    "lone surrogate": (
        json.dumps(run_line(2)).replace('"line 2"', '"line \\ud800 2"'),
        "lone surrogate (\\ud800)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_hostile_line_is_refused_with_file_and_line(
    workspace: Workspace, tmp_path: Path, case: str
) -> None:
    written, reason = BAD_LINES[case]
    log = write(tmp_path / "autoresearch.jsonl", [CONFIG, run_line(1), written, run_line(3)])
    before = state(workspace)
    done = real_cli(workspace, "import", str(log))
    line = assert_one_line(done.returncode, done.stdout, done.stderr, 1, f"{log}:3: ", reason)
    assert "nothing imported" in line
    assert state(workspace) == before


def test_lenient_skips_the_hostile_lines_and_imports_the_rest(workspace: Workspace, tmp_path: Path) -> None:
    lines: list[object] = [CONFIG, run_line(1)]
    lines += [written for written, _ in BAD_LINES.values()]
    lines.append(run_line(9))
    log = write(tmp_path / "autoresearch.jsonl", lines)
    done = real_cli(workspace, "import", "--lenient", "--json", str(log))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["imported_lines"] == 2 and result["malformed"] == {"skipped": len(BAD_LINES)}


def test_a_results_tsv_time_out_of_range_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    log = tmp_path / "results.tsv"
    log.write_text(
        "commit\ttg\tstatus\tdescription\ttimestamp\n"
        "a1b2c3d\t40.0\tkeep\tbaseline\t1764660000\n"
        "b2c3d4e\t41.0\tdiscard\tprefetch\t99999999999999999999\n"
    )
    before = state(workspace)
    done = real_cli(workspace, "import", str(log))
    assert_one_line(
        done.returncode, done.stdout, done.stderr, 1, f"{log}:3: ", "timestamp 1e+20 is out of range"
    )
    assert state(workspace) == before


def test_impossible_times_already_stored_do_not_stop_history_or_report(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Rows an older version let in (or a hand edit): every listing shows the number, none crashes."""
    log = write(tmp_path / "autoresearch.jsonl", [CONFIG, run_line(1), run_line(2), run_line(3)])
    done = real_cli(workspace, "import", str(log))
    assert done.returncode == 0, done.stderr
    db = connect(workspace.db_path)
    with transaction(db):
        db.execute("UPDATE runs SET started_at = 1e20, ended_at = 1e300")
        db.execute("UPDATE waves SET started_at = -1e18, ended_at = 1e20")
        db.execute("UPDATE experiments SET started_at = 1e20, ended_at = 1e21")
        db.execute("UPDATE events SET ts = 1e20")
    run = one(db, "SELECT name FROM runs")
    assert run is not None
    for args in (["history"], ["history", "--run", run["name"]], ["history", "--json"]):
        shown = real_cli(workspace, *args)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, (args, shown.stderr)
    assert "1e+20?" in real_cli(workspace, "history").stdout
    for fmt in ("md", "html"):
        out = tmp_path / f"report.{fmt}"
        made = real_cli(workspace, "report", run["name"], "--format", fmt, "--output", str(out))
        assert made.returncode == 0, made.stderr
        assert "1e+20?" in out.read_text()
