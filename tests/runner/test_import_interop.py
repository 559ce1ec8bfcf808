"""Importing the logs people already have, in every shape they come in.

Each test writes a log in one shape (pi-autoresearch's jsonl as its extension writes it, or
karpathy/autoresearch's results.tsv), imports it into a real workspace database and asserts the
rows it made (runs, experiments, samples, decisions), then reads it back through `history`,
`redecide` and `report` as a user would, on the command line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from click.testing import CliRunner, Result

from kb.db import one, rows
from kb.errors import UserError
from kb.workspace import Workspace
from runner.record import history
from runner.record.importer import TITLE_MAX, ImportResult, import_log
from runner.record.logformats import pi_confidence
from runner.record.logtypes import unknown_status_reason
from runner.record.redecide import redecide
from runner.record.report import write_report
from tests.runner.fixtures import module_workspace
from tui.cli import main


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """One workspace for the module; every test imports files of its own into it."""
    yield from module_workspace(tmp_path_factory, "interop")


def jsonl(path: Path, lines: list[Any], *, bom: bool = False) -> Path:
    text = "".join((x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)) + "\n" for x in lines)
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")
    return path


def config(metric: str = "total_ms", direction: str | None = "lower", **extra: Any) -> dict[str, Any]:
    line: dict[str, Any] = {"type": "config", "name": "session", "metricName": metric, "metricUnit": "ms"}
    if direction is not None:
        line["bestDirection"] = direction
    return {**line, **extra}


def run(n: int, metric: Any, status: str | None = "keep", **extra: Any) -> dict[str, Any]:
    """A run line as pi-autoresearch's log_experiment writes it (timestamp in milliseconds)."""
    line: dict[str, Any] = {
        "run": n,
        "commit": f"c{n:06d}",
        "metric": metric,
        "metrics": {},
        "description": f"experiment {n}",
        "timestamp": 1_770_000_000_000 + n * 60_000,
        "segment": 0,
        "confidence": None,
    }
    if status is not None:
        line["status"] = status
    return {**line, **extra}


def cli(ws: Workspace, *args: str) -> Result:
    return CliRunner(mix_stderr=False).invoke(
        main, ["--workspace", str(ws.root), *args], catch_exceptions=False
    )


def counts(db: sqlite_utils.Database) -> dict[str, int]:
    tables = ["runs", "waves", "experiments", "samples", "decisions", "hypotheses", "hypothesis_sources"]
    return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


def samples_of(db: sqlite_utils.Database, experiment_id: int) -> list[tuple[str, str, float]]:
    return [(s.side, s.metric, s.value) for s in history.samples(db, experiment_id)]


def browse(ws: Workspace, result: ImportResult) -> dict[str, str]:
    """history, redecide and report on every imported run, as a user runs them; their outputs."""
    out: dict[str, str] = {}
    for r in result.runs:
        shown = cli(ws, "history", "--run", r.name)
        assert shown.exit_code == 0, shown.output
        again = cli(ws, "redecide", r.name, "--all")
        assert again.exit_code == 0, again.output
        as_json = cli(ws, "history", "--run", r.name, "--json")
        assert as_json.exit_code == 0 and json.loads(as_json.output)["runs"][0]["name"] == r.name
        written = write_report(ws, ws.db(), r.name)
        out[r.name] = shown.output + "\n" + again.output + "\n" + written.path.read_text()
    return out


# --- hook lines -------------------------------------------------------------------------------------


