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
from tests.runner.fixtures import module_workspace
from tui.cli import main

T0 = 1_770_000_000_000  # pi's timestamps are Date.now(): milliseconds


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    yield from module_workspace(tmp_path_factory, "variants")


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
    text = cli(ws, "history", "--run", run["name"]).output
    policy = next(line for line in text.splitlines() if line.startswith("  policy "))
    assert "unit" not in policy and "metric=score" in policy, policy


def test_the_effect_against_the_baseline_as_pi_shows_it(ws: Workspace, tmp_path: Path) -> None:
    # pi's baseline is the segment's first line (index.ts:580 findBaselineMetric); its dashboard's
    # "Δ baseline" is (value - baseline) / baseline, none for a value of 0 or below or a baseline of
    # 0 (assets/template.html:956-959); log_experiment prints the same (index.ts:2316-2321).
    log = jsonl(
        tmp_path / "delta.jsonl",
        {"type": "config", "name": "tg", "metricName": "tg", "metricUnit": "t/s", "bestDirection": "higher"},
        {"run": 1, "commit": "a1", "metric": 40.0, "status": "keep", "description": "baseline",
         "timestamp": T0},
        {"run": 2, "commit": "b2", "metric": 44.0, "status": "keep", "description": "up",
         "timestamp": T0 + 1},
        {"run": 3, "commit": "c3", "metric": 42.0, "status": "discard", "description": "less",
         "timestamp": T0 + 2},
        {"run": 4, "commit": "d4", "metric": 0, "status": "crash", "description": "boom",
         "timestamp": T0 + 3},
        {"run": 5, "commit": "e5", "metric": 50.0, "status": "checks_failed",
         "description": "bad", "timestamp": T0 + 4},
    )  # fmt: skip
    (run,) = imported(ws, log)["runs"]
    exps = shown(ws, run["name"])["experiments"]
    assert [e["meta"]["vs_baseline"] for e in exps] == pytest.approx([0.0, 0.1, 0.05, None, 0.25])
    # The effect stays the comparison with the latest kept value (42 against 44 here).
    assert exps[2]["effect"] == pytest.approx(42 / 44 - 1)
    text = report(ws, run["name"])
    assert "| Δ baseline | pi confidence |" in text
    assert "| +10.00% |" in text and "| +25.00% |" in text


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


# --- results.tsv: karpathy/autoresearch and its forks --------------------------------------------------


def test_a_comment_line_and_its_metric_direction(ws: Workspace, tmp_path: Path) -> None:
    # uditgoenka/autoresearch .agents/skills/autoresearch/autoresearch.md:47-49 and 81-86: a
    # `# metric_direction:` comment, then iteration/timestamp/commit/metric/delta/guard columns;
    # statuses baseline, keep (reworked) (fix.md:71), metric-error (83); `-` for no commit (86).
    path = write(
        tmp_path / "loop-results.tsv",
        "# metric_direction: higher_is_better\n"
        "iteration\ttimestamp\tcommit\tmetric\tdelta\tguard\tguard-metric\tstatus\tdescription\n"
        "0\t2026-03-09T10:00:00Z\ta1b2c3d\t72.4\t0.0\tpass\t-\tbaseline\tinitial state\n"
        "1\t2026-03-09T10:10:00Z\tb2c3d4e\t75.0\t2.6\tpass\t-\tkeep\tcache the parse\n"
        "2\t2026-03-09T10:20:00Z\t-\t70.0\t-5.0\tpass\t-\tdiscard\tinline everything\n"
        "3\t2026-03-09T10:30:00Z\tc3d4e5f\t77.5\t2.5\tpass\t-\tkeep (reworked)\tsecond try\n"
        "4\t2026-03-09T10:40:00Z\t-\t0\t0\tfail\t-\tmetric-error\tno number printed\n",
    )
    out = imported(ws, path)
    assert out["ignored"] == {"comment": 1} and out["skipped"] == []
    (run_out,) = out["runs"]
    assert (run_out["metric"], run_out["direction"], run_out["kept"]) == ("metric", "higher", 3)
    run = shown(ws, run_out["name"])
    exps = run["experiments"]
    assert [e["status"] for e in exps] == ["kept", "kept", "discarded", "kept", "crashed"]
    assert [e["candidate_commit"] for e in exps] == ["a1b2c3d", "b2c3d4e", None, "c3d4e5f", None]
    # iteration is a row label, not a metric; the timestamp column gives each row its time.
    assert "iteration" not in exps[1]["meta"]["values"] and exps[1]["meta"]["fields"]["iteration"] == "1"
    assert [e["created_at"] for e in exps] == [
        1773050400.0,
        1773051000.0,
        1773051600.0,
        1773052200.0,
        1773052800.0,
    ]
    assert (run["started_at"], run["ended_at"]) == (1773050400.0, 1773052800.0)
    assert exps[1]["effect"] == pytest.approx(75 / 72.4 - 1) and exps[2]["effect"] == pytest.approx(
        70 / 75 - 1
    )
    assert exps[3]["meta"]["original_status"] == "keep (reworked)"
    assert "direction from the log's `# metric_direction` comment" in " ".join(
        run["summary"]["import"]["notes"]
    )


