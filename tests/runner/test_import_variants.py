"""The variants real writers produce, imported with the real CLI into a real workspace.

Each test writes a small log in the shape one writer produces (the comment above it names the file
and line it comes from), runs `autoresearch import`, then reads back what `history --run NAME
--json` and `report` say: metric, unit, direction, statuses, baseline, effects, timestamps,
commits. The shapes test_import_interop.py already covers (hooks, pi's defaults, zero values,
malformed lines, program.md's own results.tsv) are not repeated here.

Sources, as read for these tests:
- pi-autoresearch: github.com/davebcn87/pi-autoresearch at 00062fb (extensions/pi-autoresearch/
  jsonl.ts, index.ts, hooks.ts, assets/template.html) and its history (commits named below);
- its forks fan92rus/pi-autoresearch at bc760c3 and monotykamary/pi-autoresearch at bc8c708;
- karpathy/autoresearch at 228791f (program.md) and the results.tsv files of its forks named below;
- skypilot-org/skypilot examples/autoresearch/program.md; uditgoenka/autoresearch at 050e30d.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from click.testing import CliRunner, Result

from kb.errors import UserError
from kb.workspace import Workspace
from runner.record import importer
from runner.record.importer import import_log
from tests.runner.fixtures import make_workspace
from tui.cli import main

T0 = 1_770_000_000_000  # pi's timestamps are Date.now(): milliseconds


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    root = tmp_path_factory.mktemp("variants")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(root))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.delenv("AUTORESEARCH_WORKSPACE", raising=False)
        workspace, _ = make_workspace(root)
        yield workspace


def cli(ws: Workspace, *args: str) -> Result:
    return CliRunner(mix_stderr=False).invoke(
        main, ["--workspace", str(ws.root), *args], catch_exceptions=False
    )


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


def jsonl(path: Path, *lines: dict[str, Any]) -> Path:
    return write(path, "".join(json.dumps(line) + "\n" for line in lines))


def imported(ws: Workspace, path: Path, *args: str) -> dict[str, Any]:
    """`autoresearch import FILE --json`, which must succeed."""
    result = cli(ws, "import", str(path), *args, "--json")
    assert result.exit_code == 0, result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def shown(ws: Workspace, name: str) -> dict[str, Any]:
    """The run as `autoresearch history --run NAME --json` prints it."""
    result = cli(ws, "history", "--run", name, "--json")
    assert result.exit_code == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    out: dict[str, Any] = run
    return out


def report(ws: Workspace, name: str) -> str:
    result = cli(ws, "report", name)
    assert result.exit_code == 0, result.stderr
    return Path(result.stdout.split()[1]).read_text()


def b_value(exp: dict[str, Any], metric: str) -> float | None:
    found = [s["value"] for s in exp["samples"] if s["side"] == "B" and s["metric"] == metric]
    return found[0] if found else None


def a_value(exp: dict[str, Any], metric: str) -> float | None:
    found = [s["value"] for s in exp["samples"] if s["side"] == "A" and s["metric"] == metric]
    return found[0] if found else None


def dump(db: sqlite_utils.Database) -> list[str]:
    return list(db.conn.iterdump())


# --- pi-autoresearch's writers over time --------------------------------------------------------------


def test_every_shape_pi_autoresearch_has_written(ws: Workspace, tmp_path: Path) -> None:
    log = jsonl(
        tmp_path / "history.jsonl",
        # 4a5853d (2026-03-11, index.ts:892): run lines only, no config line, no segment field.
        {"run": 1, "commit": "a1b2c3d", "metric": 100, "metrics": {}, "status": "keep",
         "description": "baseline", "timestamp": T0},
        {"run": 2, "commit": "b2c3d4e", "metric": 90, "metrics": {}, "status": "keep",
         "description": "first gain", "timestamp": T0 + 60_000},
        # 3812fd2 (index.ts:952): a config line without a name. 0e9b642 (index.ts): maxExperiments.
        {"type": "config", "metricName": "total_ms", "metricUnit": "ms", "bestDirection": "lower",
         "maxExperiments": 20},
        # 31e5c75 (2026-03-11): init_experiment reset state.results, so run numbers start again.
        {"run": 1, "commit": "c3d4e5f", "metric": 50, "metrics": {"rss_mb": 12}, "status": "keep",
         "description": "new baseline", "timestamp": T0 + 120_000},
        # cc3583e/170fed4 (segment, confidence); b8130ec: checks_failed.
        {"run": 2, "commit": "d4e5f6a", "metric": 40, "metrics": {"rss_mb": 13}, "status": "checks_failed",
         "description": "wrong result", "timestamp": T0 + 180_000, "segment": 1, "confidence": None},
        # 4fedd13 (index.ts:2425): asi only when given.
        {"run": 3, "commit": "e5f6a7b", "metric": 45, "metrics": {"rss_mb": 11}, "status": "keep",
         "description": "faster", "timestamp": T0 + 240_000, "segment": 1, "confidence": 2.5,
         "asi": {"hypothesis": "fewer allocations"}},
    )  # fmt: skip
    out = imported(ws, log)
    first, second = out["runs"]
    assert (first["metric"], first["direction"], first["experiments"]) == ("metric", "lower", 2)
    assert (second["metric"], second["direction"], second["experiments"]) == ("total_ms", "lower", 3)
    run = shown(ws, second["name"])
    assert run["policy"]["unit"] == "ms" and run["baseline_commit"] == "c3d4e5f"
    assert (run["started_at"], run["ended_at"]) == (1_770_000_120.0, 1_770_000_240.0)
    base, wrong, faster = run["experiments"]
    assert [e["meta"]["run"] for e in run["experiments"]] == [1, 2, 3]  # the log's own numbers
    assert (base["status"], wrong["status"], faster["status"]) == ("kept", "checks_failed", "kept")
    assert a_value(faster, "total_ms") == 50 and b_value(faster, "total_ms") == 45
    assert faster["effect"] == pytest.approx(50 / 45 - 1)
    assert faster["meta"]["pi_confidence"] == 2.5 and faster["meta"]["asi"] == {
        "hypothesis": "fewer allocations"
    }
    assert run["head_commit"] == "e5f6a7b"


def test_a_unitless_config_has_no_unit(ws: Workspace, tmp_path: Path) -> None:
    # index.ts:1594 `state.metricUnit = params.metric_unit ?? ""` then 1615-1620: an empty unit.
    log = jsonl(
        tmp_path / "unitless.jsonl",
        {"type": "config", "name": "score", "metricName": "score", "metricUnit": "",
         "bestDirection": "higher"},
        {"run": 1, "commit": "a1b2c3d", "metric": 3, "metrics": {}, "status": "keep", "description": "base",
         "timestamp": T0, "segment": 0, "confidence": None},
    )  # fmt: skip
    (run,) = imported(ws, log)["runs"]
    assert shown(ws, run["name"])["policy"]["unit"] is None


# --- pi-autoresearch forks ------------------------------------------------------------------------------


def test_fan92rus_fork_lines(ws: Workspace, tmp_path: Path) -> None:
    log = jsonl(
        tmp_path / "fan92rus.jsonl",
        {"type": "config", "name": "ms", "metricName": "total_ms", "metricUnit": "ms",
         "bestDirection": "lower"},
        {"run": 1, "commit": "a1b2c3d", "metric": 100, "metrics": {}, "status": "keep",
         "description": "baseline",
         "timestamp": T0, "segment": 0, "confidence": None},
        # index.ts:3355: a phase's scratch step, no commit or revert, not one of the loop's results.
        {"run": 2, "commit": "b2c3d4e", "metric": 60, "status": "explore", "description": "phase step 1",
         "segment": 0, "phaseStep": 1},
        # index.ts:1001, 3690: budget_exceeded reverts like a crash.
        {"run": 2, "commit": "b2c3d4e", "metric": 0, "metrics": {}, "status": "budget_exceeded",
         "description": "too slow", "timestamp": T0 + 60_000, "segment": 0, "confidence": None},
        # index.ts:4485: a phase's outcome, written without a timestamp or metrics.
        {"run": 3, "commit": "c3d4e5f", "metric": 80, "status": "keep", "description": "phase result",
         "segment": 0, "source": "phase"},
        # index.ts:5264-5273: finalize_experiment's line.
        {"type": "finalize", "reason": "floor reached", "evidence": "", "confidence": 0.9, "best_metric": 100,
         "run_count": 3, "timestamp": T0 + 120_000},
    )  # fmt: skip
    out = imported(ws, log)
    assert out["skipped"] == [] and out["ignored"] == {"finalize": 1, "status explore": 1}
    (run_out,) = out["runs"]
    run = shown(ws, run_out["name"])
    base, slow, phase = run["experiments"]
    assert (slow["status"], slow["meta"]["original_status"]) == ("crashed", "budget_exceeded")
    assert slow["samples"] == [] and slow["decision"] is None
    # The phase result is compared with the last kept value (100), not the scratch step's 60.
    assert (a_value(phase, "total_ms"), b_value(phase, "total_ms")) == (100, 80)
    assert phase["effect"] == pytest.approx(100 / 80 - 1) and phase["meta"]["fields"] == {"source": "phase"}
    # No timestamp: the line before it gives its time, not the moment of the import.
    assert phase["created_at"] == 1_770_000_060.0 and run["ended_at"] == 1_770_000_060.0
    # What the command prints, and --status saying what a word means instead.
    again = write(tmp_path / "fan92rus-again.jsonl", log.read_text())
    printed = cli(ws, "import", str(again))
    assert printed.exit_code == 0, printed.stderr
    assert (
        "6 lines read (jsonl), 3 imported as experiments, 1 lines of status 'explore' skipped, "
        "1 finalize lines skipped as pi-autoresearch skips them"
    ) in printed.stdout
    assert "1 x status 'budget_exceeded' read as crash" in printed.stdout
    mapped = imported(
        ws, write(tmp_path / "fan92rus-explore.jsonl", log.read_text()), "--status", "explore=discard"
    )
    (explored,) = mapped["runs"]
    exps = shown(ws, explored["name"])["experiments"]
    assert [(e["title"], e["status"]) for e in exps] == [
        ("baseline", "kept"),
        ("phase step 1", "discarded"),
        ("too slow", "crashed"),
        ("phase result", "kept"),
    ]


def test_monotykamary_fork_snake_case_config(ws: Workspace, tmp_path: Path) -> None:
    # harness/server.ts:819-828 writes metric_name, metric_unit and direction; its reader
    # (src/lifecycle/handlers.ts:108-113) reads them back. Upstream pi's keys are camelCase.
    log = jsonl(
        tmp_path / "snake.jsonl",
        {"type": "config", "name": "decode", "metric_name": "tok_s", "metric_unit": "tok/s",
         "direction": "higher", "target_value": None, "max_experiments": None, "segment": 0},
        {"run": 1, "commit": "a1b2c3d", "metric": 50.0, "metrics": {}, "status": "keep",
         "description": "baseline", "timestamp": T0, "segment": 0, "confidence": None},
        {"run": 2, "commit": "b2c3d4e", "metric": 55.0, "metrics": {}, "status": "keep",
         "description": "faster", "timestamp": T0 + 1000, "segment": 0, "confidence": None},
    )  # fmt: skip
    (run_out,) = imported(ws, log)["runs"]
    assert (run_out["metric"], run_out["direction"]) == ("tok_s", "higher")
    run = shown(ws, run_out["name"])
    assert run["policy"]["unit"] == "tok/s"
    faster = run["experiments"][1]
    assert faster["effect"] == pytest.approx(0.1) and faster["reason"] is None


# --- nothing half-imported ------------------------------------------------------------------------------


def test_a_failed_import_leaves_the_database_as_it_was(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = ws.db()
    log = jsonl(
        tmp_path / "atomic.jsonl",
        {"type": "config", "name": "a", "metricName": "total_ms", "metricUnit": "ms",
         "bestDirection": "lower"},
        {"run": 1, "commit": "a1", "metric": 10, "status": "keep", "description": "base", "timestamp": T0},
        {"run": 2, "commit": "b2", "metric": 9, "status": "keep", "description": "x", "timestamp": T0 + 1},
        {"type": "config", "name": "b", "metricName": "total_ms", "metricUnit": "ms",
         "bestDirection": "lower"},
        {"run": 3, "commit": "c3", "metric": 8, "status": "keep", "description": "base", "timestamp": T0 + 2},
        {"run": 4, "commit": "d4", "metric": 7, "status": "keep", "description": "y", "timestamp": T0 + 3},
    )  # fmt: skip
    before = dump(db)
    # A write fails in the second segment, after the first segment's rows were written.
    real = importer.samples.insert
    calls = {"n": 0}

    def failing(database: sqlite_utils.Database, sample: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 6:
            raise OSError("disk full")
        return real(database, sample)

    monkeypatch.setattr(importer.samples, "insert", failing)
    with pytest.raises(OSError, match="disk full"):
        import_log(db, log)
    assert calls["n"] == 6 and dump(db) == before
    monkeypatch.undo()
    # A malformed line: one error naming file, line and reason, and nothing written.
    bad = write(
        tmp_path / "atomic-bad.jsonl", log.read_text() + '{"run": 5, "metric": 6, "description": 7}\n'
    )
    with pytest.raises(UserError, match=r"atomic-bad.jsonl:7: description must be a string"):
        import_log(db, bad)
    assert dump(db) == before
    # The same file twice: the second import is refused inside the transaction, nothing changes.
    import_log(db, log)
    after_first = dump(db)
    again = cli(ws, "import", str(log))
    assert again.exit_code == 1 and "already imported" in again.stderr
    assert dump(db) == after_first