def test_hook_lines_are_skipped_as_pi_skips_them(ws: Workspace, tmp_path: Path) -> None:
    # The shape of pi-autoresearch's own fixture (tests/jsonl-helpers.test.mjs): hooks around runs.
    log = jsonl(
        tmp_path / "autoresearch.jsonl",
        [
            {"type": "hook", "stage": "before", "exit_code": 0},
            config(name="Segmented session"),
            {"type": "hook", "stage": "before", "exit_code": 0, "duration_ms": 5, "stdout_bytes": 0},
            run(1, 10, metrics={"compile_ms": 4}, description="baseline"),
            {"type": "hook", "stage": "after", "exit_code": 0, "timed_out": False},
            run(2, 9.5, "discard"),
            config(name="Segmented session"),
            {"type": "hook", "stage": "before", "exit_code": 0},
            run(3, 7, metrics={"render_ms": 2}, description="new baseline"),
        ],
    )
    result = import_log(ws.db(), log)
    assert result.ignored == {"hook": 4} and result.skipped == []
    assert (result.lines, result.imported_lines) == (9, 3)
    first, second = result.runs
    assert (first.metric, first.direction, first.experiments, second.experiments) == (
        "total_ms",
        "lower",
        2,
        1,
    )
    db = ws.db()
    base, discard = history.experiments(db, first.id)
    assert samples_of(db, base.id) == [("A", "compile_ms", 4.0), ("A", "total_ms", 10.0)]
    assert samples_of(db, discard.id) == [("A", "total_ms", 10.0), ("B", "total_ms", 9.5)]
    assert discard.decision is not None and discard.decision.verdict == "discard"
    assert discard.effect == pytest.approx(10 / 9.5 - 1)
    (new_base,) = history.experiments(db, second.id)
    assert new_base.meta["line"] == 9 and samples_of(db, new_base.id)[0] == ("A", "render_ms", 2.0)
    assert "4 hook lines skipped" not in cli(ws, "history").output  # history lists runs, not lines
    browse(ws, result)


# --- pi's defaults ----------------------------------------------------------------------------------


def test_a_config_without_direction_means_lower_is_better(ws: Workspace, tmp_path: Path) -> None:
    log = jsonl(tmp_path / "nodir.jsonl", [config(direction=None), run(1, 10.0), run(2, 8.0)])
    result = import_log(ws.db(), log)
    (imported,) = result.runs
    assert imported.direction == "lower" and history.find_run(ws.db(), imported.id).direction == "lower"
    _, faster = history.experiments(ws.db(), imported.id)
    assert faster.effect == pytest.approx(10 / 8 - 1)  # +25%: from 10 ms to 8 ms is better
    assert result.notes == {
        "config line without bestDirection: lower is better (pi-autoresearch's default)": 1
    }
    shown = browse(ws, result)[imported.name]
    assert "+25.00%" in shown


def test_run_lines_without_a_config_line_take_pi_defaults(ws: Workspace, tmp_path: Path) -> None:
    log = jsonl(tmp_path / "headless.jsonl", [run(1, 100), run(2, 90), run(3, 95, "discard")])
    result = import_log(ws.db(), log)
    (imported,) = result.runs
    assert (imported.metric, imported.direction) == ("metric", "lower")
    # The note counts the lines read with pi's defaults, as every other note counts lines.
    assert result.notes == {
        "run lines before any config line: metric `metric`, lower is better (pi's defaults)": 3
    }


def test_an_empty_segment_is_named_not_dropped_in_silence(ws: Workspace, tmp_path: Path) -> None:
    lines = [config(), config(metric="tok_s", direction="higher"), run(1, 50), run(2, 55), config()]
    result = import_log(ws.db(), jsonl(tmp_path / "empty-segment.jsonl", lines))
    (imported,) = result.runs  # the two configs without run lines make no run
    assert (imported.metric, imported.experiments) == ("tok_s", 2)
    assert result.notes == {
        "config line 1 starts a segment with no run lines (the next config line follows): "
        "nothing to import": 1,
        "config line 5 starts a segment with no run lines (the file ends): nothing to import": 1,
    }
    printed = cli(ws, "import", str(jsonl(tmp_path / "again.jsonl", lines)))
    assert printed.exit_code == 0 and "config line 1 starts a segment with no run lines" in printed.output