def test_status_words_of_other_loops(ws: Workspace, tmp_path: Path) -> None:
    # 0xedev/auto-researchtrading results.tsv:2-4: BASELINE, KEEP, REVERT (a Sharpe score).
    path = write(
        tmp_path / "trading.tsv",
        "commit\tscore\tsharpe\tmax_dd\tstatus\tdescription\n"
        "exp0\t0.500\t0.500\t0.00\tBASELINE\tclean branch\n"
        "exp1\t1.079\t1.079\t8.74\tKEEP\t1h fallback\n"
        "exp2\t0.715\t0.715\t4.17\tREVERT\ttighter thresholds\n"
        "exp3\t1.136\t1.136\t9.15\tKEEP\traise meta threshold\n",
    )
    (run_out,) = imported(ws, path)["runs"]
    assert (run_out["metric"], run_out["direction"]) == ("score", "higher")  # the keeps rose
    exps = shown(ws, run_out["name"])["experiments"]
    assert [e["status"] for e in exps] == ["kept", "kept", "discarded", "kept"]
    assert [e["reason"] for e in exps] == [None, None, None, None]
    # Chang-Han-Chen/autoresearch-moe results.tsv: `tentative` (and `repair`) say nothing this
    # import can map: an error naming the word and the option that maps it.
    tentative = write(
        tmp_path / "moe.tsv",
        "commit\tkind\tval_bpb\tmemory_gb\tstatus\tdescription\n"
        "153211f\tbaseline\t0.964088\t29.9\tkeep\tsimple backbone\n"
        "02ba694\tlr\t0.954881\t29.9\tkeep\tlower LR\n"
        "e1f81c1\trouter\t0.954935\t29.9\ttentative\tsigmoid affinity\n",
    )
    db = ws.db()
    before = dump(db)
    failed = cli(ws, "import", str(tentative))
    assert failed.exit_code == 1 and dump(db) == before
    assert f"{tentative}:4: status 'tentative' is not keep, discard, crash or checks_failed" in failed.stderr
    assert "--status tentative=keep" in failed.stderr
    (mapped,) = imported(ws, tentative, "--status", "tentative=discard")["runs"]
    exps = shown(ws, mapped["name"])["experiments"]
    assert [e["status"] for e in exps] == ["kept", "kept", "discarded"]
    assert exps[2]["meta"]["original_status"] == "tentative" and exps[0]["meta"]["fields"] == {
        "kind": "baseline"
    }


def test_the_direction_follows_the_keeps(ws: Workspace, tmp_path: Path) -> None:
    # AlexChen31337/qwen35-moe-offload results.tsv: tok_per_sec, higher is better, no comment.
    text = (
        "commit\ttok_per_sec\tvram_gb\tstatus\tdescription\n"
        "7769d2b\t0.761\t0.0\tkeep\tseparate reads\n"
        "e67e523\t1.848\t0.0\tkeep\tcache k=3\n"
        "193801d\t0.763\t0.0\tdiscard\tbundle reads\n"
        "6e1ac35\t1.853\t0.0\tkeep\tcache k=5\n"
    )
    (run_out,) = imported(ws, write(tmp_path / "qwen.tsv", text))["runs"]
    assert run_out["direction"] == "higher"
    run = shown(ws, run_out["name"])
    assert [e["reason"] for e in run["experiments"]] == [None, None, None, None]
    assert run["experiments"][1]["effect"] == pytest.approx(1.848 / 0.761 - 1)
    notes = " ".join(run["summary"]["import"]["notes"])
    assert "higher is better, as 2 of 2 keeps after the first row raised tok_per_sec" in notes
    # --direction still decides.
    (forced,) = imported(ws, write(tmp_path / "qwen-lower.tsv", text), "--direction", "lower")["runs"]
    assert forced["direction"] == "lower"