def test_a_keep_worse_by_its_own_numbers_is_flagged(ws: Workspace, tmp_path: Path) -> None:
    # Seen in real pi logs: the agent kept a line whose value got worse than the last kept one.
    log = jsonl(
        tmp_path / "worse-keep.jsonl",
        [config(), run(1, 100), run(2, 90), run(3, 99, "keep"), run(4, 80, "keep"), run(5, 70, "discard")],
    )
    result = import_log(ws.db(), log)
    (imported,) = result.runs
    db = ws.db()
    _, better, worse, best, dropped = history.experiments(db, imported.id)
    assert (better.status, better.reason) == ("kept", None)
    assert worse.status == "kept"  # the log's word stays, with its numbers beside it
    assert (
        worse.reason == "kept by the log, worse by its numbers (total_ms -9.1% against the last kept value)"
    )
    assert worse.decision is not None and "kept by the log, worse by its numbers" in (
        worse.decision.reason or ""
    )
    assert worse.effect == pytest.approx(90 / 99 - 1)
    assert best.reason is None and best.effect == pytest.approx(99 / 80 - 1)
    assert dropped.reason is None  # a discard that was better is the log's call, not flagged here
    shown = browse(ws, result)[imported.name]
    assert "kept: kept by the log, worse by its numbers" in shown


def test_later_config_lines_keep_what_they_leave_out(ws: Workspace, tmp_path: Path) -> None:
    # pi's updateConfig: name, metricName and metricUnit carry over; bestDirection does not.
    log = jsonl(
        tmp_path / "carry.jsonl",
        [config(metric="tok_s", direction="higher"), run(1, 50), {"type": "config"}, run(2, 40), run(3, 30)],
    )
    first, second = import_log(ws.db(), log).runs
    assert (first.metric, first.direction) == ("tok_s", "higher")
    assert (second.metric, second.direction) == ("tok_s", "lower")
    assert history.find_run(ws.db(), second.id).policy["unit"] == "ms"


# --- zero and negative values -----------------------------------------------------------------------


def test_zero_values_are_samples_judged_as_differences(ws: Workspace, tmp_path: Path) -> None:
    # A count of failures reaching 0, the goal (lower is better); then a crash logged as 0.
    log = jsonl(
        tmp_path / "zero.jsonl",
        [
            config(metric="failures", direction="lower"),
            run(1, 5, description="baseline"),
            run(2, 2, description="fix the parser"),
            run(3, 0, description="fix the last two"),
            run(4, 1, "discard", description="refactor"),
            run(5, 0, "crash", description="crashes"),
        ],
    )
    result = import_log(ws.db(), log)
    (imported,) = result.runs
    db = ws.db()
    base, parser, last, refactor, crash = history.experiments(db, imported.id)
    assert [e.status for e in (base, parser, last, refactor, crash)] == [
        "kept",
        "kept",
        "kept",
        "discarded",
        "crashed",
    ]
    assert parser.effect == pytest.approx(5 / 2 - 1)  # both positive: a ratio
    # 0 is a sample; against 2 it has no ratio, so the decision is a difference and says so.
    assert samples_of(db, last.id) == [("A", "failures", 2.0), ("B", "failures", 0.0)]
    assert last.decision is not None and last.effect is None and last.difference == 2.0
    assert "difference scale" in (last.decision.reason or "")
    assert last.decision.decoded_metrics["failures"] == {
        "candidate": 0.0,
        "baseline": 2.0,
        "scale": "difference",
        "difference": 2.0,
    }
    assert samples_of(db, refactor.id) == [("A", "failures", 0.0), ("B", "failures", 1.0)]
    assert refactor.difference == -1.0 and refactor.decision is not None
    assert refactor.decision.verdict == "discard"
    # A crash's 0 measured nothing: in the record, not a sample.
    assert samples_of(db, crash.id) == [] and crash.meta["values"] == {"failures": 0.0}
    assert imported.kept == 3 and history.find_run(db, imported.id).head_commit == "c000003"
    # No value is stored nowhere: every non-crash value is a sample.
    stored = rows(
        db,
        "SELECT count(*) AS n FROM samples s JOIN experiments e ON e.id = s.experiment_id "
        "WHERE e.run_id = ? AND s.side = 'B'",
        [imported.id],
    )
    assert stored == [{"n": 3}]

    again = redecide(db, imported.name)
    skipped = {s["title"]: s["why"] for s in again.skipped}
    assert skipped["fix the last two"] == "values of failures of 0 or below: no log ratio to judge"
    assert skipped["refactor"] == "values of failures of 0 or below: no log ratio to judge"
    assert [i.title for i in again.items] == ["fix the parser"]
    from tui import data

    assert [r.difference for r in data.run_experiments(db, imported.id).rows] == [None, None, 2.0, -1.0, None]
    text = browse(ws, result)[imported.name]
    assert "Δ+2 (diff)" in text and "Δ-1 (diff)" in text
    assert "2 x values of failures of 0 or below: no log ratio to judge" in text


def test_a_negative_metric_where_higher_is_better(ws: Workspace, tmp_path: Path) -> None:
    log = jsonl(
        tmp_path / "negative.jsonl",
        [
            config(metric="score", direction="higher"),
            run(1, -5.0),
            run(2, -3.0),
            run(3, -1.5),
            run(4, -4, "discard"),
        ],
    )
    result = import_log(ws.db(), log)
    (imported,) = result.runs
    assert imported.kept == 3  # the baseline and two keeps, not "kept 0"
    db = ws.db()
    _, up, further, worse = history.experiments(db, imported.id)
    assert samples_of(db, up.id) == [("A", "score", -5.0), ("B", "score", -3.0)]
    assert (up.difference, further.difference, worse.difference) == (2.0, 1.5, -2.5)
    assert samples_of(db, worse.id) == [("A", "score", -1.5), ("B", "score", -4.0)]
    assert history.find_run(db, imported.id).head_commit == "c000003"
    verdicts = rows(
        db, "SELECT verdict, effect FROM decisions WHERE experiment_id IN (?, ?)", [up.id, worse.id]
    )
    assert verdicts == [{"verdict": "keep", "effect": None}, {"verdict": "discard", "effect": None}]
    text = browse(ws, result)[imported.name]
    assert "Δ+2 (diff)" in text and "Δ-2.5 (diff)" in text
    assert "pi-autoresearch's confidence: not computable" in text  # pi leaves out values of 0 or below


# --- pi-lenient fields, names, BOM ------------------------------------------------------------------