def test_placeholder_cells_and_trailing_tabs(ws: Workspace, tmp_path: Path) -> None:
    # FM-gpt/llamacpp-autotune results.tsv: `-` where a value was not measured; a header and
    # rows that end in a tab (an editor's or a spreadsheet's export), CRLF line endings.
    path = write(
        tmp_path / "llamacpp.tsv",
        "config_id\ttg_tok_s\tpp_tok_s\tvram_gb\tppl\tstatus\tdescription\t\r\n"
        "4f9a41c\t29.17\t830.29\t10.1\t4.5807\tkeep\tbaseline\t\r\n"
        "558b915\t24.12\t604.09\t10.3\t-\tdiscard\tflash attn off\r\n"
        "0f76ce9\t30.03\t-\t10.3\t-\tkeep\tserver path\t\r\n"
        "ee2fb7c\t32.17\t-\t11.2\t-\tkeep\tspec draft\r\n",
    )
    out = imported(ws, path)
    assert out["skipped"] == []
    (run_out,) = out["runs"]
    assert (run_out["metric"], run_out["direction"]) == ("tg_tok_s", "higher")
    exps = shown(ws, run_out["name"])["experiments"]
    assert exps[0]["meta"]["values"] == {
        "tg_tok_s": 29.17,
        "pp_tok_s": 830.29,
        "vram_gb": 10.1,
        "ppl": 4.5807,
    }
    assert exps[2]["meta"]["unread"] == {"pp_tok_s": "-", "ppl": "-"}
    assert [e["title"] for e in exps] == ["baseline", "flash attn off", "server path", "spec draft"]
    assert exps[0]["meta"]["fields"] == {"config_id": "4f9a41c"}


def test_skypilot_example_header_order(ws: Workspace, tmp_path: Path) -> None:
    # skypilot-org/skypilot examples/autoresearch/program.md: experiment_id first, status second,
    # no commit column; experiments run in parallel on clusters.
    path = write(
        tmp_path / "skypilot-results.tsv",
        "experiment_id\tstatus\tval_bpb\tmemory_gb\tdescription\n"
        "exp-01\tkeep\t0.997900\t44.0\tbaseline\n"
        "exp-02\tkeep\t0.993200\t44.2\tincrease LR to 0.04\n"
        "exp-03\tdiscard\t1.005000\t44.0\tswitch to GeLU activation\n"
        "exp-04\tcrash\t0.000000\t0.0\tdouble model width (OOM)\n",
    )
    (run_out,) = imported(ws, path)["runs"]
    assert (run_out["metric"], run_out["direction"], run_out["kept"]) == ("val_bpb", "lower", 2)
    exps = shown(ws, run_out["name"])["experiments"]
    assert [e["candidate_commit"] for e in exps] == [None] * 4
    assert exps[1]["effect"] == pytest.approx(0.9979 / 0.9932 - 1)
    assert exps[3]["status"] == "crashed" and exps[3]["samples"] == []


def test_a_row_label_column_is_no_metric(ws: Workspace, tmp_path: Path) -> None:
    # A fork's program.md (index id 65861440278): `phase commit val_loss epoch_time_s epochs status
    # description`, phase 1, 2 or 3: a label that holds numbers. Commits here are full shas.
    sha = ["a1b2c3d4" * 5, "b2c3d4e5" * 5, "c3d4e5f6" * 5]
    path = write(
        tmp_path / "phases.tsv",
        "phase\tcommit\tval_loss\tepoch_time_s\tepochs\tstatus\tdescription\n"
        f"1\t{sha[0]}\t0.109\t120\t10\tkeep\tbaseline\n"
        f"1\t{sha[1]}\t0.104\t118\t10\tkeep\twider\n"
        f"2\t{sha[2]}\t0.111\t121\t10\tdiscard\tdeeper\n",
    )
    (run_out,) = imported(ws, path)["runs"]
    assert (run_out["metric"], run_out["direction"]) == ("val_loss", "lower")
    run = shown(ws, run_out["name"])
    assert [e["candidate_commit"] for e in run["experiments"]] == sha
    assert (run["baseline_commit"], run["head_commit"]) == (sha[0], sha[1])
    assert run["experiments"][1]["meta"]["fields"] == {"phase": "1"}


def test_a_file_without_a_header_row(ws: Workspace, tmp_path: Path) -> None:
    # Alexintosh/flash-moe results.tsv:1: rows only, the status in the 8th column.
    path = write(
        tmp_path / "headless.tsv",
        "HEAD\tQwen3.5-397B-A17B-4bit\t397.0\t17.0\t3.30\t2464\t5.5\tkeep\tC/METAL E2E\n"
        "HEAD\tQwen3.5-397B-A17B-4bit\t397.0\t17.0\t0.56\t0\t5.5\tdiscard\tmmap expert files\n",
    )
    failed = cli(ws, "import", str(path))
    assert failed.exit_code == 1
    assert f"{path}:1: no header row: the first line is a row (status 'keep' in column 8)" in failed.stderr


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