def test_pi_lenient_fields_are_read_as_pi_reads_them(ws: Workspace, tmp_path: Path) -> None:
    log = jsonl(
        tmp_path / "lenient-fields.jsonl",
        [
            config(metric="p50-ms"),
            run(1, 20.0, metrics={"tok/s": 11.5, "t g": 3, "mem": "n/a", "rss_mb": None}),
            run(2, 18.0, None, description="no status"),
            run(3, 17.0, "maybe", description="unknown status"),
            run(4, 25.0, "Discard", description="capitalised"),
            run(5, None, "discard", metrics={"tok/s": 12}, description="metric null"),
            run(6, "12 t/s", "discard", description="metric a string"),
            run(7, 16.0, timestamp="today", confidence="high", asi=["a list"], iteration=3),
        ],
    )
    result = import_log(ws.db(), log)
    assert result.skipped == []
    (imported,) = result.runs
    db = ws.db()
    base, nostatus, unknown, capital, null, text, odd = history.experiments(db, imported.id)
    # Names are stored as written; a non-number in metrics is kept in the record, not a sample.
    assert samples_of(db, base.id) == [("A", "p50-ms", 20.0), ("A", "t g", 3.0), ("A", "tok/s", 11.5)]
    assert base.meta["unread"] == {"mem": "n/a", "rss_mb": None}
    assert [e.status for e in (nostatus, unknown, capital)] == ["kept", "kept", "discarded"]
    assert (nostatus.meta["original_status"], unknown.meta["original_status"]) == (None, "maybe")
    assert (capital.meta["pi_status"], unknown.meta["pi_status"]) == ("keep", "keep")
    assert "the log says 'maybe'" in ((unknown.decision.reason or "") if unknown.decision else "")
    # metric null: the line is there with its other values; no sample and no effect.
    assert null.status == "discarded" and samples_of(db, null.id) == [
        ("A", "tok/s", 11.5),
        ("B", "tok/s", 12.0),
    ]
    assert null.effect is None and "no value of p50-ms" in (
        (null.decision.reason or "") if null.decision else ""
    )
    assert text.meta["unread"] == {"p50-ms": "12 t/s"} and samples_of(db, text.id) == []
    assert result.notes == {
        "a metrics value is not a finite number: no sample, as pi-autoresearch does": 2,
        "no status: read as keep, as pi-autoresearch does": 1,
        "unknown status: read as keep, as pi-autoresearch does": 1,
        "status read as discard (pi-autoresearch reads it as keep)": 1,
        "no metric: no sample (pi-autoresearch reads 0)": 1,
        "metric is not a finite number: no sample (pi-autoresearch reads 0)": 1,
        "timestamp is not a number: ignored, as pi-autoresearch does": 1,
        "confidence is not a number: ignored, as pi-autoresearch does": 1,
    }
    # Fields of the wrong kind that pi ignores are ignored; fields it does not know are kept.
    assert (odd.status, odd.meta["pi_confidence"], odd.meta["asi"]) == ("kept", None, ["a list"])
    assert odd.meta["fields"] == {"iteration": 3} and samples_of(db, odd.id)[-1] == ("B", "p50-ms", 16.0)
    text_out = browse(ws, result)[imported.name]
    assert "1 x no status: read as keep, as pi-autoresearch does" in text_out


def test_a_byte_order_mark_and_a_line_separator_inside_a_string(ws: Workspace, tmp_path: Path) -> None:
    log = jsonl(
        tmp_path / "bom.jsonl",
        [config(metric="tg", direction="higher"), run(1, 40.0), run(2, 44.0, description="a\u2028b\x0cc")],
        bom=True,
    )
    assert log.read_bytes().startswith(b"\xef\xbb\xbf")
    result = import_log(ws.db(), log)
    (imported,) = result.runs
    assert (imported.metric, imported.direction, imported.experiments) == ("tg", "higher", 2)
    faster = history.experiments(ws.db(), imported.id)[1]
    assert faster.title == "a b c" and faster.meta["description"] == "a\u2028b\x0cc"
    assert faster.effect == pytest.approx(0.1)
    assert "+10.00%" in browse(ws, result)[imported.name]


# --- lenient skips ----------------------------------------------------------------------------------


def malformed_log(path: Path) -> Path:
    return jsonl(
        path,
        [
            config(),
            run(1, 10.0),
            "{truncated",
            run(2, 9.0),
            "[1, 2]",
            {"type": "summary", "best": 9.0},
            run(3, 8.0, description=12),
            {"type": "config", "metricName": "total_ms", "bestDirection": "up"},
            run(4, 8.5),
        ],
    )


def test_the_default_is_all_or_nothing(ws: Workspace, tmp_path: Path) -> None:
    log = malformed_log(tmp_path / "malformed.jsonl")
    db = ws.db()
    before = counts(db)
    with pytest.raises(UserError) as caught:
        import_log(db, log)
    assert str(caught.value) == (
        f"{log}:3: not valid JSON (Expecting property name enclosed in double quotes at column 2) "
        "(5 malformed lines; the first is shown); nothing imported (--lenient skips malformed lines)"
    )
    assert counts(db) == before
    failed = cli(ws, "import", str(log))
    assert failed.exit_code == 1 and failed.stdout == "" and failed.stderr.count("\n") == 1
    assert failed.stderr.startswith(f"Error: {log}:3: not valid JSON")
    assert counts(db) == before


def test_lenient_skips_malformed_lines_with_a_warning_each(ws: Workspace, tmp_path: Path) -> None:
    log = malformed_log(tmp_path / "malformed-lenient.jsonl")
    result = cli(ws, "import", str(log), "--lenient")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        f"warning: {log}:3: not valid JSON (Expecting property name enclosed in double quotes at column 2)"
        "; skipped",
        f"warning: {log}:5: not a JSON object; skipped",
        f"warning: {log}:6: unknown line type 'summary' (pi-autoresearch writes config, run and hook lines)"
        "; skipped",
        f"warning: {log}:7: description must be a string; skipped",
        f"warning: {log}:8: config line: bestDirection 'up' must be 'higher' or 'lower'; "
        "read with pi-autoresearch's defaults",
    ]
    assert (
        "9 lines read (jsonl), 3 imported as experiments, 4 malformed lines skipped (--lenient), "
        "1 malformed lines read with pi-autoresearch's defaults (--lenient)"
    ) in result.stdout
    db = ws.db()
    first, second = (
        history.find_run(db, r["name"])
        for r in rows(db, "SELECT name FROM runs WHERE imported_from LIKE ?", [f"{log}#%"])
    )
    assert [e.meta["line"] for e in history.experiments(db, first.id)] == [2, 4]
    assert [e.meta["line"] for e in history.experiments(db, second.id)] == [9]
    assert second.direction == "lower"  # the bad bestDirection took pi's default
    warning = [e for e in history.events(db, run_id=first.id) if e.level == "warning"]
    assert len(warning) == 1
    assert warning[0].message.startswith("5 malformed lines of malformed-lenient.jsonl skipped or read with")
    assert [s["line"] for s in (warning[0].data or {})["skipped"]] == [3, 5, 6, 7, 8]
    report = write_report(ws, db, first.name).path.read_text()
    assert "5 malformed lines of malformed-lenient.jsonl skipped or read with pi's defaults" in report


# --- karpathy/autoresearch's results.tsv -------------------------------------------------------------

# program.md's example, as its loop writes it (tab-separated, a header row).
RESULTS_TSV = (
    "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
    "a1b2c3d\t0.997900\t44.0\tkeep\tbaseline\n"
    "b2c3d4e\t0.993200\t44.2\tkeep\tincrease LR to 0.04\n"
    "c3d4e5f\t1.005000\t44.0\tdiscard\tswitch to GeLU activation\n"
    "d4e5f6g\t0.000000\t0.0\tcrash\tdouble model width (OOM)\n"
    "e5f6a7b\t0.990100\t44.1\tKEEP\tMuon\twith a tab in the description\n"
)


def test_a_results_tsv_imports(ws: Workspace, tmp_path: Path) -> None:
    path = tmp_path / "results.tsv"
    path.write_text(RESULTS_TSV)
    result = import_log(ws.db(), path)
    assert result.format == "tsv" and (result.lines, result.imported_lines) == (6, 5)
    (imported,) = result.runs
    assert (imported.name, imported.metric, imported.direction, imported.kept) == (
        "import-results",
        "val_bpb",
        "lower",
        3,
    )
    db = ws.db()
    base, lr, gelu, wide, muon = history.experiments(db, imported.id)
    assert [e.status for e in (base, lr, gelu, wide, muon)] == [
        "kept",
        "kept",
        "discarded",
        "crashed",
        "kept",
    ]
    assert [e.candidate_commit for e in (base, lr, gelu)] == ["a1b2c3d", "b2c3d4e", "c3d4e5f"]
    assert samples_of(db, lr.id) == [
        ("A", "memory_gb", 44.0),
        ("A", "val_bpb", 0.9979),
        ("B", "memory_gb", 44.2),
        ("B", "val_bpb", 0.9932),
    ]
    assert lr.effect == pytest.approx(0.9979 / 0.9932 - 1)  # lower val_bpb is better
    assert gelu.decision is not None and gelu.decision.verdict == "discard" and gelu.effect is not None
    assert gelu.effect < 0
    assert samples_of(db, wide.id) == [] and wide.meta["values"] == {"val_bpb": 0.0, "memory_gb": 0.0}
    assert muon.title == "Muon with a tab in the description" and muon.meta["original_status"] == "KEEP"
    assert history.pairs(db, muon.id, "val_bpb") == ([0.9932], [0.9901])
    text = browse(ws, result)[imported.name]
    assert "pi-autoresearch's confidence:" in text


def test_results_tsv_detection_format_metric_and_direction(ws: Workspace, tmp_path: Path) -> None:
    path = tmp_path / "karpathy.log"  # no .tsv suffix: the tab-separated header says it
    path.write_text(RESULTS_TSV)
    (auto,) = import_log(ws.db(), path, name="tsv-auto").runs
    assert auto.metric == "val_bpb"
    other = tmp_path / "other.txt"
    other.write_text(RESULTS_TSV)
    chosen = cli(
        ws,
        "import",
        str(other),
        "--format",
        "tsv",
        "--metric",
        "memory_gb",
        "--direction",
        "higher",
        "--json",
    )
    assert chosen.exit_code == 0, chosen.output
    (run_json,) = json.loads(chosen.output)["runs"]
    assert (run_json["metric"], run_json["direction"]) == ("memory_gb", "higher")
    lr = history.experiments(ws.db(), run_json["id"])[1]
    assert lr.effect == pytest.approx(44.2 / 44.0 - 1)
    wrong = cli(ws, "import", str(tmp_path / "other.txt"), "--metric", "nope")
    assert wrong.exit_code == 1 and "no metric column 'nope'" in wrong.stderr
    jsonl_dir = cli(ws, "import", str(jsonl(tmp_path / "x.jsonl", [run(1, 1)])), "--direction", "higher")
    assert jsonl_dir.exit_code == 1 and "--metric and --direction are for a results.tsv" in jsonl_dir.stderr


def test_results_tsv_malformed_rows(ws: Workspace, tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text(RESULTS_TSV + "f6a7b8c\t0.98\t44\tmaybe\tunknown status\nonly\ttwo\n")
    db = ws.db()
    before = counts(db)
    with pytest.raises(
        UserError,
        match=r"bad.tsv:7: status 'maybe' is not keep, discard, crash or checks_failed .*--status "
        r"maybe=keep, discard, crash, checks_failed or skip \(2 malformed",
    ):
        import_log(db, path)
    assert counts(db) == before
    result = import_log(db, path, lenient=True)
    assert [(s.line, s.reason) for s in result.skipped] == [
        (7, unknown_status_reason("maybe")),
        (8, "2 columns; the header has 5"),
    ]
    assert result.imported_lines == 5
    (tmp_path / "noheader.tsv").write_text("a1b2c3d\t0.99\tkeep\n")
    with pytest.raises(UserError, match=r"noheader.tsv:1: no header row: the first line is a row \(status"):
        import_log(db, tmp_path / "noheader.tsv")
    (tmp_path / "otherheader.tsv").write_text("commit\tval_bpb\tresult\na1b2c3d\t0.99\tok\n")
    with pytest.raises(UserError, match="needs a status column"):
        import_log(db, tmp_path / "otherheader.tsv")


# --- huge fields ------------------------------------------------------------------------------------


def test_a_20_mb_description_is_capped_where_shown(ws: Workspace, tmp_path: Path) -> None:
    huge = "word " * 4_000_000  # 20 MB
    log = jsonl(
        tmp_path / "huge.jsonl",
        [config(), run(1, 10.0), run(2, 9.0, description=huge, asi={"hypothesis": huge, "notes": "x"})],
    )
    result = import_log(ws.db(), log)
    (imported,) = result.runs
    db = ws.db()
    _, big = history.experiments(db, imported.id)
    assert len(big.title) == TITLE_MAX and big.title.endswith("…")
    hyp = one(db, "SELECT title, rationale, notes FROM hypotheses WHERE id = ?", [big.hypothesis_id])
    assert hyp is not None and len(hyp["title"]) == TITLE_MAX
    assert len(hyp["rationale"]) < 5_000 and "more characters in the experiment's meta" in hyp["rationale"]
    assert len(hyp["notes"]) < 5_000
    # The full text stays in the record.
    assert big.meta["description"] == huge and big.meta["asi"]["hypothesis"] == huge
    outputs = browse(ws, result)[imported.name]
    assert len(outputs) < 50_000
    from tui import data

    assert max(len(r.title) for r in data.run_experiments(db, imported.id).rows) == TITLE_MAX


# --- pi's confidence, next to a paired test ---------------------------------------------------------


def test_pi_confidence_is_kept_apart_and_computed_per_segment(ws: Workspace, tmp_path: Path) -> None:
    log = jsonl(
        tmp_path / "confidence.jsonl",
        [
            config(metric="total_ms", direction="lower"),
            run(1, 10.0, confidence=None),
            run(2, 9.5, "discard", confidence=None),
            run(3, 11.0, "discard", confidence=2.0),
            run(4, 8.0, confidence=4.0),
            run(5, 10.5, "discard", confidence=4.0),
        ],
    )
    result = import_log(ws.db(), log)
    (imported,) = result.runs
    db = ws.db()
    exps = history.experiments(db, imported.id)
    # The line's own score stays in meta.pi_confidence; the hypothesis column (0..1) stays empty.
    assert [e.meta["pi_confidence"] for e in exps] == [None, None, 2.0, 4.0, 4.0]
    confidences = rows(db, "SELECT confidence FROM hypotheses WHERE dedupe_key LIKE ?", [f"import:{log}#%"])
    assert confidences == [{"confidence": None}] * 4
    shown = cli(ws, "hypotheses", "show", str(exps[3].hypothesis_id))
    assert shown.exit_code == 0 and "confidence ?" in shown.stdout and "confidence 4" not in shown.stdout
    # Values 10, 9.5, 11, 8, 10.5: median 10, MAD 0.5; best kept 8 against the baseline 10: 4.0.
    info = history.find_run(db, imported.id).summary["import"]  # type: ignore[index]
    assert imported.pi_confidence == pytest.approx(4.0) and info["pi_logged"] == 4.0
    assert (info["pi_label"], info["best_kept"], info["baseline"]) == ("likely real", 8.0, 10.0)
    assert info["best_experiment"] == exps[3].id
    assert info["paired"]["verdict"] == "inconclusive" and info["paired"]["pairs"] == 1
    assert info["agree"] is False and imported.agree is False
    text = browse(ws, result)[imported.name]
    assert (
        "pi-autoresearch's confidence: 4.00x its noise floor (likely real); the log's last line says 4.00x"
        in text
    )
    assert (
        "Paired test of the best kept value (8, #" in text
        and ": inconclusive (one measurement of each side" in text
    )
    assert "They disagree: pi-autoresearch calls the gain likely real, the paired test cannot keep it" in text
    # The report's experiments table carries pi's score per line.
    report = write_report(ws, db, imported.name).path.read_text()
    assert "| pi confidence |" in report


def test_pi_confidence_follows_pi_definition() -> None:
    lower, keep = "lower", "keep"
    assert pi_confidence([10, 9.5, 11, 8, 10.5], [keep, "discard", "discard", keep, "discard"], lower) == 4.0
    assert pi_confidence([10, 8], [keep, keep], lower) is None  # fewer than 3 values
    assert pi_confidence([10, 10, 10, 8], [keep] * 4, lower) is None  # MAD 0
    assert (
        pi_confidence([10, 9, 11], [keep, "discard", "discard"], lower) is None
    )  # nothing kept but the baseline
    # Values of 0 or below are left out of the noise and the best, but a baseline of 0 stays 0.
    assert pi_confidence([0, 4, 5, 7, 0], [keep] * 5, "higher") == pytest.approx(7 / 1)
    # higher is better: the best kept is the largest.
    assert pi_confidence([10, 12, 11, 9], [keep, keep, "discard", "discard"], "higher") == pytest.approx(
        2 / 1
    )
